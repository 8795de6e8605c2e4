# frozen_string_literal: true

require "test_helper"
require "tempfile"

# A live process is never judged dead for a silence that was the database's or its own event loop's fault,
# and a live process that finds its row pruned registers again and keeps its jobs.
class LivenessTest < Bobbin::TestCase
  PRUNED = /stopped heartbeating|no longer registered/

  def start_supervisor(fibers:, processes:, log:, heartbeat: [ 0.5, 2 ], settings: {})
    @config = start_config({ "fibers" => fibers, "processes" => processes },
                           heartbeat_interval: heartbeat[0], process_alive_threshold: heartbeat[1], **settings)
    (@configs ||= []) << @config
    spawn_bobbin("start", "-c", @config.path, log: log)
  end

  def stop(pid)
    Process.kill(:TERM, pid)
    assert wait_exit(pid, timeout: 30)&.success?
  end

  def assert_each_started_once
    assert_empty StartEntry.group(:key).having("count(*) > 1").count.keys, "no job ran twice"
  end

  teardown do
    Array(@configs).each { |config| FileUtils.rm_f(config.path) }
    FileUtils.rm_f(@log) if @log && passed?
  end

  test "an event loop blocked twice as long as process_alive_threshold does not get its process pruned", long: true do
    log = @log = "tmp/liveness-stall-#{Process.pid}.log"
    Bobbin.enqueue_all([ [ LoopBlockingJob, [ 4, "blocker" ] ] ] + Array.new(30) { |i| [ CrashSafeJob, [ 0.2, "job-#{i}" ] ] })
    pids = []
    ensure_killed(pids) do
      pids << start_supervisor(fibers: 10, processes: 2, log: log)
      wait_for("every job done", timeout: 60, interval: 0.2) { LedgerEntry.count == 31 }
      stop(pids.first)
    end
    assert_equal 0, Bobbin.counts["failed"]
    assert_each_started_once
    refute_match PRUNED, File.read(log)
  end

  # A table lock held for minutes (CREATE INDEX without CONCURRENTLY, VACUUM FULL) held the outcome writes a job finished
  # into, and the heartbeat behind them on the same session: the busy worker went silent, the other worker took over
  # housekeeping from it, pruned it as the lock ended, and its jobs ran a second time beside the first.
  test "a table lock held past process_alive_threshold prunes no live worker: each job runs once, and the log says why it waited", long: true do
    skip_unless_postgres
    log = @log = "tmp/liveness-table-lock-#{Process.pid}.log"
    keeper_log = "tmp/liveness-table-lock-keeper-#{Process.pid}.log"
    @config = start_config({ "fibers" => 10 }, heartbeat_interval: 0.5, process_alive_threshold: 2)
    (@configs ||= []) << @config
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("work", "-c", @config.path, log: log) # the oldest: it keeps house while it beats
      wait_for("the worker registered") { Bobbin::ProcessRecord.count == 1 }
      pids << spawn_bobbin("work", "-c", @config.path, "-q", "elsewhere", log: keeper_log) # elected once the first is silent
      wait_for("the other registered") { Bobbin::ProcessRecord.count == 2 }
      Bobbin.enqueue_all(Array.new(4) { |i| [ CrashSafeJob, [ 5, "long-#{i}" ] ] } + Array.new(6) { |i| [ CrashSafeJob, [ 0.5, "short-#{i}" ] ] })
      wait_for("every job running", timeout: 30) { StartEntry.count == 10 }
      Bobbin::JobRecord.transaction do # the short jobs end while it is held
        Bobbin::JobRecord.connection.execute("LOCK TABLE bobbin_jobs IN ACCESS EXCLUSIVE MODE")
        sleep 5 # 2.5 × process_alive_threshold
      end
      wait_for("every job done", timeout: 60, interval: 0.2) { LedgerEntry.count == 10 }
      pids.each { |pid| stop(pid) }
    end
    assert_each_started_once
    assert_equal 0, Bobbin::JobRecord.where("crashes > 0").count
    refute_match PRUNED, File.read(log) + File.read(keeper_log)
    assert_match(/waited [\d.]+s for a lock on Bobbin's tables/, File.read(log))
  ensure
    FileUtils.rm_f(keeper_log) if keeper_log && passed? # nil when skipped (SQLite)
  end

  # Alone in flight, the job is blamed for the "crash" (its attempt stands), and the worker's next claim may take it
  # back before its heartbeat does: it must still run once, and its outcome be written.
  test "a live worker pruned with one job in flight keeps it: the job runs once and succeeds", long: true do
    log = @log = "tmp/liveness-one-#{Process.pid}.log"
    Bobbin.enqueue_all([ [ CrashSafeJob, [ 3, "alone" ] ] ])
    pids = []
    ensure_killed(pids) do
      pids << start_supervisor(fibers: 5, processes: 1, log: log)
      wait_for("the job running") { StartEntry.count == 1 }
      worker = Bobbin::ProcessRecord.find_by!(kind: "worker")
      # At once, as a prune does: between the two, the supervisor's own prune found the job's row naming no process
      # and recovered it first (CI, a loaded machine), and this recovery had nothing left to return.
      recovered = Bobbin::Record.transaction do
        worker.delete
        Bobbin::Recovery.recover(worker.id, "pruned by this test")
      end
      assert_equal 1, recovered
      wait_for("the job done", timeout: 30) { Bobbin::JobRecord.sole.state == "succeeded" }
      stop(pids.first)
    end
    assert_each_started_once
    assert_equal 1, LedgerEntry.count
  end

  test "a host's Bobbin killed whole with -9 has its jobs back as it starts again, not a silence threshold later", long: true do
    log = @log = "tmp/liveness-killed-whole-#{Process.pid}.log"
    killed_log = "tmp/liveness-killed-#{Process.pid}.log"
    Bobbin.enqueue_all([ [ CrashSafeJob, [ 1, "survivor" ] ] ])
    pids = []
    worker = nil
    ensure_killed(pids) do
      pids << start_supervisor(fibers: 5, processes: 1, log: killed_log, heartbeat: [ 0.5, 600 ]) # silence would take 10 minutes
      wait_for("the job running") { StartEntry.count == 1 }
      worker = Bobbin::ProcessRecord.find_by!(kind: "worker").pid
      Process.kill(:KILL, -pids.first) # its process group: the supervisor and its worker at once
      Process.wait(pids.first)
      wait_for("the worker gone") { !alive?(worker) }
      pids << start_supervisor(fibers: 5, processes: 1, log: log, heartbeat: [ 0.5, 600 ])
      wait_for("the job run again", timeout: 60) { LedgerEntry.exists?(key: "survivor") }
      stop(pids.last)
    end
    assert_match(/process \d+ \(pid #{worker} on .*\) is gone \(no such process\); 1 job returned to ready/, File.read(log))
    assert_equal [ [ "succeeded", 1 ] ], Bobbin::JobRecord.pluck(:state, :crashes), "run again once, the crash counted"
  ensure
    FileUtils.rm_f(killed_log) if passed?
  end

  test "a lone bobbin work killed with -9 has its jobs back as the next one starts, not a silence threshold later", long: true do
    log = @log = "tmp/liveness-lone-#{Process.pid}.log"
    Bobbin.enqueue_all([ [ CrashSafeJob, [ 1, "lone-survivor" ] ] ])
    @config = start_config({ "fibers" => 5 }, heartbeat_interval: 0.5, process_alive_threshold: 600) # silence: 10 minutes
    (@configs ||= []) << @config
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("work", "-c", @config.path)
      wait_for("the job running") { StartEntry.count == 1 }
      Process.kill(:KILL, pids.first)
      Process.wait(pids.first)
      pids << spawn_bobbin("work", "-c", @config.path, log: log)
      wait_for("the job run again", timeout: 30, seen: -> { File.read(log) }) { LedgerEntry.exists?(key: "lone-survivor") }
      stop(pids.last)
    end
    assert_match(/is gone \(no such process\); 1 job returned to ready/, File.read(log))
  end

  # Hosts may be set up apart, or be mid-deploy to new settings: each process is judged by the threshold it runs with.
  test "a supervisor with a 2 s threshold prunes no live worker of one that beats every 3 s (threshold 10 s)", long: true do
    log = @log = "tmp/liveness-thresholds-#{Process.pid}.log"
    slow_log = "tmp/liveness-slow-#{Process.pid}.log"
    Bobbin.enqueue_all(Array.new(3) { |i| [ CrashSafeJob, [ 8, "job-#{i}" ] ] })
    pids = []
    ensure_killed(pids) do
      pids << start_supervisor(fibers: 3, processes: 1, log: slow_log, heartbeat: [ 3, 10 ])
      wait_for("3 jobs running on the slow-beating supervisor") { StartEntry.count == 3 }
      pids << start_supervisor(fibers: 3, processes: 1, log: log)
      wait_for("every job done", timeout: 60, interval: 0.2) { LedgerEntry.count == 3 }
      pids.each { |pid| stop(pid) }
    end
    assert_each_started_once
    refute_match PRUNED, File.read(log)
    assert_equal [ [ "succeeded", 1 ] ], Bobbin::JobRecord.distinct.pluck(:state, :attempts)
  ensure
    FileUtils.rm_f(slow_log) if passed?
  end

  # The supervisor's loop turned once a second, and started its beats on its turns: with a heartbeat_interval of 1 s or
  # less its beats came more than two intervals apart, which it took for itself cut off from the database, so it trusted
  # no silence, and a frozen host's jobs stayed running for good.
  test "a supervisor beating every 0.4 s recovers the jobs of a host that froze", long: true do
    log = @log = "tmp/liveness-frozen-host-#{Process.pid}.log"
    frozen_log = "tmp/liveness-frozen-#{Process.pid}.log"
    Bobbin.enqueue_all([ [ CrashSafeJob, [ 5, "frozen" ] ] ])
    pids = []
    ensure_killed(pids) do
      pids << start_supervisor(fibers: 1, processes: 1, log: frozen_log, heartbeat: [ 0.4, 2 ])
      wait_for("the job running on the host about to freeze") { StartEntry.count == 1 }
      frozen = Bobbin::ProcessRecord.find_by!(kind: "worker").id
      freeze(-pids.first) # the whole host: its supervisor and its worker
      pids << start_supervisor(fibers: 1, processes: 1, log: log, heartbeat: [ 0.4, 2 ])
      wait_for("the frozen host's job recovered and run here", timeout: 30, interval: 0.2) { LedgerEntry.count == 1 }
      stop(pids.last)
      refute_equal frozen, Bobbin::JobRecord.sole.claimed_by
    end
    assert_equal [ [ "succeeded", "Bobbin::ProcessDied" ] ], Bobbin::JobRecord.pluck(:state, :last_error_class)
    assert_match(/stopped heartbeating; 1 job returned to ready/, File.read(log))
  ensure
    FileUtils.rm_f(frozen_log) if passed?
  end

  test "a supervisor stopping gracefully for longer than process_alive_threshold keeps beating through the stop", long: true do
    log = @log = "tmp/liveness-long-stop-#{Process.pid}.log"
    Bobbin.enqueue_all([ [ CrashSafeJob, [ 6, "long" ] ] ])
    pids = []
    ensure_killed(pids) do
      pids << start_supervisor(fibers: 2, processes: 1, log: log, settings: { shutdown_timeout: 20 })
      wait_for("the job running") { StartEntry.count == 1 }
      supervisor = Bobbin::ProcessRecord.find_by!(kind: "supervisor")
      Process.kill(:TERM, pids.first)
      stopping_since = supervisor.reload.last_heartbeat_at
      wait_for("a heartbeat 3 s after the stop began (threshold 2 s)", timeout: 20) do
        (supervisor.reload.last_heartbeat_at - stopping_since) >= 3
      end
      assert wait_exit(pids.first, timeout: 30)&.success?
    end
    assert_equal [ "succeeded" ], Bobbin::JobRecord.pluck(:state)
    assert_equal 0, Bobbin::ProcessRecord.count, "the supervisor removed its own row"
  end

  test "a PostgreSQL outage longer than process_alive_threshold: no live worker is pruned, nothing runs twice", long: true do
    skip_unless_postgres
    port = TestDatabase.url[/port=(\d+)/, 1] || "5432"
    cluster = `pg_lsclusters -h 2>/dev/null`.lines.map(&:split).find { |fields| fields[2] == port }
    skip("needs a local PostgreSQL cluster this user can stop") unless cluster && Process.uid.zero?
    log = @log = "tmp/liveness-outage-#{Process.pid}.log"
    Bobbin.enqueue_all(Array.new(300) { |i| [ ChaosJob, [ 0.05, "job-#{i}" ] ] })
    pids = []
    ensure_killed(pids) do
      pids << start_supervisor(fibers: 10, processes: 2, log: log)
      wait_for("jobs flowing") { query { Bobbin.counts["succeeded"] } >= 20 }
      assert pg_ctlcluster(*cluster.first(2), "stop", "-m", "fast")
      sleep(5) # the outage itself: 2.5 × process_alive_threshold
      assert pg_ctlcluster(*cluster.first(2), "start")
      wait_for("every job done", timeout: 120, interval: 0.5) { query { Bobbin.counts["succeeded"] } == 300 }
      stop(pids.first)
    end
    refute Bobbin::JobRecord.exists?(last_error_class: "Bobbin::ProcessDied"), "no job was taken from a live worker"
    refute_match PRUNED, File.read(log)
  end

  # Hosts sharing one PostgreSQL can disagree about the time; heartbeats are written and judged by the database's
  # clock, so a host whose clock runs ahead does not find every other host's workers silent.
  test "PostgreSQL: a supervisor on a host whose clock runs 2 minutes ahead prunes no live worker of another", long: true do
    skip_unless_postgres
    @skew = Tempfile.create([ "skew", ".rb" ])
    @skew.write("Time.singleton_class.prepend(Module.new { def now(...) = super + 120 }) # this host's clock runs ahead\n")
    @skew.close
    log = @log = "tmp/liveness-skew-#{Process.pid}.log"
    skewed_log = "tmp/liveness-skewed-#{Process.pid}.log"
    Bobbin.enqueue_all(Array.new(5) { |i| [ CrashSafeJob, [ 4, "job-#{i}" ] ] })
    pids = []
    ensure_killed(pids) do
      pids << start_supervisor(fibers: 5, processes: 1, log: log)
      wait_for("5 jobs running") { StartEntry.count == 5 }
      pids << spawn_bobbin("start", "-c", @config.path, "-r", @skew.path, log: skewed_log)
      wait_for("every job done", timeout: 60, interval: 0.2) { LedgerEntry.count == 5 }
      assert_nil Process.wait(pids.last, Process::WNOHANG), "the skewed supervisor runs:\n#{File.read(skewed_log)}"
      pids.each { |pid| stop(pid) }
    end
    assert_each_started_once
    assert_equal 0, Bobbin.counts["failed"]
    [ log, skewed_log ].each { |path| refute_match PRUNED, File.read(path) }
  ensure
    FileUtils.rm_f([ @skew&.path, (skewed_log if passed?) ].compact)
  end

  test "a live worker whose row was pruned registers again and keeps its running jobs; a pruned supervisor registers again", long: true do
    log = @log = "tmp/liveness-reregister-#{Process.pid}.log"
    Bobbin.enqueue_all(Array.new(5) { |i| [ CrashSafeJob, [ 5, "job-#{i}" ] ] })
    pids = []
    ensure_killed(pids) do
      pids << start_supervisor(fibers: 5, processes: 1, log: log)
      wait_for("5 jobs running") { StartEntry.count == 5 }
      worker = Bobbin::ProcessRecord.find_by!(kind: "worker")
      # One transaction: the supervisor's own prune, between the two, recovers the jobs of a worker whose row is gone
      # (its orphans), and this recover then found none (CI 155).
      recovered = Bobbin::Record.transaction do
        worker.delete
        Bobbin::Recovery.recover(worker.id, "pruned by this test")
      end
      assert_equal 5, recovered, "its jobs went back to ready"
      # Every fiber is busy, so no claim runs until a job ends (and one that ended is no longer running): only the
      # heartbeat can take all 5 back.
      wait_for("the worker's heartbeat to take its 5 jobs back") { Bobbin::JobRecord.where(state: "running", claimed_by: worker.id).count == 5 }
      supervisor = Bobbin::ProcessRecord.find_by!(kind: "supervisor")
      supervisor.delete
      wait_for("every job done", timeout: 30) { LedgerEntry.count == 5 }
      assert Bobbin::ProcessRecord.exists?(worker.id), "the worker registered again under its own id"
      wait_for("the supervisor registered again under its own id") { Bobbin::ProcessRecord.exists?(supervisor.id) }
      stop(pids.first)
    end
    assert_each_started_once
    assert_equal [ [ "succeeded", 1 ] ], Bobbin::JobRecord.distinct.pluck(:state, :attempts), "each ran once, as its first attempt"
    assert_match(/pruned as dead while alive; (registered again and )?took back \d+ of its jobs/, File.read(log), "its claims or its heartbeat took them back")
    assert_match(/bobbin supervisor \d+: pruned as dead while alive; registered again/, File.read(log))
  end
end
