# frozen_string_literal: true

require "test_helper"

class DatabaseOutageTest < Bobbin::TestCase
  # The local cluster serving the test database, as [version, name], when this machine can restart it.
  def local_cluster
    port = TestDatabase.url[/port=(\d+)/, 1] || "5432"
    line = `pg_lsclusters -h 2>/dev/null`.lines.map(&:split).find { |fields| fields[2] == port }
    line && Process.uid.zero? ? line.first(2) : nil
  end

  def counts
    Bobbin.counts
  rescue ActiveRecord::ActiveRecordError
    ActiveRecord::Base.connection_handler.clear_all_connections!
    {}
  end

  test "restart PostgreSQL while 1,000 jobs flow: workers log the outage, reconnect, and every job finishes" do
    skip_unless_postgres
    cluster = local_cluster or skip("needs a local PostgreSQL cluster this user can restart")
    Bobbin.enqueue_all(Array.new(1_000) { |i| [ OutageSafeJob, [ "job-#{i}" ] ] })
    log = "tmp/outage-#{Process.pid}.log"
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("start", "--fibers", "20", "--processes", "2", "--polling-interval", "0.1", log: log)
      wait_for("jobs to flow") { counts["succeeded"].to_i >= 100 }
      assert system("pg_ctlcluster", *cluster, "restart", "-m", "fast", out: File::NULL, err: File::NULL), "PostgreSQL restarted"
      wait_for("all 1,000 jobs done after the restart", timeout: 120, interval: 0.25) { counts["succeeded"] == 1_000 }
      Process.kill(:TERM, pids.first)
      assert wait_exit(pids.first, timeout: 30)&.success?
    end
    assert_equal 1_000, LedgerEntry.count
    assert_equal 0, Bobbin.counts["failed"]
    assert_match(/database unavailable|database reachable again|could not write/, File.read(log))
  ensure
    FileUtils.rm_f(log) if log && !ENV["BOBBIN_KEEP_LOGS"]
  end
end
