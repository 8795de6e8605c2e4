# frozen_string_literal: true

require "bobbin" unless defined?(Bobbin::Client::Enqueuer) # loaded from Bobbin's own require when it comes first
require "active_job"

module ActiveJob
  module QueueAdapters
    # Active Job adapter: `config.active_job.queue_adapter = :bobbin`. Each job is one row; Active Job's own
    # serialization, retry_on and discard_on run inside Bobbin's worker unchanged.
    class BobbinAdapter < (defined?(AbstractAdapter) ? AbstractAdapter : Object)
      # Rails 7.2 asks the adapter (a job class's :default); later versions ask the job class. True when Bobbin's tables
      # live in a database of their own (connects_to), where an enqueue cannot commit with the app's transaction; in the
      # primary database the enqueue is part of it (Rails 7.2 deferred it past the commit there too: a trial).
      def enqueue_after_transaction_commit? = !Bobbin.config.connects_to.nil?

      # True once a worker in this process has begun shutting down: a continuable job (ActiveJob::Continuable)
      # stops at its next checkpoint and is re-enqueued to resume from there.
      def stopping? = Bobbin::Worker.stopping?

      # What is wrong with `job_class` keeping GoodJob's concurrency controls (good_job_control_concurrency_with,
      # good_job_concurrency_rule) and no limits_concurrency; nil when nothing is. GoodJob's callbacks skip any adapter but
      # its own, so on Bobbin every job of such a class ran at once, unlimited and unannounced (a trial moving a GoodJob
      # app): perform_later refuses it, as Solid Queue's on_conflict: :discard, and bobbin doctor names it.
      def self.good_job_concurrency_problem(job_class)
        return if job_class.respond_to?(:concurrency_limit) && job_class.concurrency_limit
        return if job_class.try(:good_job_concurrency_config).blank? && job_class.try(:good_job_concurrency_rules).blank?

        "#{job_class.name}: GoodJob's concurrency controls (good_job_control_concurrency_with, good_job_concurrency_rule) do " \
          "nothing under Bobbin, and its jobs would run unlimited; declare limits_concurrency to: N, key: ->(*args) { ... } " \
          "instead (a key lambda takes the job's arguments)"
      end

      # Stores the job to run now; sets its provider_job_id.
      def enqueue(job) = enqueue_at(job, nil)

      # Stores the job to run at `timestamp` (seconds since the epoch).
      def enqueue_at(job, timestamp)
        job.provider_job_id = Bobbin::Client::Enqueuer.insert([ row(job, timestamp) ]).first
      end

      # Stores many jobs in one INSERT (perform_all_later); returns how many were enqueued. A job Bobbin refuses (its
      # arguments over max_argument_bytes, a bad queue name) is left out with `successfully_enqueued?` false and its
      # error in `enqueue_error`, as Active Job does for an adapter without enqueue_all, and the others are stored:
      # one oversized job lost a batch of a thousand (a trial; Solid Queue stores the rest).
      #
      # Jobs that defer to the commit (enqueue_after_transaction_commit) are stored after the app's transactions commit,
      # and dropped on a rollback: Rails 8.1's perform_all_later defers them itself, Rails 7.2's calls this inside the
      # transaction (its jobs ran though it rolled back: a trial). With no transaction open they are stored at once.
      def enqueue_all(jobs)
        deferred, now = jobs.partition { |job| defers?(job) }
        if deferred.any?
          deferred.each { |job| job.successfully_enqueued = true } # as Active Job says of a perform_later it defers
          ActiveRecord.after_all_transactions_commit do
            deferred.each { |job| job.successfully_enqueued = false }
            store_all(deferred)
          end
        end
        store_all(now) + deferred.count(&:successfully_enqueued?)
      end

      # The checked job row for `job` to run at `timestamp` (seconds since the epoch; nil: now), not yet written.
      def row(job, timestamp)
        run_at = run_at(job, timestamp)
        arguments = serialize(job)
        check_size(job, arguments)
        Bobbin::Client::Enqueuer.build(
          class_name: job.class.name, arguments: arguments, queue: job.queue_name, priority: job.priority,
          run_at: run_at, max_attempts: 1, active_job_id: job.job_id, concurrency: concurrency(job)
        )
      end

      private
        # Stores `jobs` in one INSERT; returns how many were stored (see enqueue_all). A job listed twice is stored twice,
        # as Active Job's own one-by-one enqueue and Solid Queue store it (keyed by the job, the second was dropped and
        # counted as enqueued: a trial).
        def store_all(jobs)
          rows = jobs.filter_map do |job|
            [ job, row(job, job.scheduled_at&.to_f) ]
          rescue Bobbin::EnqueueError => error
            job.successfully_enqueued = false
            job.enqueue_error = error
            nil
          end
          ids = rows.empty? ? [] : Bobbin::Client::Enqueuer.insert(rows.map(&:last))
          rows.map(&:first).zip(ids) do |job, id|
            job.provider_job_id = id
            job.successfully_enqueued = true
          end
          ids.size
        end

        # True when `job`'s enqueue waits for the app's transactions to commit, by its class's setting as Active Job
        # reads it: Rails 7.2's :always / :never / anything else asks the adapter; from Rails 8.0, true or false.
        def defers?(job)
          return false unless defined?(ActiveRecord) && ActiveRecord.respond_to?(:after_all_transactions_commit)

          setting = job.class.enqueue_after_transaction_commit
          return setting == true if ActiveJob.gem_version >= Gem::Version.new("8.0")

          setting == :always || (setting != :never && enqueue_after_transaction_commit?)
        end

        # The concurrency columns of a job whose class has limits_concurrency (Bobbin's, or Solid Queue's when
        # that gem defines it): both answer concurrency_limit and concurrency_key.
        def concurrency(job)
          limit = job.class.respond_to?(:concurrency_limit) && job.class.concurrency_limit
          unless limit
            problem = self.class.good_job_concurrency_problem(job.class)
            raise Bobbin::ConfigurationError, "#{problem}; nothing was stored" if problem
            return
          end

          refuse_discard_on_conflict(job.class)
          # Solid Queue's values are checked as Bobbin's own limits_concurrency checks them where declared: a limit of 0
          # would block every job for good.
          limit = Bobbin::Concurrency::Limit.to!(limit, job.class.name)
          duration = Bobbin::Concurrency::Limit.duration!(job.class.concurrency_duration || Bobbin::Concurrency::Limit::DEFAULT_DURATION, job.class.name)

          Bobbin::Client::Enqueuer.concurrency_columns(job.class.name) { Bobbin::Concurrency::Limit.columns(job.concurrency_key, limit, duration) }
        end

        # Solid Queue's `on_conflict: :discard` drops a job whose key has no free slot; Bobbin would let it wait
        # and run instead, so it is refused (as Bobbin's own limits_concurrency refuses it) rather than ignored.
        def refuse_discard_on_conflict(job_class)
          return unless job_class.respond_to?(:concurrency_on_conflict) && job_class.concurrency_on_conflict.to_s == "discard"

          raise Bobbin::ConfigurationError, "#{job_class.name}: limits_concurrency on_conflict: :discard is not supported by Bobbin " \
                                            "(its jobs would wait for a slot and run, not be discarded); use on_conflict: :block"
        end

        # The Time for `timestamp` (seconds since the epoch; nil: now). NaN, ±Infinity (set(wait_until: Float::NAN)) or a
        # non-number raised FloatDomainError or TypeError from Time.at, naming neither the job nor the time (a trial).
        def run_at(job, timestamp)
          return if timestamp.nil?
          return Time.at(timestamp) if timestamp.is_a?(Numeric) && timestamp.real? && timestamp.finite?

          raise Bobbin::EnqueueError, "#{job.class.name} (job #{job.job_id}): the time to run it must be a finite number of seconds since the epoch, " \
                                      "got #{timestamp.inspect[0, 80]} (#{timestamp.class}); nothing was stored"
        end

        # The job's Active Job payload as JSON; arguments nested deeper than JSON allows are refused like any
        # other argument Bobbin cannot store.
        def serialize(job)
          JSON.generate(job.serialize)
        rescue JSON::JSONError => error
          raise Bobbin::SerializationError, "#{job.class.name}: arguments cannot be stored as JSON (#{error.message.lines.first.strip})"
        end

        def check_size(job, json)
          limit = Bobbin.config.max_argument_bytes
          return if limit.nil? || json.bytesize <= limit

          raise Bobbin::SerializationError, "#{job.class.name}: serialized job is #{json.bytesize} bytes, over the " \
                                            "#{limit}-byte limit (Bobbin.config.max_argument_bytes)"
        end
    end
  end
end
