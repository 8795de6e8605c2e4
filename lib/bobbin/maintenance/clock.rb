# frozen_string_literal: true

module Bobbin
  module Maintenance
    # The host's fast housekeeping, on a thread of its own and its own timing: it wakes for each recurring tick
    # (so an every-second task ticks every second), when a blocked job set to run later falls due (so a limited job's
    # `wait:` starts on time), and at least once a second lets blocked jobs whose key has room through (a holder's
    # duration ran out, a crashed holder was recovered).
    class Clock
      TICK = 1.0
      # Wakes this much after a blocked job's due time, so the database's clock has passed it too (as Worker::Pacer).
      SLACK = 0.001
      # Seconds at least between passes woken for blocked jobs' due times: limited jobs set to run a millisecond apart
      # make at most 100 passes a second, not one each.
      BLOCKED_GAP = 0.01

      # Starts the clock thread; `who` names the process in log lines.
      def self.start(who, **) = new(who, **).tap(&:start)

      # `scheduler`: nil runs no recurring pass (a draining worker's clock). `guard`: runs each pass's queries (a
      # supervisor's Supervisor::ForkLock, which keeps its forks out of them).
      def initialize(who, scheduler: Recurring::Scheduler.new, guard: nil)
        @who = who
        @scheduler = scheduler
        @guard = guard
        @outage = OutageLog.new("bobbin #{who}: clock")
        @signal = Thread::Queue.new
      end

      # Starts the thread.
      def start
        @thread = Thread.new { run }
        @thread.name = "bobbin-clock"
        self
      end

      # Seconds `stop` waits for a pass under way by default.
      STOP_WAIT = 5

      # Tells the thread to stop once its pass under way (if any) ends; `stop` waits for it.
      def stop_soon = @signal << :stop

      # Stops the thread and waits for it, at most `within` seconds.
      def stop(within = STOP_WAIT)
        stop_soon
        @thread&.join(within)
      end

      private
        def run
          loop { break if @signal.pop(timeout: tick) == :stop }
        end

        # Runs the services once (its queries, once a second, kept out of the app's log); returns how long to sleep
        # before the next run. Blocked jobs are let through even when the recurring pass fails.
        def tick
          next_tick = guarded { Maintenance.quietly { services } }
          @outage.succeeded
          wait = next_tick ? next_tick - Time.now : TICK
          wait.clamp(0.0, TICK)
        rescue ActiveRecord::ActiveRecordError => error
          @outage.failed(error)
          TICK
        rescue StandardError => error
          Bobbin.logger.error("bobbin #{@who}: clock error #{error.class}: #{error.message}")
          TICK
        end

        def guarded(&) = @guard ? @guard.querying(&) : yield

        # The recurring pass, then the promotion whatever the pass did; then the pass's error, if any, for the log.
        # Returns when to run next: the next recurring tick or the next blocked job's due time, whichever comes first.
        def services
          next_tick = begin
            @scheduler&.pass
          rescue StandardError => error
            error
          end
          Store.promote_due
          blocked_due = Store.next_blocked_due&.then { |seconds| Time.now + [ seconds + SLACK, BLOCKED_GAP ].max }
          next_tick.is_a?(Exception) ? raise(next_tick) : [ next_tick, blocked_due ].compact.min
        end
    end
  end
end
