# frozen_string_literal: true

require "test_helper"

class FailuresTest < Bobbin::TestCase
  test "a failing job is retried until it succeeds, counting attempts" do
    id = FlakyJob.enqueue("k", 2)
    drain(fibers: 5)
    job = Bobbin::JobRecord.find(id)
    assert_equal [ "succeeded", 3 ], [ job.state, job.attempts ]
    assert_equal "ArgumentError", job.last_error_class, "the last error stays visible after a later success"
  end

  test "a job that keeps failing ends failed with its error and backtrace after its retries" do
    id = FlakyJob.enqueue("k", 99)
    drain(threads: 2)
    job = Bobbin::JobRecord.find(id)
    assert_equal [ "failed", 4, "ArgumentError", "flaky k" ], [ job.state, job.attempts, job.last_error_class, job.last_error_message ]
    assert_match(/jobs\.rb:\d+/, job.last_error_backtrace)
  end

  test "retries back off exponentially with jitter" do
    job_class = Class.new(FlakyJob) { bobbin_options backoff: 10 }
    Object.const_set(:SlowRetryJob, job_class)
    id = SlowRetryJob.enqueue("k", 5)
    drain(fibers: 2)
    job = Bobbin::JobRecord.find(id)
    assert_equal [ "ready", 1 ], [ job.state, job.attempts ]
    assert_in_delta Time.now + 10, job.run_at, 3.5, "first retry after backoff × 2^0 ± 25%"
    assert_equal 1, Bobbin.counts["scheduled"]
  ensure
    Object.send(:remove_const, :SlowRetryJob)
  end

  test "an unknown job class fails with a clear message and the worker keeps running" do
    Bobbin::Client::Enqueuer.insert([ Bobbin::Client::Enqueuer.build(class_name: "NoSuchJob", arguments: "[]", queue: "default",
                                                                     priority: 0, run_at: nil, max_attempts: 5) ])
    LedgerJob.enqueue("after")
    drain(fibers: 5)
    job = Bobbin::JobRecord.find_by!(class_name: "NoSuchJob")
    assert_equal [ "failed", "Bobbin::UnrunnableJob", 1 ], [ job.state, job.last_error_class, job.attempts ]
    assert_match(/unknown job class NoSuchJob/, job.last_error_message)
    assert LedgerEntry.exists?(key: "after")
  end

  test "a class that is not a job is refused, not run" do
    Bobbin::Client::Enqueuer.insert([ Bobbin::Client::Enqueuer.build(class_name: "NotAJob", arguments: "[]", queue: "default",
                                                                     priority: 0, run_at: nil, max_attempts: 1) ])
    drain(threads: 1)
    assert_match(/NotAJob is not a job class/, Bobbin::JobRecord.last.last_error_message)
  end

  test "a row with broken JSON arguments fails with a clear message; other jobs run" do
    id = LedgerJob.enqueue("broken")
    Bobbin::JobRecord.where(id: id).update_all(arguments: "[\"unterminated")
    LedgerJob.enqueue("fine")
    drain(fibers: 5)
    job = Bobbin::JobRecord.find(id)
    assert_equal [ "failed", "Bobbin::UnrunnableJob" ], [ job.state, job.last_error_class ]
    assert_match(/arguments are not valid JSON/, job.last_error_message)
    assert_equal [ "fine" ], LedgerEntry.pluck(:key)
  end
end
