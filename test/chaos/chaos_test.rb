# frozen_string_literal: true

require "test_helper"

# `bin/rake chaos` (CHAOS_JOBS=10000 by default; CI runs CHAOS_JOBS=1000): workers killed with -9 and PostgreSQL
# restarted while jobs flow. Nothing may be lost; only jobs in flight at a kill may run twice.
class ChaosTest < Bobbin::TestCase
  JOBS = Integer(ENV.fetch("CHAOS_JOBS", 10_000))
  KILLS = Integer(ENV.fetch("CHAOS_KILLS", 4))

  def counts = query { Bobbin.counts }

  # Reads through a PostgreSQL restart: a query that meets a dropped connection is retried on a fresh one.
  def query
    yield
  rescue ActiveRecord::ActiveRecordError
    ActiveRecord::Base.connection_handler.clear_all_connections!
    sleep(0.2)
    retry
  end

  def in_flight_keys = query { Bobbin::JobRecord.where(state: "running").pluck(:arguments) }.map { |json| JSON.parse(json).last }

  def restart_postgres
    port = TestDatabase.url[/port=(\d+)/, 1] || "5432"
    cluster = `pg_lsclusters -h 2>/dev/null`.lines.map(&:split).find { |fields| fields[2] == port }
    cluster && system("pg_ctlcluster", *cluster.first(2), "restart", "-m", "fast", out: File::NULL, err: File::NULL)
  end

  test "kill -9 and a PostgreSQL restart while #{JOBS} jobs flow: every job finishes, none lost" do
    skip_unless_postgres
    Bobbin.enqueue_all(Array.new(JOBS) { |i| [ ChaosJob, [ rand(0.02..0.3).round(3), "job-#{i}" ] ] })
    pids = []
    exposed = []
    ensure_killed(pids) do
      pids << spawn_bobbin("start", "--fibers", "100", "--processes", "2", "--polling-interval", "0.1", log: "tmp/chaos.log")
      KILLS.times do |round|
        wait_for("jobs flowing (round #{round})", timeout: 60) { counts["running"].to_i >= 20 }
        exposed.concat(in_flight_keys)
        victim = query { Bobbin::ProcessRecord.where(kind: "worker").pluck(:pid) }.sample
        Process.kill(:KILL, victim) if victim
        restart_postgres if round == KILLS / 2
      end
      wait_for("all #{JOBS} jobs done", timeout: 60 + JOBS / 50, interval: 0.5) { counts["succeeded"] == JOBS }
      Process.kill(:TERM, pids.first)
      assert wait_exit(pids.first, timeout: 60)&.success?
    end
    assert_equal JOBS, LedgerEntry.count, "no job lost"
    assert_equal 0, Bobbin.counts["failed"]
    repeated = StartEntry.group(:key).having("count(*) > 1").count.keys
    assert_empty repeated - exposed, "only jobs in flight at a kill or the restart ran twice"
  end
end
