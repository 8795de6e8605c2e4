# frozen_string_literal: true

module Bobbin
  # A recurring task as the schedulers last saw it configured, with when it last ran and runs next: what the
  # dashboard and Mission Control list. `Bobbin::RecurringTask.all.map { |t| [t.key, t.last_run_at, t.next_run_at] }`.
  class RecurringTask < Record
    self.table_name = "bobbin_recurring_tasks"
    utc_times :created_at, :updated_at

    has_many :runs, class_name: "Bobbin::RecurringRun", foreign_key: :task_key, primary_key: :key, inverse_of: false

    # Makes the table list exactly `tasks` (Recurring::Task): a scheduler does this when it starts, so every
    # host should share one recurring configuration. Syncs take turns: two supervisors of a deploy that changed
    # recurring.yml (one old, one new) each deleted the rows the other upserted, and PostgreSQL ended one "deadlock
    # detected" (a trial); on SQLite writers take turns anyway. A row's updated_at is when its task's schedule was
    # set (`now`: the row added, or its schedule changed), where the schedulers count its missed ticks from.
    def self.sync(tasks, now = Time.now.utc)
      transaction do
        connection.execute("SELECT pg_advisory_xact_lock(hashtextextended('bobbin-recurring-sync', 0))", "Bobbin Recurring Sync") if Store.postgresql?(connection_db_config)
        where.not(key: tasks.map(&:key)).delete_all
        next if tasks.none?

        stored = where(key: tasks.map(&:key)).pluck(:key, :schedule).to_h
        upsert_all(tasks.map { |task| task.attributes.merge(created_at: now, updated_at: now) }, unique_by: :bobbin_recurring_tasks_key,
                   update_only: %i[schedule class_name command arguments queue priority description], record_timestamps: false)
        rescheduled = tasks.filter_map { |task| task.key if stored.key?(task.key) && stored[task.key] != task.attributes[:schedule] }
        where(key: rescheduled).update_all(updated_at: now) if rescheduled.any?
      end
    end

    # The latest tick of each of the tasks `keys` that ran, with its job while the job's row is kept:
    # `{ key => [run_at, JobRecord or nil] }`, in three statements however many tasks a list shows.
    def self.last_runs(keys)
      latest = RecurringRun.where(task_key: keys).group(:task_key).maximum(:run_at)
      runs = RecurringRun.where(task_key: latest.keys, run_at: latest.values.uniq).select { |run| latest[run.task_key] == run.run_at }
      jobs = JobRecord.where(id: runs.filter_map(&:job_id)).index_by(&:id)
      runs.to_h { |run| [ run.task_key, [ run.run_at, jobs[run.job_id] ] ] }
    end

    # When this task was last enqueued (the tick's time), or nil.
    def last_run_at = last_run&.run_at

    # The latest run (tick and job id), or nil.
    def last_run = runs.order(run_at: :desc).first

    # The job of the latest run, while it is kept (see Bobbin.config.retention).
    def last_job = last_run&.job_id&.then { |id| JobRecord.find_by(id: id) }

    # When this task is enqueued next, as the schedulers reckon it: a wall time the clocks repeat ticks once, and during
    # the repeat its second time (01:30 EST, the night New York's clocks go back) was shown, though nothing ran then.
    # Nil for a schedule this process cannot read (a row written by another version, or by hand): one such row made the
    # dashboard's recurring page, `bobbin recurring` and Mission Control's list fail whole (a review).
    def next_run_at(now = Time.now)
      Recurring::Task.timing(key, schedule).next_time(now)
    rescue ConfigurationError
      nil
    end

    # The stored arguments, parsed.
    def parsed_arguments = JSON.parse(arguments)
  end
end
