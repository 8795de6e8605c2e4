# frozen_string_literal: true

module Bobbin
  class Worker
    # Decides how many jobs to claim and claims them: free slots plus a small prefetch, gathered into one
    # statement per wave; backs off through database outages and reconciles afterwards; and keeps jobs that
    # that were in flight at repeated crashes ("suspects", see Recovery) to one at a time, so a job that kills
    # its process is caught and blamed, while the jobs that merely ran beside it keep their attempts. One at a time for
    # crash_quarantine seconds each: a suspect still running then lets the next start beside it (one that never
    # returned held back every other suspect for good, however many non-suspect jobs ran beside it: a trial).
    class Claimer
      GATHER = 0.003
      PREFETCH_WINDOW = 0.01
      # The next due time is looked for among jobs due after the last claim began, less this much for a database clock
      # a little behind this host's: a job that fell due between the claim and the look is due now, not lost.
      LOOK_BACK = 0.25

      def initialize(worker, store, executor)
        @worker = worker
        @store = store
        @executor = executor
        @rate = 0.0
        @rate_at = Bobbin.monotonic
        @rate_done = executor.completed
        @backlog = false
        @suspect = nil
        @claims = 0
      end

      # Claim statements sent so far (an idle worker should send one per poll, and one per announcement it wakes for),
      # and when the last was sent (epoch seconds): a rate measured between two such instants is exact.
      # `store`: the claiming session (a Store::Guarded), which a stopping worker gives its deadline.
      attr_reader :claims, :last_claim_at, :store

      # Claims what this worker has room for now (waiting up to GATHER for a wave of slots while work is
      # waiting); returns the claimed jobs, [] when there is no room, no work, or no database. `through`: jobs due by
      # then (epoch seconds, the database's clock) are taken too, ahead of their run_at (Pacer#horizon).
      def next_jobs(wait:, through: nil)
        gather(wait) if @backlog
        room = self.room
        @looked = false
        jobs = room.positive? ? claim(room, wait, through) : []
        @backlog = room.positive? && jobs.size == room
        jobs
      end

      # True when the last claim filled every free slot (more work is probably waiting).
      def backlog? = @backlog

      # True while claims fail for want of the database (until one gets through and reconciles): the next one comes after
      # the claim's own backoff, not after an idle poll (a job ready once the database was back waited a whole
      # polling_interval, or for the listener).
      def unavailable? = !@failures.nil?

      # True when a freed slot may find work no claim has seen: the last claim filled every slot, or did not look (no
      # room, or the database failed it), or a crash suspect runs and its fellows were left out of claims.
      def look_again? = @backlog || !@looked || !@suspect.nil?

      # True while a crash suspect this worker claimed keeps the others out of its claims.
      def quarantining? = !@suspect.nil?

      # Seconds until the suspect running alone lets the next one in (crash_quarantine after it was claimed; 0 once
      # that is past), nil when none holds the others back: an idle worker's wait ends then, not at its next poll.
      def quarantine_left
        return nil unless suspect_held?

        [ @suspect_since + Bobbin.config.crash_quarantine - Bobbin.monotonic, 0 ].max
      end

      # Returns this worker's running rows to ready, except `keep`, and announces them; returns how many. `store`:
      # another of the worker's stores to do it through (nil: the claimer's). `reason`, for the release event: "stopping",
      # "quiet" (jobs claimed ahead) or "lost" (jobs a claim took that the worker never heard of).
      def release_all(keep: [], store: nil, reason: "stopping")
        store ||= @store
        keys = store.release(@worker.process_id, keep)
        return 0 if keys.empty?

        Instrumentation.instrument(:release, process_id: @worker.process_id, count: keys.size, reason: reason)
        returned(keys, store)
        keys.size
      end

      # The earliest time a ready job of this worker's unpaused queues that the last claim could not take becomes due
      # (epoch seconds; a past one when it fell due since: a trial's second of two jobs 3 ms apart waited for the next
      # poll); nil when none is waiting or the database is unavailable. On the database's clock (clock_offset), which
      # the look measures: one that moved by more than LOOK_BACK meanwhile (the first, on a host whose clock is off)
      # looks again by the new one.
      def next_run_at
        since = (@last_claim_at || ::Process.clock_gettime(::Process::CLOCK_REALTIME)) - LOOK_BACK
        offset = clock_offset
        found = @store.next_run_at(since + offset)
        (clock_offset - offset).abs < LOOK_BACK ? found : @store.next_run_at(since + clock_offset)
      rescue Store::Unavailable
        nil
      end

      # Now on the database's clock (epoch seconds), as the last look for the next due time measured it.
      def database_now = ::Process.clock_gettime(::Process::CLOCK_REALTIME) + clock_offset

      # Closes the claiming connection.
      def close = @store.close

      private
        # The database's clock less this host's, in seconds (Store::PostgreSQL#clock_offset).
        def clock_offset = @store.clock_offset

        # With work waiting, jobs that started together end together: rather than one claim per freed slot,
        # wait up to GATHER seconds for a quarter of the pool to free up, then claim them in one statement.
        def gather(wait)
          deadline = Bobbin.monotonic + GATHER
          wait.call(deadline - Bobbin.monotonic) while room < @executor.capacity / 4 && Bobbin.monotonic < deadline
        end

        # How many jobs to claim now: the free slots plus the prefetch, less those already waiting for a slot.
        def room = @executor.capacity + prefetch - @executor.busy

        # Jobs claimed beyond the free slots, so that a slot that frees up while a claim is on its way starts
        # its next job at once: as many as this worker finishes in PREFETCH_WINDOW, at most a quarter of the
        # pool. Slow jobs get none, so a job never waits here while another worker could run it.
        def prefetch
          now = Bobbin.monotonic
          if now - @rate_at >= 0.25
            done = @executor.completed
            @rate = (done - @rate_done) / (now - @rate_at)
            @rate_at = now
            @rate_done = done
          end
          (@rate * PREFETCH_WINDOW).floor.clamp(0, @executor.capacity / 4)
        end

        def claim(limit, wait, through)
          @claims += 1
          @last_claim_at = ::Process.clock_gettime(::Process::CLOCK_REALTIME)
          started = Bobbin.monotonic
          jobs = quarantine(@store.claim(@worker.process_id, limit, suspects: suspect_free?, through: through))
          @looked = true
          @failures = reconcile(jobs) if @failures
          jobs = settle_held(jobs)
          # Published once a claim took jobs (an empty one, an idle poll, is not): the claim's own time is in the payload.
          if jobs.any? && Instrumentation.listening?(:claim)
            Instrumentation.instrument(:claim, process_id: @worker.process_id, count: jobs.size, ids: jobs.map(&:id),
                                               duration_ms: ((Bobbin.monotonic - started) * 1000).round(3))
          end
          jobs
        rescue Store::Unavailable => error
          # Given up as the worker stops (Worker#stop): not retried, and said as such.
          return [].tap { Bobbin.logger.warn("bobbin worker #{@worker.process_id} stopping: gave up the claim under way (#{error.message})") } if @worker.stop_asked?

          Bobbin.logger.warn("bobbin worker #{@worker.process_id}: #{error.message}; retrying") unless @failures
          @failures = (@failures || 0) + 1
          wait.call([ 0.1 * (2**@failures), 5 ].min) # a wake (the database answered another session, a notice) ends it
          []
        end

        # A job this worker still holds can come back from a claim. Handed to its executor (the worker was pruned as
        # dead while alive, and its jobs released): it must not start a second time, and its outcome finishes the row.
        # Held only by an unwritten outcome, once that is written the row tells which it was: finished by the outcome
        # (a release came first), or still running under this claim (a retry written an instant before it, not yet
        # struck off). Handed back, the second kind is claimed again and runs; the first is left alone by the guard.
        def settle_held(jobs)
          return jobs if jobs.none? { |job| @worker.held?(job.id) }

          held, fresh = jobs.partition { |job| @worker.held?(job.id) }
          written = held.reject { |job| @worker.running?(job.id) }.map(&:id)
          return fresh if written.empty?

          if @worker.flush_outcomes
            returned(@store.hand_back(@worker.process_id, written))
          else
            @failures ||= 0 # the database went away meanwhile: the first claim after it reconciles
          end
          fresh
        end

        # At most one suspect in flight: the first one claimed runs, any others go straight back.
        def quarantine(jobs)
          return jobs if jobs.none? { |job| job.crashes >= Recovery::SUSPECT }

          suspects = jobs.select { |job| job.crashes >= Recovery::SUSPECT }
          @suspect = suspects.first.id
          @suspect_since = Bobbin.monotonic
          extra = suspects.drop(1).map(&:id)
          returned(@store.hand_back(@worker.process_id, extra)) if extra.any?
          jobs.reject { |job| extra.include?(job.id) }
        end

        # The suspect is out of flight once its outcome is written, not when its perform returns: until then its row
        # reads `running`, and a crash of this process would find it in flight beside the next suspect and blame both.
        # Past crash_quarantine the next suspect may start beside it all the same (a crash then counts against both).
        def suspect_free?
          @suspect = nil unless quarantine_left&.positive?
          @suspect.nil?
        end

        def suspect_held? = !@suspect.nil? && @worker.held?(@suspect)

        # After an outage a claim may have committed without us seeing its rows: hand such jobs back, keeping
        # those handed to the executor, those with an unwritten outcome and `claimed`, the ones the first
        # claim after it returned. (The jobs' idle pooled connections were closed as the claim's new session opened:
        # Worker#close_idle_job_connections.)
        def reconcile(claimed)
          returned(@store.release(@worker.process_id, @worker.held_ids + claimed.map(&:id)))
          Bobbin.logger.info("bobbin worker #{@worker.process_id}: database reachable again")
          Wakeups.reachable! # its listener, backing off, reconnects now: a job enqueued from here on wakes this worker
          nil
        end

        # Jobs this worker returned to their queues (`keys`: the concurrency key of each, see Store#release): those blocked
        # behind their limit are let through now, and idle workers woken. A stopping `bobbin work` may be its host's only
        # Clock: its limited jobs waited blocked for another worker's promotion pass, up to heartbeat_interval (a review).
        def returned(keys, store = @store)
          return if keys.empty?

          announce(store)
          Store.let_through(store, keys.compact)
        end

        # Jobs handed back are ready for any worker (their queues are not known here: every worker with room looks).
        def announce(store = @store)
          store.announce(Wakeups::Notice.new(nil, nil))
        rescue Store::Unavailable
          nil # polling finds them
        end
    end
  end
end
