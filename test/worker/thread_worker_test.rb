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

  # The gather and shutdown loops check their deadline, then read the clock again for the timeout; when the
  # deadline passes in between the wait is asked for a negative interval (seen killing a 100-thread bench worker).
  test "a wait whose deadline passed a moment ago returns instead of raising" do
    worker = Bobbin::Worker.new(threads: 1)
    worker.stop
    assert_equal ".", worker.send(:wait, -0.000_1), "the pending wake-up is read, not an ArgumentError raised"
  end
end
