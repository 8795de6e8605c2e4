# frozen_string_literal: true

module Bobbin
  module Operator
    # What operators do to jobs, one or a filter's worth at a time. Every UPDATE repeats the state it acts on in
    # its WHERE, so a job a worker claimed between the read and the write is left to the worker: a running job
    # is never retried, discarded or released under a live worker. Each changed row records who and when
    # (operated_by, operated_at, operation).
    module Actions
      RETRYABLE = %w[failed discarded].freeze
      DISCARDABLE = %w[failed ready blocked].freeze
      DISCARD_ORDER = %w[blocked ready failed].freeze
      FINISHED = %w[succeeded failed discarded].freeze
      # What delete_finished deletes unless told: what retention deletes. Failed jobs stay until retried or discarded.
      DONE_WITH = %w[succeeded discarded].freeze
      BATCH = 1_000
      # Seconds a batch keeps trying while SQLite stays locked (see patiently).
      PATIENCE = 120

      module_function

      # Puts job `id` back to run now with a fresh attempt budget, if failed or discarded; true if it did.
      def retry(id, by:) = retry_ids([ id ], by) == 1

      # Gives up on job `id` if failed or waiting; true if it did. The row stays for inspection.
      def discard(id, by:) = discard_ids([ id ], by) == 1

      # Retries every failed or discarded job `filter` selects, BATCH rows per statement; returns how many. `filter`: a
      # Filter, its criteria as a Hash, or a relation of JobRecord (what an adapter such as Mission Control's selects).
      def retry_all(filter, by:) = in_batches(filter, RETRYABLE) { |ids, selected| retry_ids(ids, by, selected) }.tap { |count| Stats.refresh_statistics(count) }

      # Discards every failed or waiting job `filter` selects, BATCH rows per statement; returns how many. Blocked jobs go
      # first and their concurrency keys' free slots are handed on once, at the end: handed on after each batch, they
      # let the key's next blocked job through, one a later batch was to discard, and a worker ran it (a review: 134 of
      # 2,500 such jobs ran). A job a finishing holder lets through while the blocked batches run may still start.
      def discard_all(filter, by:)
        keys = Set.new
        count = DISCARD_ORDER.sum do |state|
          in_batches(filter, [ state ]) { |ids, selected| discard_ids(ids, by, selected, keys) }
        end
        promote(keys.to_a)
        count.tap { Stats.refresh_statistics(count) }
      end

      # Returns running job `id` to its queue when the process that claimed it is gone or silent for longer than
      # its `process_alive_threshold` (a stuck job); its attempt is given back. A job whose process is alive is left
      # running (false): releasing it would run it twice. As after a recovery, the row keeps its claimed_by: a worker
      # that was only silent (a stalled host, a long pause) takes it back at its next beat unless another claimed it.
      def release(id, by:)
        live = ProcessRecord.live.select(:id)
        running = JobRecord.where(id: id, state: "running")
        released = patiently do
          running.where(claimed_by: nil).or(running.where.not(claimed_by: live))
                 .update_all(state: Arel.sql(Store::WAITING), run_at: Time.now.utc, claimed_at: nil, started_at: nil,
                             attempts: Arel.sql("CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END"), **stamp("released", by))
        end == 1
        let_through([ id ]) if released
        woken(released)
      end

      # Deletes finished jobs (`states`, default all finished) that finished before `before`, in batches; returns
      # how many.
      def delete_finished(before:, states: DONE_WITH)
        states = Array(states).map(&:to_s)
        raise ArgumentError, "only finished jobs can be deleted (#{FINISHED.join(', ')}), not #{(states - FINISHED).join(', ')}" if (states - FINISHED).any?
        # A nil bound would be an open range, every finished job; anything but a time would be cast to nil.
        raise ArgumentError, "before: must be a Time, got #{before.inspect}" unless before.is_a?(Time) || before.is_a?(DateTime)

        deleted = 0
        loop do
          ids = JobRecord.where(state: states, finished_at: ...before).limit(BATCH).pluck(:id)
          break deleted.tap { |count| Stats.refresh_statistics(count) } if ids.empty?

          deleted += JobRecord.where(id: ids, state: states, finished_at: ...before).delete_all # not one retried and finished since
          Stats.forget_throughput # the chart's kept minutes may have lost rows
        end
      end

      # `selected`: the jobs a bulk action's filter selects, re-checked by the UPDATE (a job that left them between the
      # read and the write, a "clear queue" job that failed meanwhile, is left alone).
      def retry_ids(ids, by, selected = JobRecord)
        retryable = selected.where(id: ids, state: RETRYABLE)
        retried = patiently do
          retryable.update_all(state: Arel.sql(Store::WAITING), run_at: Time.now.utc, attempts: 0, crashes: 0, finished_at: nil,
                               max_attempts: fresh_max_attempts(retryable), claimed_by: nil, claimed_at: nil, **stamp("retried", by))
        end
        let_through(ids) if retried.positive?
        Stats.forget_throughput if retried.positive? # a failed job retried leaves its minute's count
        woken(retried)
      end

      # A retry's fresh attempt budget: the runs the job's class allows (an Active Job row's is 1: Active Job retries by new
      # rows), not the max_attempts a worker raised for each try it made while no worker had the class (Execution's
      # given_back): an operator's retry of such a job kept them, and an Active Job job Bobbin fails at once was retried up
      # to 25 times (a review). A plain job whose class this process cannot load keeps its max_attempts.
      def fresh_max_attempts(jobs)
        column = JobRecord.arel_table
        budget = Arel::Nodes::Case.new.when(column[:active_job_id].not_eq(nil)).then(1)
        jobs.where(active_job_id: nil).distinct.pluck(:class_name).each do |name|
          job_class = loaded_class(name)
          budget.when(column[:class_name].eq(name)).then(Client::Fields.attempts(job_class.bobbin_options[:retries])) if job_class
        end
        budget.else(column[:max_attempts])
      end

      # The Bobbin::Job class of that name, if this process has it or can load it (as a worker looks it up); nil otherwise.
      def loaded_class(name)
        job_class = Worker::Execution.job_class(name)
        job_class if job_class.include?(Bobbin::Job)
      rescue StandardError
        nil
      end

      # The discard event names the jobs the UPDATE discarded, not the batch asked for: a job a worker claimed (or that
      # finished) between the batch's read and its write was listed as discarded while it ran on. A discarded holder's
      # slot frees now, not at the next promotion pass; or, given a Set `held`, once the caller adds its keys to it.
      def discard_ids(ids, by, selected = JobRecord, held = nil)
        discarded = patiently { Store.updated_ids(selected.where(id: ids, state: DISCARDABLE), state: "discarded", finished_at: Time.now.utc, **stamp("discarded", by)) }
        return 0 if discarded.empty?

        Stats.forget_throughput # a failed job discarded leaves its minute's count
        held ? held.merge(concurrency_keys(discarded)) : let_through(discarded)
        Instrumentation.instrument(:discard, ids: discarded.sort, count: discarded.size, by: by)
        discarded.size
      end

      # Lets the blocked jobs of these jobs' concurrency keys through to their free slots (announced), after the commit
      # when the caller's transaction is open: the keys' locks must not last as long as that transaction.
      def let_through(ids) = promote(concurrency_keys(ids))

      def concurrency_keys(ids) = JobRecord.where(id: ids).where.not(concurrency_key: nil).distinct.pluck(:concurrency_key)

      def promote(keys) = (Record.current_transaction.after_commit { Store.promote_keys(keys) } if keys.any?)

      # Walks the filter's jobs in `states` by id, one batch of ids per read and one UPDATE per batch, guarded by the
      # filter again (yields the ids and the filter's relation).
      def in_batches(filter, states)
        relation = (filter.is_a?(ActiveRecord::Relation) ? filter : Filter.from(filter).scope).where(state: states)
        done = 0
        last = 0
        loop do
          ids = relation.where.not(id: ..last).order(:id).limit(BATCH).pluck(:id)
          break done if ids.empty?

          done += patiently { yield(ids, relation) }
          last = ids.last
        end
      end

      # Runs a guarded statement (one job's, or a batch's) again while SQLite stays locked past its busy timeout, for up
      # to PATIENCE seconds: SQLite's lock is not fair, and workers writing outcomes back to back can keep a waiting
      # writer out that long on a loaded machine. The statement only changes rows still in the states it names, so
      # running it again is safe.
      def patiently(deadline = Bobbin.monotonic + PATIENCE)
        yield
      rescue ActiveRecord::StatementTimeout => error
        raise unless defined?(SQLite3::BusyException) && error.cause.is_a?(SQLite3::BusyException) &&
                     Bobbin.monotonic < deadline

        sleep(rand(0.001..0.02)) # not in step with the writers that won the last round
        retry
      end

      # `by` as UTF-8 text: a name from HTTP basic auth (REMOTE_USER, `bobbin dashboard --auth-token`) comes as binary
      # bytes, which SQLite's adapter refused to write ("José" failed every action of theirs).
      def stamp(operation, by) = { operation: operation, operated_by: (Printable.utf8(by)[0, 255] unless by.nil?), operated_at: Time.now.utc }

      # Wakes idle workers for jobs put back in their queues; returns `count`.
      def woken(count)
        Wakeups.announce(nil) if count == true || (count.is_a?(Integer) && count.positive?)
        count
      end
    end
  end
end
