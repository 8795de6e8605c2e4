# frozen_string_literal: true

require "test_helper"
require_relative "../support/active_jobs"

# The scenarios of Rails' Active Job integration suite (activejob/test/integration/queuing_test.rb, which Rails runs
# against each adapter with AJ_ADAPTER) on PostgreSQL, with a real worker process listening on the integration_tests
# queue. Rails' own file runs too (`bin/rake test:active_job:rails`, RailsSuite), on the SQLite of the dummy app it
# generates; this one covers the other database (SQLite skips it).
class ActiveJobIntegrationTest < Bobbin::TestCase
  setup do
    skip_unless_postgres
    FileUtils.rm_rf(IntegrationTestJob.dir)
    @id = "AJ-#{SecureRandom.uuid}"
    @worker = spawn_bobbin("work", "--queues", "integration_tests", "--threads", "1", "--polling-interval", "0.1",
                           "--require", File.join(TestProcesses::ROOT, "test/support/active_jobs.rb"))
  end

  teardown do
    ensure_killed(@worker) { nil } if @worker
    IntegrationTestJob.queue_as(:integration_tests)
  end

  def executed?(id = @id) = File.exist?(File.join(IntegrationTestJob.dir, id))

  def record(id = @id) = JSON.parse(File.read(File.join(IntegrationTestJob.dir, id)))

  # Waits up to `seconds` for the job to run (like the Rails suite's wait_for_jobs_to_finish_for); true if it did.
  def wait_for_job(seconds, id = @id)
    deadline = Time.now + seconds
    sleep(0.1) until executed?(id) || Time.now > deadline
    executed?(id)
  end

  test "runs jobs enqueued on a listening queue" do
    IntegrationTestJob.perform_later(@id)
    assert wait_for_job(30), "job #{@id} was not executed"
  end

  test "does not run jobs queued on a non-listening queue" do
    IntegrationTestJob.queue_as(:some_other_queue)
    IntegrationTestJob.perform_later(@id)
    IntegrationTestJob.queue_as(:integration_tests)
    IntegrationTestJob.perform_later("#{@id}-listened")
    assert wait_for_job(30, "#{@id}-listened"), "the worker runs jobs of its queue"
    assert_not executed?, "a job of another queue was executed"
  end

  test "does not run a job enqueued in the future; runs one at its time, also bulk-enqueued" do
    IntegrationTestJob.set(wait: 10.minutes).perform_later("#{@id}-later")
    IntegrationTestJob.set(wait: 3.seconds).perform_later(@id)
    ActiveJob.perform_all_later([ IntegrationTestJob.new("#{@id}-bulk").set(wait: 3.seconds) ])
    enqueued_at = Time.now.to_f
    assert_not wait_for_job(1.5), "ran before its time"
    assert wait_for_job(30) && wait_for_job(30, "#{@id}-bulk"), "did not run at its time"
    assert_operator record["executed_at"], :>=, enqueued_at + 2.9
    assert_operator record("#{@id}-bulk")["executed_at"], :>=, enqueued_at + 2.9
    assert_not executed?("#{@id}-later")
  end

  test "supplies a provider_job_id for immediate and delayed jobs" do
    [ IntegrationTestJob.perform_later(@id), IntegrationTestJob.set(wait: 1.minute).perform_later("#{@id}-delayed") ].each do |job|
      assert_equal Bobbin::JobRecord.where(active_job_id: job.job_id).pick(:id), job.provider_job_id, "the id of the job's row"
    end
  end

  test "keeps the current locale and time zone while running perform_later" do
    I18n.with_locale(:de) { Time.use_zone("Hawaii") { IntegrationTestJob.perform_later(@id) } }
    assert wait_for_job(30)
    assert_equal [ "de", "Hawaii" ], record.values_at("locale", "timezone")
  end

  test "runs the job with higher priority (lower number) first" do
    at = Time.now + 3
    IntegrationTestJob.set(wait_until: at, priority: 20).perform_later("#{@id}.1")
    IntegrationTestJob.set(wait_until: at, priority: 10).perform_later("#{@id}.2")
    assert wait_for_job(30, "#{@id}.1") && wait_for_job(30, "#{@id}.2")
    assert_operator record("#{@id}.2")["executed_at"], :<, record("#{@id}.1")["executed_at"]
  end
end
