# frozen_string_literal: true

require_relative "operator_helper"
require "active_job/errors/job_not_found_error" # mission_control-jobs' own error, which its controllers redirect on

# The Mission Control adapter's actions, without Mission Control's pages (test/rails/mission_control_test.rb drives
# those in a browser, once per run): what it answers when the job changed after the page showed it.
class MissionControlAdapterTest < Bobbin::TestCase
  include OperatorHelper

  Job = Struct.new(:job_id)

  def adapter = Object.new.extend(Bobbin::MissionControlAdapter)

  test "Retry or Discard of a job that is no longer failed is 'not found' (Mission Control's alert), not a success" do
    failed = insert_jobs(1, **failed_attributes).first
    running = insert_jobs(1, state: "running", claimed_by: 1, attempts: 1).first
    assert adapter.retry_job(Job.new("bobbin-#{failed}"), :failed_relation)
    error = assert_raises(ActiveJob::Errors::JobNotFoundError) { adapter.retry_job(Job.new("bobbin-#{failed}"), :failed_relation) }
    assert_equal [ "Job with id 'bobbin-#{failed}' not found", :failed_relation ], [ error.message, error.job_relation ]
    assert_raises(ActiveJob::Errors::JobNotFoundError) { adapter.discard_job(Job.new("bobbin-#{running}"), :failed_relation) }
    assert_equal "running", Bobbin::JobRecord.where(id: running).pick(:state)
    assert_raises(ActiveJob::Errors::JobNotFoundError) { adapter.retry_job(Job.new("bobbin-0"), :failed_relation) }
  end
end
