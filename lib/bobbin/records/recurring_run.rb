# frozen_string_literal: true

module Bobbin
  # One tick of a recurring task that was enqueued: the unique (task_key, run_at) key is what makes each tick
  # enqueue once, however many schedulers on however many hosts reach it.
  class RecurringRun < Record
    self.table_name = "bobbin_recurring_runs"
    utc_times :run_at, :created_at

    # Runs older than this are deleted, except each task's latest (its last run stays known).
    KEEP = 86_400

    # Enqueues `row` (a job row) as tick `run_at` of task `key` unless some scheduler already did. Returns the
    # job's id, or nil when the tick was taken.
    def self.claim(key, run_at, row) = claim_all([ [ key, run_at, row ] ]).first

    # Enqueues each `[key, run_at, row]` tick no scheduler took yet, all in one transaction: a run and its job exist
    # together or not at all, and a pass of 300 tasks is one commit, not 300 (a commit a tick made them seconds late
    # on a busy disk). Returns the job ids in the ticks' order, nil for a tick already taken.
    def self.claim_all(ticks)
      return [] if ticks.empty?

      now = Time.now.utc
      taken = transaction do
        # In one order on every host: two schedulers taking the same ticks wait on each other, never deadlock.
        rows = ticks.map { |key, run_at, _row| { task_key: key, run_at: run_at, created_at: now } }.sort_by { |run| [ run[:task_key], run[:run_at] ] }
        inserted = insert_all(rows, unique_by: :bobbin_recurring_runs_tick, returning: [ :id ])
        next {} if inserted.rows.empty?

        run_ids = where(id: inserted.rows.flatten).pluck(:task_key, :run_at, :id).to_h { |key, run_at, id| [ tick_key(key, run_at), id ] }
        mine = ticks.select { |key, run_at, _row| run_ids.key?(tick_key(key, run_at)) }
        job_ids = mine.map { |key, run_at, _row| tick_key(key, run_at) }.zip(Client::Enqueuer.insert(mine.map(&:last))).to_h
        upsert_all(job_ids.map { |(key, run_at), job_id| { id: run_ids[[ key, run_at ]], task_key: key, run_at: run_at, job_id: job_id, created_at: now } },
                   unique_by: :id, update_only: [ :job_id ])
        job_ids
      end
      ticks.map do |key, run_at, _row|
        taken[tick_key(key, run_at)]&.tap { |job_id| Instrumentation.instrument(:recurring, key: key, run_at: run_at, job_id: job_id) }
      end
    end

    # A tick as the database keeps it: to the microsecond.
    def self.tick_key(key, run_at) = [ key, run_at.utc.floor(6) ]
    private_class_method :tick_key

    # Deletes runs older than KEEP seconds, keeping the latest of each task; returns how many.
    def self.sweep(now = Time.now.utc)
      latest = group(:task_key).maximum(:run_at)
      where(run_at: ...(now - KEEP)).where.not(run_at: latest.values).delete_all
    end
  end
end
