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

  def failed_attributes(at = Time.now.utc)
    { state: "failed", attempts: 1, finished_at: at, last_error_class: "RuntimeError", last_error_message: "boom" }
  end
end
