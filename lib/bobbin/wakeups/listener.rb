# frozen_string_literal: true

module Bobbin
  module Wakeups
    # PostgreSQL: one LISTENing connection per process, on a thread of its own (waiting in libpq releases the
    # GVL, so neither job fibers nor threads wait on it), handing each announcement to this process's workers.
    # A lost connection (a restart, pg_terminate_backend, a network cut) is logged; idle workers poll at
    # polling_interval meanwhile, and the listener reconnects with backoff and wakes every worker once (work
    # may have arrived while it was deaf). A NOTIFY that never comes back (a pooler in transaction mode between
    # Bobbin and PostgreSQL) turns notifications off for the process, with one log line saying so.
    class Listener
      CHANNEL = "bobbin_jobs"
      # Seconds a NOTIFY to ourselves may take to come back before we conclude notifications do not work here.
      PROBE_TIMEOUT = 2.0
      MAX_BACKOFF = 30.0

      # True when a NOTIFY sent from another session reaches a LISTEN on `db_config` within PROBE_TIMEOUT
      # (bobbin doctor). Raises the driver's error when PostgreSQL cannot be reached.
      def self.round_trip?(db_config)
        listener = db_config.new_connection
        sender = db_config.new_connection
        channel = "bobbin_probe_#{::Process.pid}_#{rand(1 << 30)}"
        listener.raw_connection.exec("LISTEN #{channel}")
        sender.raw_connection.exec("NOTIFY #{channel}")
        !listener.raw_connection.wait_for_notify(PROBE_TIMEOUT).nil?
      ensure
        [ listener, sender ].compact.each(&:disconnect!)
      end

      def initialize(db_config, logger: Bobbin.logger)
        @db_config = db_config
        @logger = logger
        @healthy = false
        @stop = Thread::Queue.new
      end

      # Starts listening on a thread; returns self.
      def start
        @thread = Thread.new { run }
        @thread.name = "bobbin-listener"
        self
      end

      # True while the connection listens.
      def healthy? = @healthy

      # Stops listening and closes the connection.
      def stop
        @stop << :stop
        @thread&.join(PROBE_TIMEOUT + 1)
      end

      private
        def run
          delay = 0.5
          until stopping?
            begin
              listen
              delay = 0.5
              receive until stopping?
            rescue PG::Error, ActiveRecord::ActiveRecordError, IOError, SystemCallError => error
              deaf(error)
              break if @stop.pop(timeout: delay) == :stop

              delay = [ delay * 2, MAX_BACKOFF ].min
            ensure
              close
            end
          end
        end

        def listen
          @adapter = @db_config.new_connection
          @connection = @adapter.raw_connection
          @connection.exec("LISTEN #{CHANNEL}")
          return pooled! unless delivers_to_itself?

          @logger.info("bobbin: notifications back; idle workers wake on new work again") if @lost
          @healthy = true
          Wakeups.deliver(nil) if @lost
          @lost = false
        end

        def receive
          @connection.wait_for_notify(0.5) { |channel, _pid, payload| deliver(payload) if channel == CHANNEL }
        end

        def deliver(payload)
          notice = Notice.parse(payload)
          Wakeups.deliver(notice.queues, notice.at)
        end

        # Sends a NOTIFY on the listening connection and waits for it: through PgBouncer in transaction mode the
        # LISTEN and the NOTIFY may land on different server connections, and nothing comes back.
        def delivers_to_itself?
          probe = "bobbin_probe_#{::Process.pid}_#{object_id}"
          @connection.exec("LISTEN #{probe}")
          @connection.exec("NOTIFY #{probe}")
          deadline = monotonic + PROBE_TIMEOUT
          while (left = deadline - monotonic) > 0
            got = @connection.wait_for_notify(left) { |channel, _pid, payload| deliver(payload) if channel == CHANNEL }
            break if got.nil? || got == probe
          end
          @connection.exec("UNLISTEN #{probe}")
          got == probe
        end

        def pooled!
          @logger.warn("bobbin: a NOTIFY did not come back within #{PROBE_TIMEOUT}s (a pooler such as PgBouncer in transaction " \
                       "mode?); notifications are off for this process and idle workers poll every polling_interval. " \
                       "Point workers at PostgreSQL directly, or set notifications: false to skip this check")
          @stop << :stop
        end

        def deaf(error)
          @logger.warn("bobbin: notifications lost (#{error.class}: #{error.message.lines.first&.strip}); idle workers poll every " \
                       "polling_interval until the listener reconnects") unless @lost
          @healthy = false
          @lost = true
          Wakeups.deliver(nil)
        end

        def close
          @healthy = false
          @adapter&.disconnect!
        rescue StandardError
          nil
        ensure
          @adapter = @connection = nil
        end

        def stopping? = !@stop.empty?

        def monotonic = ::Process.clock_gettime(::Process::CLOCK_MONOTONIC)
    end
  end
end
