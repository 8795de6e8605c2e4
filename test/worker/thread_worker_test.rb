# frozen_string_literal: true

require "test_helper"

class ThreadWorkerTest < Bobbin::TestCase
  test "a thread pool runs every job, never more at once than it has threads" do
    Bobbin.enqueue_all(Array.new(60) { |i| [ SleepJob, [ 0.05, "job-#{i}" ] ] })
    drain(threads: 6)
    assert_equal 60, Bobbin.counts["succeeded"]
    assert_equal 60, LedgerEntry.count
    assert_equal 6, Recorder.max_in_flight
  end

  test "failures in threads are recorded and the pool keeps going" do
    Bobbin.enqueue_all([ [ NotImplementedJob, [] ], [ LedgerJob, [ "a" ] ], [ LedgerJob, [ "b" ] ] ])
    drain(threads: 2)
    assert_equal({ "succeeded" => 2, "failed" => 1 }, Bobbin.counts.slice("succeeded", "failed"))
  end
end
