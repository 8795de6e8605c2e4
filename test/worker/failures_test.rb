# frozen_string_literal: true

require "test_helper"

class FailuresTest < Bobbin::TestCase
  test "a failing job is retried until it succeeds, counting attempts" do
    id = FlakyJob.enqueue("k", 2)
    drain(fibers: 5)
    job = Bobbin::JobRecord.find(id)
    assert_equal [ "succeeded", 3 ], [ job.state, job.attempts ]
    assert_equal "ArgumentError", job.last_error_class, "the last error stays as history after a later success"
    assert_nil job.current_error, "but it is not the job's state"
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

  test "an unknown job class is retried (a deploy may be under way) with a clear message; the worker keeps running" do
    Bobbin::Client::Enqueuer.insert([ Bobbin::Client::Enqueuer.build(class_name: "LaterJob", arguments: "[\"late\"]", queue: "default",
                                                                     priority: 0, run_at: nil, max_attempts: 5) ])
    LedgerJob.enqueue("after")
    drain(fibers: 5)
    job = Bobbin::JobRecord.find_by!(class_name: "LaterJob")
    assert_equal [ "ready", "Bobbin::UnknownJobClass", 1 ], [ job.state, job.last_error_class, job.attempts ]
    assert_match(/unknown job class LaterJob .*--require/, job.last_error_message)
    assert LedgerEntry.exists?(key: "after")

    Object.const_set(:LaterJob, Class.new(LedgerJob))
    job.update_columns(run_at: Time.now.utc)
    drain(fibers: 5)
    assert_equal "succeeded", job.reload.state, "once the class exists, the retry runs it"
    assert LedgerEntry.exists?(key: "late")
  ensure
    Object.send(:remove_const, :LaterJob) if defined?(LaterJob)
  end

  test "each retried and each failed job gets one line in Bobbin's log with class, id and error" do
    id = FlakyJob.enqueue("k", 99)
    log = bobbin_log { drain(fibers: 2) }
    assert_match(/FlakyJob #{id} failed attempt 1\/4 \(ArgumentError: flaky k\); retrying in/, log)
    assert_match(/FlakyJob #{id} failed after 4 attempt\(s\): ArgumentError: flaky k/, log)
    assert_equal 4, log.scan(/FlakyJob #{id} failed/).size
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
