# frozen_string_literal: true

require "test_helper"

class ShutdownTest < Bobbin::TestCase
  %w[fibers threads].each do |mode|
    test "TERM with #{mode} in flight: short jobs finish, long ones return to ready, the process exits in time" do
      Bobbin.enqueue_all(Array.new(4) { |i| [ SleepJob, [ 60, "long-#{i}" ] ] } + Array.new(4) { |i| [ SleepJob, [ 0.5, "short-#{i}" ] ] })
      pids = []
      ensure_killed(pids) do
        pids << spawn_bobbin("work", "--#{mode}", "8", "--shutdown-timeout", "2", "--polling-interval", "0.05")
        wait_for("8 jobs running") { Bobbin.counts["running"] == 8 }
        started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        Process.kill(:TERM, pids.first)
        status = wait_exit(pids.first, timeout: 15)
        elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
        assert status&.success?, "the worker exits cleanly (#{status.inspect})"
        assert_operator elapsed, :<, 10, "exits soon after the 2 s shutdown timeout"
      end
      assert_equal (0..3).map { |i| "short-#{i}" }, LedgerEntry.order(:key).pluck(:key)
      long = Bobbin::JobRecord.where(state: "ready")
      assert_equal 4, long.count
      assert_equal [ 0 ], long.distinct.pluck(:attempts), "an attempt cut short by shutdown is given back"
      assert_equal 0, Bobbin.counts["running"]
    end
  end

  test "QUIT stops at once and still returns unfinished jobs to ready" do
    Bobbin.enqueue_all(Array.new(3) { |i| [ SleepJob, [ 60, "long-#{i}" ] ] })
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("work", "--fibers", "5", "--shutdown-timeout", "30", "--polling-interval", "0.05")
      wait_for("3 jobs running") { Bobbin.counts["running"] == 3 }
      Process.kill(:QUIT, pids.first)
      assert wait_exit(pids.first, timeout: 10)&.success?
    end
    assert_equal 3, Bobbin.counts["ready"]
  end
end
