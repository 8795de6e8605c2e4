# frozen_string_literal: true

module Bobbin
  # Deletes finished jobs older than Bobbin.config.retention; failed jobs stay until retried or discarded.
  module Retention
    BATCH = 1_000
    # Seconds one sweep may spend deleting, so the process that keeps house (the supervisor reads its signals between
    # rounds) is never held for long. A sweep that runs out of it is `behind`, and Maintenance comes back within a second.
    BUDGET = 1.0

    # How many rows a sweep deleted, and whether expired ones remain (it stopped on its budget, not on a short batch).
    Sweep = Data.define(:deleted, :behind)

    module_function

    # Deletes expired succeeded/discarded jobs, BATCH at a time, until none is left or `budget` seconds are spent.
    # On PostgreSQL each batch skips the rows another transaction holds (the sweep of another host, which runs its
    # own housekeeping on the same database), so two sweeps share the work instead of one waiting on the other.
    # A batch reads its ids, then deletes them: PostgreSQL may run a DELETE … WHERE id IN (SELECT … LIMIT … SKIP
    # LOCKED) as a nested loop that runs the subquery again for each row, skipping the rows it has just deleted, so
    # one statement deleted every expired row past the batch (all the locks in one transaction, quadratic time).
    def sweep(retention: Bobbin.config.retention, budget: BUDGET)
      return Sweep.new(0, false) if retention.nil?

      cutoff = Time.now.utc - retention
      deadline = Bobbin.monotonic + budget
      deleted = 0
      FINISHED.each do |state|
        batch = expired(state, cutoff)
        loop do
          count = JobRecord.transaction { JobRecord.where(id: batch.pluck(:id)).delete_all }
          deleted += count
          break if count < BATCH
          return Sweep.new(deleted, true) if Bobbin.monotonic >= deadline
        end
      end
      Sweep.new(deleted, false)
    end

    # The states a sweep deletes, one at a time.
    FINISHED = %w[succeeded discarded].freeze

    # A batch of expired jobs of one state, oldest first: a range of bobbin_jobs_state_finished, whatever the plan
    # PostgreSQL caches for the prepared statement. Both states in one query (`state IN (…)`, no order) got a generic
    # plan that read the whole table each round (a trial's 300,000 rows: 0.3–1.3 s every 10 s to find 26).
    def expired(state, cutoff)
      JobRecord.where(state: state, finished_at: ...cutoff).order(:finished_at).limit(BATCH).lock("FOR UPDATE SKIP LOCKED") # SQLite drops the lock
    end
  end
end
