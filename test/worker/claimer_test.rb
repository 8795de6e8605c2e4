# frozen_string_literal: true

require "test_helper"

class ClaimerTest < Bobbin::TestCase
  test "jobs of a live worker returned to ready while it runs them are claimed back, not started a second time" do
    Bobbin.enqueue_all(Array.new(3) { |i| [ CrashSafeJob, [ 1.5, "job-#{i}" ] ] })
    worker = Bobbin::Worker.new(fibers: 10, polling_interval: 0.05)
    thread = Thread.new { worker.run_until_empty }
    wait_for("3 jobs started") { StartEntry.count == 3 }
    Bobbin::ProcessRecord.where(id: worker.process_id).delete_all
    assert_equal 3, Bobbin::Recovery.recover(worker.process_id, "pruned by this test"), "its jobs went back to ready"
    SleepJob.enqueue(0.01, "wake") # the worker has room: it claims, and the claim returns its own three jobs too
    thread.join

    assert_equal 3, StartEntry.count, "each started once"
    assert_equal %w[job-0 job-1 job-2 wake], LedgerEntry.order(:key).pluck(:key)
    assert_equal [ "succeeded" ], Bobbin::JobRecord.distinct.pluck(:state)
  end

  # Widens the instant between an outcome batch's commit and the buffer striking its jobs off as unwritten.
  module SlowStrikeOff
    class << self
      attr_accessor :seconds
    end

    def finish(*) = super.tap { sleep(SlowStrikeOff.seconds) if SlowStrikeOff.seconds }
  end
  Bobbin::Store::Guarded.prepend(SlowStrikeOff)

  test "a retry written an instant before a claim returns it runs; it is not left running with nobody on it" do
    Recorder.reset
    SlowStrikeOff.seconds = 0.3
    id = FlakyJob.enqueue("retried", 1) # fails once; its retry (backoff 0) is due as soon as it is written
    worker = Bobbin::Worker.new(fibers: 10, polling_interval: 0.02)
    thread = Thread.new { worker.run } # not a drain: a drain waits for outcomes to be written before it claims
    wait_for("the retry to run") { LedgerEntry.exists?(key: "retried") }
    wait_for("its outcome") { Bobbin::JobRecord.where(id: id).pick(:state) == "succeeded" }
    assert_equal 2, Bobbin::JobRecord.where(id: id).pick(:attempts)
  ensure
    SlowStrikeOff.seconds = nil
    worker&.stop
    thread&.join
  end
end
