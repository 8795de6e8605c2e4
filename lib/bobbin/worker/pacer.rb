# frozen_string_literal: true

module Bobbin
  class Worker
    # How long an idle claim loop sleeps: until the earliest time a known job of its queues becomes due (so
    # `set(wait: 5.seconds)` starts at 5.00 s), or the next safety poll — every polling_interval, or every
    # notified_polling_interval (if longer) while notifications reach this process. Due times come from
    # announcements (any thread) and from the database: at boot, once the known one has passed, and at each poll.
    # Due times are the database's, which judges when a job is due by its own clock: `now` is on it too
    # (Claimer#database_now).
    class Pacer
      # Wakes this much before a due time and claims what is due by then (Claimer#next_jobs' `through`): the claim's
      # round trip is behind the job by its run_at, which it then waits for (ClaimedJob#due). Woken for the due time
      # itself, a job scheduled 2 s ahead started a millisecond of slack plus a claim's round trip late (p50 2.3–2.7 ms
      # on the bench's 2-core machine, p99 6–8 ms).
      LEAD = 0.01
      # A due time's claim takes jobs due this little after it too: a run_at read back as epoch seconds and sent again
      # may come back a microsecond later than the row's.
      ROUNDING = 0.001

      def initialize(polling_interval, notified_polling_interval)
        @polling_interval = polling_interval
        @notified_polling_interval = [ notified_polling_interval, polling_interval ].max
        @lock = Mutex.new
        @due = nil
        @refreshed_at = nil
      end

      # Seconds between safety polls while notifications do not reach this process.
      attr_reader :polling_interval

      # Notes that a job of this worker's queues becomes due at `at` (epoch seconds).
      def note(at)
        @lock.synchronize { @due = at if @due.nil? || at < @due }
      end

      # Makes the next `refresh` ask the database: what was committed while no notice could reach this process (its
      # listener not listening yet, or any more) is known from there only.
      def stale! = @lock.synchronize { @refreshed_at = nil }

      # True when `at` comes before the due time this pacer waits for (a sleeping loop should recompute its wait).
      def sooner?(at) = @lock.synchronize { @due.nil? || at < @due }

      # Asks the block for the earliest due time in the database when the one known has passed or a poll
      # interval went by since the last look.
      def refresh(now)
        due = refreshed_at = nil # read apart, no Array: the loop idles once per job
        @lock.synchronize do
          due = @due
          refreshed_at = @refreshed_at
        end
        return unless refreshed_at.nil? || (due && due <= now) || now - refreshed_at >= poll_interval

        found = yield
        @lock.synchronize do
          @due = nil if @due && @due <= now
          @due = found if found && (@due.nil? || found < @due)
          @refreshed_at = now
        end
      end

      # Seconds to sleep with nothing to claim: until LEAD before the next due time, or the next poll.
      def idle_wait(now)
        poll = poll_interval
        due = @lock.synchronize { @due }
        due ? (due - LEAD - now).clamp(0.0, poll) : poll
      end

      # What a claim at `now` may take ahead of its run_at (epoch seconds, Claimer#next_jobs' `through`): the jobs due by
      # the next due time, once that is LEAD away or less; nil otherwise.
      def horizon(now)
        due = @lock.synchronize { @due }
        due + ROUNDING if due && due - LEAD <= now
      end

      # A claim took the jobs due by `through` (a horizon): the due time it covered is done with, and the next refresh
      # looks for the one after it.
      def claimed_through(through)
        @lock.synchronize do
          @due = nil if @due && @due <= through
          @refreshed_at = nil
        end
      end

      # The safety poll's interval now.
      def poll_interval = Wakeups.listening? ? @notified_polling_interval : @polling_interval
    end
  end
end
