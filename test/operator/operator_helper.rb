# frozen_string_literal: true

require "test_helper"

# Writes job rows directly, in any state, for the operator layer's tests.
module OperatorHelper
  # Inserts `count` rows of `attributes` (over a ready default job) and returns their ids.
  def insert_jobs(count = 1, **attributes)
    now = Time.now.utc
    rows = Array.new(count) do |i|
      { queue: "default", class_name: "SleepJob", arguments: JSON.generate([ 0, "job-#{i}" ]), priority: 0, state: "ready", run_at: now,
        attempts: 0, max_attempts: 1, enqueued_at: now }.merge(attributes.transform_values { |value| value.respond_to?(:call) ? value.call(i) : value })
    end
    Bobbin::JobRecord.insert_all(rows, returning: [ :id ]).rows.flatten
  end

  # True when the database keeps bytes that are not UTF-8 as an outside writer gives them: SQLite, and PostgreSQL in a
  # SQL_ASCII database (which hands them back as binary Strings). A UTF8 PostgreSQL database refuses them.
  def keeps_invalid_utf8?
    !postgres? || Bobbin::JobRecord.connection.select_value("SHOW server_encoding") == "SQL_ASCII"
  end

  def skip_unless_invalid_utf8_kept = (skip("a UTF8 PostgreSQL database refuses bytes that are not UTF-8") unless keeps_invalid_utf8?)

  # A failed job whose queue ("bad" + 0xFF), class name, arguments and error message hold the byte 0xFF, as an outside
  # writer could store them (Active Record would not write them): raw SQL. Returns its id.
  def insert_invalid_utf8_job
    now = Bobbin::Store.timestamp(Time.now.utc)
    ff = ->(text) { postgres? ? "E'#{text.gsub('%', '\\\\xff')}'" : "'#{text.gsub('%', "' || X'ff' || '")}'" } # % stands for the byte
    Bobbin::JobRecord.connection.execute(<<~SQL)
      INSERT INTO bobbin_jobs (queue, class_name, arguments, priority, state, run_at, attempts, max_attempts, enqueued_at, finished_at,
                               last_error_class, last_error_message)
      VALUES (#{ff.('bad%')}, #{ff.('Bad%Job')}, #{ff.('["a%"]')}, 0, 'failed', '#{now}', 1, 1, '#{now}', '#{now}', 'RuntimeError', #{ff.('boom % here')})
    SQL
    Bobbin::JobRecord.maximum(:id)
  end

  # Two recurring tasks, "nightly" and "fresh" (never run); nightly's last tick, a minute ago, enqueued a job that failed
  # with `message`. Returns [that job's id, the tick].
  def recurring_with_failed_job(message)
    now = Time.now.utc.change(usec: 0)
    { "nightly" => "0 2 * * *", "fresh" => "0 3 * * *" }.each do |key, schedule|
      Bobbin::RecurringTask.create!(key: key, schedule: schedule, class_name: "ReportJob", created_at: now, updated_at: now)
    end
    job = insert_jobs(1, class_name: "ReportJob", **failed_attributes, last_error_message: message).first
    Bobbin::RecurringRun.create!(task_key: "nightly", run_at: now - 60, job_id: job, created_at: now)
    [ job, now - 60 ]
  end

  def failed_attributes(at = Time.now.utc)
    { state: "failed", attempts: 1, finished_at: at, last_error_class: "RuntimeError", last_error_message: "boom" }
  end
end
