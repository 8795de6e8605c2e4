# frozen_string_literal: true

module Bobbin
  # Process-wide settings; `Bobbin.configure { |c| ... }` changes them, workers read them at boot.
  class Configuration
    # Largest JSON argument payload accepted at enqueue, in bytes.
    attr_accessor :max_argument_bytes
    # Seconds a succeeded job stays in the table before cleanup deletes it (nil keeps forever).
    attr_accessor :retention
    # Seconds a stopping worker waits for in-flight jobs before returning them to ready.
    attr_accessor :shutdown_timeout
    # Seconds between a process's heartbeats.
    attr_accessor :heartbeat_interval
    # Seconds after which a silent process is presumed dead and its jobs recovered.
    attr_accessor :process_alive_threshold
    # Seconds an idle worker waits before polling again.
    attr_accessor :polling_interval
    # Database connections a fiber pool's jobs share (Active Record >= 7.2 releases between queries).
    attr_accessor :fiber_db_concurrency
    # Where Bobbin writes its log lines.
    attr_accessor :logger

    def initialize
      @max_argument_bytes = 1_048_576
      @retention = 86_400
      @shutdown_timeout = 25
      @heartbeat_interval = 10
      @process_alive_threshold = 60
      @polling_interval = 1.0
      @fiber_db_concurrency = 3
      @logger = default_logger
    end

    private
      def default_logger
        require "logger"
        Logger.new($stdout, level: Logger::INFO, progname: "bobbin")
      end
  end
end
