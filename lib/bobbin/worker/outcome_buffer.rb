# frozen_string_literal: true

module Bobbin
  class Worker
    # Collects job outcomes and writes them in batches: after `interval` seconds or `batch` outcomes, whichever first.
    # `on_written` (optional) is called on the writing thread after each batch is written.
    class OutcomeBuffer
      def initialize(store, process_id, interval: 0.005, batch: 500, logger: Bobbin.logger, on_written: nil)
        @on_written = on_written
        @store = store
        @process_id = process_id
        @interval = interval
        @batch = batch
        @logger = logger
        @outage = OutageLog.new("bobbin worker #{process_id}: writing job outcomes", logger: logger)
        @pending = []
        @pending_attempts = {} # id => the attempt it ran as
        @written = 0
        @lock = Mutex.new
        @flush_lock = Mutex.new
        @signal = Thread::Queue.new
      end

      # Adds an outcome; the first one of a batch wakes the flusher.
      def <<(outcome)
        first = @lock.synchronize do
          @pending << outcome
          @pending_attempts[outcome.id] = outcome.attempts
          @pending.size == 1 || @pending.size == @batch
        end
        @signal << :outcome if first
      end

      # How many outcomes have been written so far.
      attr_reader :written

      # Ids of jobs whose outcome is known but not yet written, including those a flush is writing now: until that
      # write commits, their rows still read `running`, and a release that left them out would put them back to ready.
      def pending_ids = @lock.synchronize { @pending_attempts.keys }

      # The same, with the attempt each ran as: `{ id => attempts }`.
      def pending_attempts = @lock.synchronize { @pending_attempts.dup }

      # True while job `id`'s outcome is known but not yet written (also while a flush is writing it).
      def pending?(id) = @lock.synchronize { @pending_attempts.key?(id) }

      # True while outcomes cannot be written (the database refuses this worker's writes for now).
      def failing? = @outage.failing?

      # Flushes until `stop`; on a database outage keeps the outcomes and tries again.
      def run
        until @signal.pop == :stop
          sleep(@interval) if @lock.synchronize { @pending.size < @batch }
          break unless flush_with_retry
        end
      end

      # Makes `run` return after it writes what it holds.
      def stop = @signal << :stop

      # Writes everything pending now (after any write already under way) and returns how many; nil (keeping
      # them) when the database is unavailable.
      def flush
        @flush_lock.synchronize { write(@lock.synchronize { @pending.slice!(0, @pending.size) }) }
      end

      private
        def write(outcomes)
          return 0 if outcomes.empty?

          missed = outcomes.size - finish(outcomes)
          taken(missed.positive? ? not_landed(outcomes, missed) : 0)
          @outage.succeeded
          @lock.synchronize { outcomes.each { |outcome| @pending_attempts.delete(outcome.id) } } # unwritten until now, even while being written
          @written += outcomes.size
          @on_written&.call
          promote(outcomes.filter_map(&:concurrency_key))
          announce_retries(outcomes)
          outcomes.size
        rescue Store::Unavailable => error
          @lock.synchronize { @pending.unshift(*outcomes) }
          @outage.failed("#{error.message} (#{outcomes.size} #{outcomes.one? ? "outcome" : "outcomes"} kept)", cause: error)
          nil
        end

        # One statement for all; if the database refuses it (not an outage), each outcome alone, so one it cannot
        # take holds up no other and never stops this writer. Returns how many rows took their outcome (or were
        # recorded as failed instead).
        def finish(outcomes)
          @store.finish(@process_id, outcomes)
        rescue StandardError => error
          raise if error.is_a?(Store::Unavailable)
          return outcomes.sum { |outcome| finish([ outcome ]) } if outcomes.size > 1

          finish_as_unwritable(outcomes.first, error)
        end

        # Outcomes whose rows were no longer this worker's running jobs when written: most often the worker was
        # declared dead (cut off from the database, or stopped, past process_alive_threshold) and its jobs were
        # taken back, so another worker may have run them again. A worker that woke up said only "took back 0 of
        # its jobs" (a trial: 30 of 30 jobs had run twice).
        def taken(count)
          return unless count.positive?

          @logger.warn("bobbin worker #{@process_id}: #{count} finished #{count == 1 ? 'job was' : 'jobs were'} no longer this " \
                       "worker's when their outcomes were written, and their outcomes were dropped: they were taken back " \
                       "(this worker declared dead past process_alive_threshold, or an operator's action), and may have run again")
        end

        # Of `outcomes`, some of which (`missed`) found their row no longer running on this worker, how many rows do not
        # read as their outcome says. A write sent to a server that then froze gave up unanswered, landed when the server
        # resumed, and its retry found the rows finished already, by this worker: "may have run again" was said of jobs
        # that had not (a trial). `missed` if the rows cannot be read now.
        def not_landed(outcomes, missed)
          rows = Maintenance.quietly { JobRecord.where(id: outcomes.map(&:id)).pluck(:id, :state, :finished_at, :run_at).to_h { |id, *row| [ id, row ] } }
          outcomes.count do |outcome|
            state, finished_at, run_at = rows[outcome.id]
            state != outcome.state || (outcome.finished_at && Store.timestamp(finished_at) != outcome.finished_at) ||
              (outcome.run_at && Store.timestamp(run_at) != outcome.run_at)
          end
        rescue ActiveRecord::ActiveRecordError
          missed
        end

        # An outcome the database refused alone: its job is recorded as failed with why, in Bobbin's words instead of
        # the job's. Should even that be refused, the job stays claimed until this process stops (then ready again).
        def finish_as_unwritable(outcome, error)
          reason = "#{error.class}: #{error.message.lines.first&.strip}"
          @logger.error("bobbin worker #{@process_id}: could not write the outcome of job #{outcome.id} (#{reason}); recording it as failed")
          note = "the job ended #{outcome.state} but its outcome could not be written: #{reason}"[0, 2_000]
          @store.finish(@process_id, [ Store::Outcome.new(outcome.id, "failed", Store.timestamp(Time.now), nil, OutcomeNotWritten.name, note, nil, nil, nil, outcome.attempts) ])
        rescue StandardError => again
          raise if again.is_a?(Store::Unavailable)

          @logger.error("bobbin worker #{@process_id}: could not record job #{outcome.id} as failed either (#{again.class}); " \
                        "it stays claimed until this worker stops")
          1 # said already
        end

        # Finished jobs freed slots of their keys: waiting jobs take them now (Maintenance catches any this misses).
        def promote(keys) = Store.let_through(@store, keys, @logger)

        # Retries written are announced with the time the first one falls due, so an idle worker wakes for it.
        def announce_retries(outcomes)
          retries = outcomes.select(&:run_at)
          return if retries.empty?

          @store.announce(Wakeups::Notice.new(retries.map(&:queue).uniq, Store.epoch(retries.map(&:run_at).min)))
        rescue StandardError
          nil # written; polling finds them
        end

        def flush_with_retry
          delay = 0.1
          until flush
            return false if @signal.pop(timeout: delay) == :stop

            delay = [ delay * 2, 5 ].min
          end
          true
        end
    end
  end
end
