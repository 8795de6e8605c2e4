# frozen_string_literal: true

module Bobbin
  # One tick of a recurring task that was enqueued: the unique (task_key, run_at) key is what makes each tick
  # enqueue once, however many schedulers on however many hosts reach it.
  class RecurringRun < Record
    self.table_name = "bobbin_recurring_runs"

    # Runs older than this are deleted, except each task's latest (its last run stays known).
    KEEP = 86_400

    # Enqueues `row` (a job row) as tick `run_at` of task `key` unless some scheduler already did: the run and the
    # job are written in one transaction, so the tick and its job exist together or not at all. Returns the
    # job's id, or nil when the tick was taken.
    def self.claim(key, run_at, row)
      job_id = transaction do
        taken = insert_all([ { task_key: key, run_at: run_at, created_at: Time.now.utc } ],
                           unique_by: :bobbin_recurring_runs_tick, returning: [ :id ])
        next if taken.rows.empty?

        Client::Enqueuer.insert([ row ]).first.tap { |id| where(id: taken.rows.first.first).update_all(job_id: id) }
      end
      Instrumentation.instrument(:recurring, key: key, run_at: run_at, job_id: job_id) if job_id
      job_id
    end

    # Deletes runs older than KEEP seconds, keeping the latest of each task; returns how many.
    def self.sweep(now = Time.now.utc)
      latest = group(:task_key).maximum(:run_at)
      where(run_at: ...(now - KEEP)).where.not(run_at: latest.values).delete_all
    end
  end
end
