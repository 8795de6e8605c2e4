# frozen_string_literal: true

require "test_helper"

require "tempfile"

# `bin/rake chaos` (CHAOS_JOBS=10000 by default; CI runs CHAOS_JOBS=1000): workers killed with -9, PostgreSQL
# down for longer than process_alive_threshold, and jobs that call exit, abort or raise Interrupt, while jobs
# flow. Nothing may be lost; a job may run twice only when a kill or the outage interrupted it (Bobbin then
# records the interruption on the job's row); no live worker is pruned for the database's silence.
class ChaosTest < Bobbin::TestCase
  JOBS = Integer(ENV.fetch("CHAOS_JOBS", 10_000))
  KILLS = Integer(ENV.fetch("CHAOS_KILLS", 4))
  # Fewer jobs run longer, so that every kill and the restart land while work flows.
  STRETCH = [ 10_000.0 / JOBS, 1 ].max

  def counts = query { Bobbin.counts }

  def flowing_or_done? = counts.then { |now| now["running"] >= 20 || now["succeeded"] == JOBS }

  # Keys of the jobs Bobbin knows it ran more than once: a crash recovery or a retry left its error on the row.
  def rerun_keys = Bobbin::JobRecord.where.not(last_error_class: nil).pluck(:arguments).map { |json| JSON.parse(json).last }

  # A registered worker may already be gone (killed last round, its row not yet pruned): try the next one.
  # Returns the pid killed, or nil.
  def kill_a_worker
    query { Bobbin::ProcessRecord.where(kind: "worker").pluck(:pid) }.shuffle.find do |pid|
      Process.kill(:KILL, pid)
    rescue Errno::ESRCH
      false
    end
  end

  # Stops PostgreSQL for 2.5 × process_alive_threshold, then starts it again.
  def outage
    port = TestDatabase.url[/port=(\d+)/, 1] || "5432"
    cluster = `pg_lsclusters -h 2>/dev/null`.lines.map(&:split).find { |fields| fields[2] == port }&.first(2)
    flunk("no local PostgreSQL cluster on port #{port} to stop: the outage would silently not happen") unless cluster
    assert system("pg_ctlcluster", *cluster, "stop", "-m", "fast", out: File::NULL, err: File::NULL), "PostgreSQL stopped for the outage"

    sleep(THRESHOLD * 2.5)
    system("pg_ctlcluster", *cluster, "start", out: File::NULL, err: File::NULL)
  end

  THRESHOLD = 2

  def config
    Tempfile.create([ "chaos", ".yml" ]).tap do |file|
      file.write({ "heartbeat_interval" => 0.5, "process_alive_threshold" => THRESHOLD,
                   "workers" => [ { "fibers" => 100, "processes" => 2, "polling_interval" => 0.1 } ] }.to_yaml)
      file.close
    end
  end

  test "kill -9, a PostgreSQL outage past the threshold and jobs that exit, while #{JOBS} jobs flow: none lost" do
    skip_unless_postgres
    misbehaving = Array.new(JOBS / 100) { |i| [ ExitJob, [ %w[exit abort interrupt][i % 3] ] ] }
    Bobbin.enqueue_all((Array.new(JOBS) { |i| [ ChaosJob, [ (rand(0.02..0.3) * STRETCH).round(3), "job-#{i}" ] ] } + misbehaving).shuffle)
    pids = []
    killed = []
    file = config
    ensure_killed(pids) do
      pids << spawn_bobbin("start", "-c", file.path, log: "tmp/chaos.log")
      KILLS.times do |round|
        wait_for("jobs flowing (round #{round})", timeout: 60) { flowing_or_done? }
        killed << kill_a_worker
        outage if round == KILLS / 2
      end
      wait_for("all #{JOBS} jobs done", timeout: 60 + JOBS / 50, interval: 0.5) { counts["succeeded"] == JOBS }
      Process.kill(:TERM, pids.first)
      assert wait_exit(pids.first, timeout: 60)&.success?
    end
    assert_operator killed.compact.size, :>=, 1, "at least one worker was killed"
    assert_equal JOBS, LedgerEntry.count, "no job lost"
    assert_equal misbehaving.size, Bobbin.counts["failed"], "only the jobs that exit, abort or raise Interrupt failed"
    pruned = File.read("tmp/chaos.log").scan(/process \d+ \(pid (\d+) on \S+\) stopped heartbeating/).flatten.map(&:to_i)
    assert_empty pruned - killed, "no live worker was pruned for the database's silence"
    repeated = StartEntry.group(:key).having("count(*) > 1").count.keys
    assert_empty repeated - rerun_keys, "a job ran twice only when a kill or the restart interrupted it"
  ensure
    File.unlink(file.path) if file
  end

  test "TERM under the supervisor while jobs ignore their interrupt: all stops in bounded time, the next start recovers them" do
    skip_unless_postgres
    stubborn = Array.new(3) { |i| StubbornJob.enqueue("stubborn-#{i}") }
    Bobbin.enqueue_all(Array.new(JOBS / 10) { |i| [ ChaosJob, [ 0.05, "job-#{i}" ] ] })
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("start", "--fibers", "20", "--processes", "2", "--shutdown-timeout", "1", log: "tmp/chaos-stubborn.log")
      wait_for("the stubborn jobs running") { StartEntry.where("key LIKE 'stubborn-%'").count == 3 }
      Process.kill(:TERM, pids.first)
      assert wait_exit(pids.first, timeout: 1 + Bobbin::Worker::STOP_GRACE + Bobbin::Supervisor::KILL_GRACE + 10)&.success?,
             "the supervisor and its workers are gone within shutdown_timeout + the grace periods"
    end
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("start", "--fibers", "5", "--shutdown-timeout", "1", log: "tmp/chaos-stubborn-2.log")
      wait_for("the stubborn jobs recovered and started again") { StartEntry.where("key LIKE 'stubborn-%'").count == 6 }
      Process.kill(:TERM, pids.first)
      assert wait_exit(pids.first, timeout: 1 + Bobbin::Worker::STOP_GRACE + Bobbin::Supervisor::KILL_GRACE + 10)
    end
    assert_equal [ "Bobbin::ProcessDied" ], Bobbin::JobRecord.where(id: stubborn).distinct.pluck(:last_error_class)
  end
end
