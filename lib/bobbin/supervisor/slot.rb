# frozen_string_literal: true

module Bobbin
  class Supervisor
    # One process slot of a pool: a forked child (or a thread in async mode) that is restarted when it dies,
    # with a growing delay when it keeps dying at boot.
    class Slot
      QUICK_DEATH = 5

      # Signals a worker process got before its worker trapped them: from its fork (the supervisor's handlers, which
      # it inherits, hold them here instead of writing to the supervisor's pipe) to Worker#start, which then acts on
      # them. A TERM in that window was lost, and the worker ran until killed past the stop's deadline.
      @held = []
      class << self
        attr_reader :held
      end

      def initialize(pool, index)
        @pool = pool
        @index = index
        @failures = 0
        @restart_at = 0
      end

      # Starts the worker (fork or thread) for this slot.
      def start(supervisor)
        @started_at = Bobbin.monotonic
        if supervisor[:async]
          @thread = Thread.new { run_thread(supervisor) }
        else
          @pid = @last_pid = fork_child(supervisor)
        end
      end

      # True when nothing runs for this slot and its restart delay has passed.
      def due? = !running? && Bobbin.monotonic >= @restart_at

      # True while the slot's process or thread exists.
      def running? = !!(@pid || @thread)

      # True while the worker process or thread has not ended.
      def alive?
        return @thread&.alive? unless @pid

        poll_child
        @status.nil?
      end

      # The pid of the forked worker, while there is one.
      attr_reader :pid

      # Returns the exit status once the worker has ended (and forgets the worker), else nil.
      def exited
        status = @pid ? (poll_child || @status) : reap_thread
        return unless status

        @pid = @status = nil
        @failures = Bobbin.monotonic - @started_at < QUICK_DEATH ? @failures + 1 : 0
        @restart_at = Bobbin.monotonic + (@failures.zero? ? 0 : [ 2**@failures, 30 ].min)
        status
      end

      # Makes the worker quiet (Worker#quiet): TSTP to a process (held if it is still booting, see .held), the call
      # to a thread (noted in the slot for a thread still booting).
      def quiet
        @quiet = true
        @pid ? signal(Worker::QUIET_SIGNAL) : @worker&.quiet
      end

      # Has a worker process log its dump (TTIN).
      def dump = (signal(Worker::Backtraces::SIGNAL) if @pid)

      # The Worker of a slot run as a thread (async mode); nil for a process.
      attr_reader :worker

      # Asks the worker to stop: TERM (graceful) or QUIT (immediate). A thread still making its Worker finds the
      # ask in the slot (as `quiet`).
      def stop(graceful:)
        return signal(graceful ? "TERM" : "QUIT") if @pid

        @stop = { timeout: graceful ? nil : 0 }
        @worker&.stop(**@stop)
      end

      # The exit status of the worker process, reaped by the supervisor's wait for any child (Supervisor#reap_adopted).
      def reaped(status) = (@status ||= status)

      # Kills a worker process that outlived the shutdown timeout and waits for it, so that `exited` reports it
      # (and its jobs are recovered) before the supervisor itself exits.
      def kill
        return unless @pid && alive?

        ::Process.kill("KILL", @pid)
        _, @status = ::Process.wait2(@pid)
      rescue Errno::ESRCH, Errno::ECHILD
        @status ||= :gone
      end

      def to_s = "#{name} (#{@last_pid ? "pid #{@last_pid}" : 'thread'}, queues #{@pool.queues.join(',')})"

      # The worker's name, as its process row, process title and the dashboard show it: fibers-50#0.
      def name = "#{@pool.mode}-#{@pool.size}##{@index}"

      private
        # Sends `name` to the worker process; nothing when it is gone.
        def signal(name)
          ::Process.kill(name, @pid)
        rescue Errno::ESRCH
          nil
        end

        def new_worker(supervisor)
          Worker.new(**@pool.worker_options, name: name, supervisor: supervisor)
        end

        # Forks the worker. An app's after-fork hook (ActiveSupport::ForkTracker.after_fork, Process._fork) that raises in
        # the child raises from `fork` itself, outside the block: the child unwound the supervisor's own stack, deleting
        # the supervisor's process row as it exited (a review). It ends as a worker that crashed at boot instead.
        def fork_child(supervisor)
          parent = ::Process.pid
          fork { run_child(supervisor) }
        rescue Exception => error # rubocop:disable Lint/RescueException -- a child must never run the parent's ensure or at_exit
          raise if ::Process.pid == parent

          log_crash("bobbin worker #{::Process.pid}", error)
          exit!(1)
        end

        # The signals that reach the child before its worker traps them are held (.held) and acted on once it has.
        def run_child(supervisor)
          worker = new_worker(supervisor)
          worker.start(held_signals: Slot.held)
          exit!(worker.exit_status)
        rescue Exception => error # rubocop:disable Lint/RescueException -- a child must never run the parent's at_exit hooks
          log_crash("bobbin worker #{::Process.pid}", error)
          exit!(1)
        end

        # Logs a worker's end by an error. A database that is down as the worker boots (it was restarted during an
        # outage) is one warning line, not a crash: the slot starts it again, with a growing delay, until it is back.
        # Otherwise the error, and where it was raised unless Bobbin raised it on purpose (a configuration it refuses
        # says all there is to say).
        def log_crash(who, error)
          if error.is_a?(Store::Unavailable) || Store.outage?(error)
            return Bobbin.logger.warn("#{who} stopped: the database is unavailable (#{Store.reason(error)}); the supervisor starts it again")
          end

          lines = [ "#{error.class}: #{error.message}", *(error.backtrace&.first(15) unless error.is_a?(Bobbin::Error)) ]
          Bobbin.logger.error("#{who} crashed: #{lines.join("\n    ")}")
        end

        # Any exception ends the worker as a crash of its thread alone: one that is not a StandardError (an Interrupt or
        # Exception a job's watchdog thread raised into the worker's thread, a stack overflow) came out of `@thread.value`
        # in the supervisor's loop, and ended the whole process, every pool with it (a review).
        def run_thread(supervisor)
          @worker = new_worker(supervisor.merge(pid: nil))
          @worker.quiet if @quiet
          @worker.stop(**@stop) if @stop
          @worker.run
          :stopped
        rescue Exception => error # rubocop:disable Lint/RescueException -- a worker thread's end must not be the supervisor's
          log_crash("bobbin worker thread", error)
          :crashed
        end

        def poll_child
          return @status if @status

          pid, status = ::Process.wait2(@pid, ::Process::WNOHANG)
          @status = status if pid
        rescue Errno::ECHILD
          @status = :gone
        end

        # A thread killed (a fiber job's Thread.exit or Thread#kill ends its worker's thread) has no value: it was taken
        # for one still running, so its end was never said and it was restarted at once, however fast it kept dying.
        def reap_thread
          return if @thread.nil? || @thread.alive?

          result = @thread.value || :killed
          @thread = nil
          result
        end
    end
  end
end
