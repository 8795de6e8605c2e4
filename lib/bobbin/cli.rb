# frozen_string_literal: true

require "optparse"

module Bobbin
  # `bobbin COMMAND [options]`: the command line for workers and operators.
  class CLI
    USAGE = <<~TEXT
      Usage: bobbin COMMAND [options]
        work     run one worker pool in the foreground (TERM/INT: graceful stop, QUIT: immediate)
        migrate  create or upgrade Bobbin's tables
        counts   print job counts by state
    TEXT

    # Runs the command in `argv`; returns the process exit status.
    def self.start(argv) = new.start(argv)

    def start(argv)
      command = argv.shift
      case command
      when "work" then work(argv)
      when "migrate" then boot({}) && Bobbin.migrate! && 0
      when "counts" then boot({}) && puts(JSON.pretty_generate(Bobbin.counts)) || 0
      else
        warn(USAGE)
        command.nil? || %w[-h --help help].include?(command) ? 0 : 64
      end
    rescue Bobbin::ConfigurationError, OptionParser::ParseError => error
      warn("bobbin: #{error.message}")
      78
    end

    private
      def work(argv)
        options = { queues: [ "*" ] }
        worker_parser(options).parse!(argv)
        boot(options)
        worker = Worker.new(**options.slice(:queues, :fibers, :threads, :polling_interval, :shutdown_timeout))
        options[:drain] ? worker.run_until_empty : worker.start
        0
      end

      def worker_parser(options)
        OptionParser.new do |o|
          o.banner = "Usage: bobbin work [options]"
          o.on("-q", "--queues LIST", Array, "queues, in order; * and prefix* wildcards (default *)") { |v| options[:queues] = v }
          o.on("--fibers N", Integer, "run up to N jobs as fibers on one event loop") { |v| options[:fibers] = v }
          o.on("--threads N", Integer, "run up to N jobs on a pool of N threads") { |v| options[:threads] = v }
          o.on("--polling-interval SECONDS", Float, "idle wait between claims") { |v| options[:polling_interval] = v }
          o.on("--shutdown-timeout SECONDS", Float, "wait this long for jobs on TERM") { |v| options[:shutdown_timeout] = v }
          o.on("-r", "--require FILE", "load job classes from FILE (repeatable)") { |v| (options[:require] ||= []) << v }
          o.on("-d", "--database URL", "database URL (default DATABASE_URL or the Rails app's)") { |v| options[:database] = v }
          o.on("--drain", "run until no job is due, then exit") { options[:drain] = true }
        end
      end

      def boot(options)
        if File.exist?("config/environment.rb") && options[:database].nil?
          require File.expand_path("config/environment.rb")
        else
          Bobbin.connect(options[:database] || ENV["DATABASE_URL"])
        end
        Array(options[:require]).each { |file| require File.expand_path(file) }
        true
      end
  end
end
