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
    # Extra runs a job gets when its process dies under it, beyond its own retries; then it fails.
    attr_accessor :crash_retries
    # Where Bobbin writes its log lines.
    attr_accessor :logger
    # The worker pools `bobbin start` runs (Pool objects); set with `workers=`.
    attr_reader :pools

    def initialize
      @max_argument_bytes = 1_048_576
      @retention = 86_400
      @shutdown_timeout = 25
      @heartbeat_interval = 10
      @process_alive_threshold = 60
      @polling_interval = 1.0
      @fiber_db_concurrency = 3
      @crash_retries = 2
      @logger = default_logger
      @pools = [ Pool.new(queues: [ "*" ], mode: :fibers, size: 100, processes: 1, polling_interval: @polling_interval) ]
    end

    # Sets the pools from a list of hashes: `[{ queues: ["chat"], fibers: 100, processes: 2 }, ...]`.
    def workers=(list)
      use_workers(list)
    end

    # Like `workers=`, with errors that say where the list came from.
    def use_workers(list, where: "workers")
      raise ConfigurationError, "#{where}: must be a list of pools, got #{list.inspect}" unless list.is_a?(Array) && list.any?

      @pools = list.each_with_index.map { |hash, index| Pool.parse(hash, "#{where}[#{index}]") }
    end

    private
      def default_logger
        require "logger"
        Logger.new($stdout, level: Logger::INFO, progname: "bobbin")
      end
  end
end
