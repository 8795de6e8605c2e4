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
end
