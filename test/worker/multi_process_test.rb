# frozen_string_literal: true

require "test_helper"

class MultiProcessTest < Bobbin::TestCase
  test "two worker processes on one PostgreSQL run each of 5,000 jobs exactly once", long: true do
    skip_unless_postgres
    Bobbin.enqueue_all(Array.new(5_000) { |i| [ LedgerJob, [ "job-#{i}" ] ] })
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("work", "--fibers", "50", "--drain", "--polling-interval", "0.05")
      pids << spawn_bobbin("work", "--threads", "5", "--drain", "--polling-interval", "0.05")
      pids.each { |pid| assert wait_exit(pid, timeout: 120)&.success?, "worker #{pid} drains and exits" }
    end
    assert_equal({ "succeeded" => 5_000, "failed" => 0, "ready" => 0, "running" => 0 }, Bobbin.counts.slice("succeeded", "failed", "ready", "running"))
    assert_equal 5_000, LedgerEntry.distinct.count(:key), "the ledger's unique key refuses a second run"
    assert_equal 2, LedgerEntry.distinct.count(:pid), "both processes took part"
  end
end
