# frozen_string_literal: true

module Bobbin
  # One row per job. Used off the hot path (counts, inspection, retry/discard); workers use Store SQL.
  class JobRecord < Record
    self.table_name = "bobbin_jobs"
    utc_times :run_at, :claimed_at, :enqueued_at, :started_at, :finished_at, :operated_at

    STATES = %w[ready blocked running succeeded failed discarded].freeze
    # The stored states a job waits in: claimable, or held back by its concurrency key. With its run_at still ahead,
    # a job in either is shown as "scheduled" (a limited job set to run later waits for its time before its slot).
    WAITING = %w[ready blocked].freeze

    scope :scheduled, ->(now = Time.now.utc) { where(state: WAITING).where.not(run_at: ..now) }

    # Job counts by state; "scheduled" are waiting jobs whose run_at is still ahead, "blocked" due jobs waiting for a
    # concurrency slot (their key's limit is reached).
    def self.counts
      by_state = group(:state).count
      scheduled = self.scheduled.group(:state).count
      STATES.to_h { |state| [ state, by_state.fetch(state, 0) - scheduled.fetch(state, 0) ] }.merge("scheduled" => scheduled.values.sum)
    end

    # The Active Job execution a row of an Active Job job runs (1 for its first run, 3 for the second retry by retry_on,
    # each retry a row of its own), from its payload; nil for a plain job or a payload that does not say.
    def self.active_job_execution(active_job_id, arguments)
      executions = (JSON.parse(arguments)["executions"] if active_job_id rescue nil)
      executions + 1 if executions.is_a?(Integer)
    end

    def active_job_execution = self.class.active_job_execution(active_job_id, arguments)

    # The state as operators see it: a waiting job whose run_at is still ahead is "scheduled".
    def shown_state(now = Time.now.utc) = WAITING.include?(state) && run_at > now ? "scheduled" : state

    # The time a list shows for the job: when a waiting job runs (a retry's next run, not its last start), when a
    # running one started, when a finished one ended.
    def shown_at
      return run_at if WAITING.include?(state)

      state == "running" ? started_at || run_at : finished_at || started_at || run_at
    end

    # The attempts the job may make, as its worker counts them ("failed attempt 4/25" in the log): a job whose class no
    # worker could load is tried up to Worker::Execution::UNKNOWN_CLASS_ATTEMPTS times, each try raising max_attempts
    # by the attempt it gave back, so lists showed max_attempts one above attempts at every try ("4/5", then "12/13")
    # while it went on to 25 (two trials).
    def attempts_allowed
      return max_attempts unless last_error_class == UnknownJobClass.name && state != "succeeded"

      Worker::Execution.unknown_class_attempts(max_attempts)
    end

    # The error a list shows for the job, its first line: a failed job's, and a waiting retry's (why it runs again).
    def shown_error
      return unless last_error_class && (state == "failed" || (WAITING.include?(state) && attempts.positive?))

      Printable.utf8("#{last_error_class}: #{last_error_message}").lines.first.to_s.strip
    end

    # Puts job `id`, if failed or discarded, back in its queue to run now with a fresh attempt budget; true if it
    # did. A job in any other state (running under a worker, say) is left alone. (Operator.retry, by nobody.)
    def self.retry(id) = Operator.retry(id, by: nil)

    # Marks job `id`, if failed or waiting (ready, scheduled or blocked), as given up on; true if it did. A running job is
    # left alone: its worker decides. The row stays for inspection until retention. (Operator.discard, by nobody.)
    def self.discard(id) = Operator.discard(id, by: nil)

    # Retries this job (see JobRecord.retry).
    def retry! = self.class.retry(id).tap { reload }

    # Discards this job (see JobRecord.discard).
    def discard! = self.class.discard(id).tap { reload }

    # The error the job is in now: the last one while it is failed or waiting to retry, nil once it succeeded or
    # was discarded (last_error_* then stay as the history of its earlier attempts).
    def current_error
      return unless last_error_class && (state == "failed" || (%w[ready blocked].include?(state) && attempts.positive?))

      { class: last_error_class, message: last_error_message, backtrace: last_error_backtrace }
    end

    # The stored arguments, parsed (raises UnrunnableJob when the row's JSON is broken).
    def parsed_arguments
      Client::Arguments.load(arguments)
    end
  end
end
