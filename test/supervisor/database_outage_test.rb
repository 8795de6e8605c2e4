# frozen_string_literal: true

require "test_helper"
require "tempfile"

class DatabaseOutageTest < Bobbin::TestCase
  # The local cluster serving the test database, as [version, name], when this machine can restart it.
  def local_cluster
    port = TestDatabase.url[/port=(\d+)/, 1] || "5432"
    line = `pg_lsclusters -h 2>/dev/null`.lines.map(&:split).find { |fields| fields[2] == port }
    line && Process.uid.zero? ? line.first(2) : nil
  end

  # The local cluster (see local_cluster); skips the test where there is none.
  def cluster!
    skip_unless_postgres
    local_cluster or skip("needs a local PostgreSQL cluster this user can restart")
  end

  # A worker log for this test, deleted after it unless BOBBIN_KEEP_LOGS.
  def log_file(name) = (@log = "tmp/#{name}-#{Process.pid}.log")

  teardown { FileUtils.rm_f(@log) if @log && !ENV["BOBBIN_KEEP_LOGS"] }

  # Runs the block with a login role of the test's own (`attributes`: CREATE ROLE's, e.g. "CONNECTION LIMIT 1"),
  # a member of the current user, a URL that connects as it, and that URL's application_name; drops it after.
  def with_role(name, attributes = "")
    skip_unless_postgres
    connection = Bobbin::Record.connection
    skip("needs a role that may create roles") unless connection.select_value("SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user")
    role = "bobbin_#{name.tr('-', '_')}_#{Process.pid}"
    connection.execute("DROP ROLE IF EXISTS #{role}") # named after this pid: one there is a killed run's
    connection.execute("CREATE ROLE #{role} LOGIN PASSWORD 'secret' #{attributes} IN ROLE #{connection.quote_column_name(connection.select_value('SELECT current_user'))}")
    database = connection.select_value("SELECT current_database()")
    application_name = "bobbin-#{name}-#{Process.pid}"
    yield role, "postgres://#{role}:secret@127.0.0.1:#{TestDatabase.url[/port=(\d+)/, 1] || 5432}/#{database}?pool=25&application_name=#{application_name}", application_name
  ensure
    Bobbin::Record.connection.execute("DROP ROLE IF EXISTS #{role}") if role
  end

  def counts
    Bobbin.counts
  rescue ActiveRecord::ActiveRecordError
    ActiveRecord::Base.connection_handler.clear_all_connections!
    {}
  end

  test "restart PostgreSQL while 1,000 jobs flow: workers log the outage, reconnect, and every job finishes", long: true do
    cluster = cluster!
    Bobbin.enqueue_all(Array.new(1_000) { |i| [ OutageSafeJob, [ "job-#{i}" ] ] })
    log = log_file("outage")
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("start", "--fibers", "20", "--processes", "2", "--polling-interval", "0.1", log: log)
      wait_for("jobs to flow") { counts["succeeded"].to_i >= 100 }
      assert pg_ctlcluster(*cluster, "restart", "-m", "fast"), "PostgreSQL restarted"
      wait_for("all 1,000 jobs done after the restart", timeout: 120, interval: 0.25) { counts["succeeded"] == 1_000 }
      Process.kill(:TERM, pids.first)
      assert wait_exit(pids.first, timeout: 30)&.success?
    end
    assert_equal 1_000, LedgerEntry.count
    assert_equal 0, Bobbin.counts["failed"]
    assert_match(/database unavailable|database reachable again|could not write/, File.read(log))
  end

  # A 5-fiber worker runs `before` (jobs that each write a LedgerEntry), PostgreSQL restarts once they have, and 20
  # upserts follow: none may fail on a pooled connection the restart closed. Active Record trusts a connection used in
  # the last verify_timeout seconds (2 by default) without a check: a long one stands for a busy pool whose connections
  # were in use a moment before the restart.
  def assert_live_connections_after_restart(name, before)
    cluster = cluster!
    log = log_file(name)
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("work", "--fibers", "5", "--polling-interval", "0.1", log: log,
                                                                                env: { "DATABASE_URL" => "#{TestDatabase.url_with_pool}&verify_timeout=600" })
      Bobbin.enqueue_all(before)
      wait_for("the first jobs' rows") { LedgerEntry.count == before.size }
      assert pg_ctlcluster(*cluster, "restart", "-m", "fast"), "PostgreSQL restarted"
      query { Bobbin.enqueue_all(Array.new(20) { |i| [ LedgerUpsertJob, [ "after-#{i}" ] ] }) }
      wait_for("the jobs to finish", timeout: 60) { query { Bobbin.counts.values_at("succeeded", "failed").sum } == before.size + 20 }
      assert_equal({}, Bobbin::JobRecord.where(state: "failed").group(:last_error_class).count, "jobs failed on closed connections:\n#{File.read(log)}")
    end
  end

  test "after a PostgreSQL restart, jobs get live connections from the pool: none fails on one the restart closed", long: true do
    assert_live_connections_after_restart("restart-pool", Array.new(20) { |i| [ LedgerUpsertJob, [ "before-#{i}" ] ] }) # every pool connection is used
  end

  # Every slot busy through the restart, the claim loop sent nothing then, and the worker's sessions, idle a second,
  # reconnected quietly at their next statement: no outage was seen, so the pool kept the connections the restart had
  # closed, and the next jobs' first statements failed on them (5 of 20).
  test "after a PostgreSQL restart no claim saw (every slot busy through it), jobs still get live connections from the pool", long: true do
    assert_live_connections_after_restart("restart-busy-pool", Array.new(5) { |i| [ UpsertThenSleepJob, [ "busy-#{i}", 4 ] ] })
  end

  test "a worker stopped while PostgreSQL is down exits cleanly, says its jobs stay claimed, and they run once it is back", long: true do
    cluster = cluster!
    log = log_file("stop-in-outage")
    pids = []
    config = Tempfile.create([ "bobbin", ".yml" ])
    config.write({ "heartbeat_interval" => 0.5, "process_alive_threshold" => 2, "workers" => [ { "fibers" => 5 } ] }.to_yaml)
    config.close
    ensure_killed(pids) do
      pids << spawn_bobbin("work", "--fibers", "5", "--shutdown-timeout", "5", log: log)
      Bobbin.enqueue_all([ [ SleepJob, [ 3 ] ] ])
      wait_for("the job to start") { Bobbin.counts["running"] == 1 }
      assert pg_ctlcluster(*cluster, "stop", "-m", "fast"), "PostgreSQL stopped"
      Process.kill(:TERM, pids.first) # the job finishes within shutdown_timeout; its outcome cannot be written
      assert wait_exit(pids.first, timeout: 60)&.success?, "the worker exited cleanly:\n#{File.read(log)}"
      assert pg_ctlcluster(*cluster, "start"), "PostgreSQL started again"
      output = File.read(log)
      assert_match(/stopped with the database unavailable \(.*\): its unfinished jobs and 1 finished job whose outcome could not be written stay claimed/, output)
      assert_no_match(/\.rb:\d+:in /, output, "no backtrace")
      assert_equal "running", query { Bobbin::JobRecord.sole.state }, "the job is kept, claimed by the stopped worker"
      pids << spawn_bobbin("start", "-c", config.path)
      wait_for("the job to run again once its worker's heartbeat expired", timeout: 60) { query { Bobbin.counts["succeeded"] } == 1 }
    end
  ensure
    pg_ctlcluster(*cluster, "start") if cluster # a failure above may have left it down (a running one stays as it is)
    File.unlink(config.path) if config && File.exist?(config.path)
  end

  test "a worker stopped while PostgreSQL is down writes a finished job's outcome once it is back within shutdown_timeout", long: true do
    cluster = cluster!
    log = log_file("stop-in-short-outage")
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("work", "--fibers", "5", "--shutdown-timeout", "30", log: log)
      Bobbin.enqueue_all([ [ SleepJob, [ 2 ] ] ])
      wait_for("the job to start") { Bobbin.counts["running"] == 1 }
      assert pg_ctlcluster(*cluster, "stop", "-m", "fast"), "PostgreSQL stopped"
      Process.kill(:TERM, pids.first)
      wait_for("the worker to wait for the database", seen: -> { File.read(log) }) do
        File.read(log).match?(/stopping: waiting up to \d+s \(shutdown_timeout\) for the database, to write the outcomes of 1 finished job/)
      end
      assert pg_ctlcluster(*cluster, "start"), "PostgreSQL started again"
      assert wait_exit(pids.first, timeout: 60)&.success?, "the worker exited cleanly:\n#{File.read(log)}"
    end
    assert_equal [ "succeeded", 0 ], query { Bobbin::JobRecord.sole.then { |job| [ job.state, job.crashes ] } }, "written, not left to recovery"
    assert_match(/bobbin worker \d+ stopped; 0 unfinished jobs handed back to run again\n/, File.read(log))
  ensure
    pg_ctlcluster(*cluster, "start") if cluster
  end

  test "a supervisor stopped while PostgreSQL is down exits cleanly and says who recovers its workers' jobs", long: true do
    cluster = cluster!
    log = log_file("supervisor-stop-in-outage")
    pids = []
    config = Tempfile.create([ "bobbin", ".yml" ])
    config.write({ "heartbeat_interval" => 0.5, "process_alive_threshold" => 2, "shutdown_timeout" => 1, "workers" => [ { "fibers" => 5 } ] }.to_yaml)
    config.close
    ensure_killed(pids) do
      pids << spawn_bobbin("start", "-c", config.path, log: log)
      Bobbin.enqueue_all([ [ CrashSafeJob, [ 30, "long" ] ] ])
      wait_for("the job to start") { Bobbin.counts["running"] == 1 }
      assert pg_ctlcluster(*cluster, "stop", "-m", "fast"), "PostgreSQL stopped"
      Process.kill(:TERM, pids.first)
      assert wait_exit(pids.first, timeout: 60)&.success?, "the supervisor exited cleanly:\n#{File.read(log)}"
      assert pg_ctlcluster(*cluster, "start"), "PostgreSQL started again"
      output = File.read(log)
      assert_match(/bobbin supervisor \d+: stopped with the database unavailable \(.*\); its row is pruned 2s after its last heartbeat/, output)
      assert_match(/the jobs of the worker with pid \d+ go back to ready once the database is back/, output)
      assert_no_match(/\.rb:\d+:in /, output, "no backtrace")
      pids << spawn_bobbin("start", "-c", config.path)
      wait_for("the job to run again once its worker's heartbeat expired", timeout: 90) { query { Bobbin.counts["succeeded"] } == 1 }
    end
  ensure
    pg_ctlcluster(*cluster, "start") if cluster
    File.unlink(config.path) if config && File.exist?(config.path)
  end

  # The pids of the local cluster's server and its backends, to freeze (SIGSTOP) with signal_each: the server stops
  # answering without closing a socket, as a hung host or middlebox does.
  def server_pids(cluster)
    main = Integer(File.read(File.join(`pg_lsclusters -h`.lines.map(&:split).find { |fields| fields.first(2) == cluster }[5], "postmaster.pid")).lines.first)
    [ main, *`pgrep -P #{main}`.split.map(&:to_i) ]
  end

  # Freezes the server, sends TERM to `pid` and asserts that it exits cleanly while the server stays frozen; thaws it.
  def assert_stops_while_frozen(cluster, pid, log)
    frozen = server_pids(cluster)
    signal_each(:STOP, frozen)
    Process.kill(:TERM, pid)
    assert wait_exit(pid, timeout: 60)&.success?, "it exited while the server was frozen:\n#{File.read(log)}"
  ensure
    signal_each(:CONT, frozen) if frozen
  end

  # The supervisor returned an exited worker's jobs in its signal loop: while a frozen server (or a network that drops
  # packets) left that query unanswered, a TERM waited as long, and the other workers were never told to stop.
  test "PostgreSQL frozen as a worker dies: the supervisor still passes TERM on, and recovers the dead one's job once it thaws", long: true do
    cluster = cluster!
    log = log_file("frozen-recovery")
    config = start_config({ "threads" => 1, "processes" => 2 }, heartbeat_interval: 0.5, process_alive_threshold: 4)
    frozen = []
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("start", "-c", config.path, log: log)
      wait_for("2 workers registered") { Bobbin::ProcessRecord.where(kind: "worker").count == 2 }
      Bobbin.enqueue_all([ [ CrashSafeJob, [ 60, "dies" ] ] ])
      victim = wait_for("the job running") { Bobbin::JobRecord.where(state: "running").pick(:claimed_by) }
      victim_pid = Bobbin::ProcessRecord.find(victim).pid
      frozen = server_pids(cluster)
      signal_each(:STOP, frozen)
      Process.kill(:KILL, victim_pid)
      wait_for("the supervisor to see it exit") { File.read(log).include?("(pid #{victim_pid}, queues *) exited") }
      Process.kill(:TERM, pids.first)
      wait_for("the other worker told to stop", timeout: 15, seen: -> { File.read(log) }) { File.read(log).include?("TERM, stopping workers gracefully") }
      signal_each(:CONT, frozen)
      frozen = []
      assert wait_exit(pids.first, timeout: 60)&.success?, File.read(log)
    end
    assert_match(/bobbin worker \d+ stopping on TERM/, File.read(log))
    assert_equal [ "ready", "Bobbin::ProcessDied" ], query { Bobbin::JobRecord.sole.then { |job| [ job.state, job.last_error_class ] } }
  ensure
    signal_each(:CONT, frozen) if frozen
    FileUtils.rm_f(config.path) if config
  end

  # Its statements waited half of process_alive_threshold for an answer and its reconnects ~20 s more, one after the
  # other: a lone worker's TERM took a minute with the default threshold (here 600 s: ten minutes).
  test "PostgreSQL frozen: a lone worker's TERM still stops it, its job left to recovery, while the server stays frozen", long: true do
    cluster = cluster!
    log = log_file("frozen-worker-stop")
    config = start_config({ "fibers" => 5 }, heartbeat_interval: 1, process_alive_threshold: 600)
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("work", "-c", config.path, "--shutdown-timeout", "1", log: log)
      Bobbin.enqueue_all([ [ SleepJob, [ 600 ] ] ])
      wait_for("the job to start") { Bobbin.counts["running"] == 1 }
      assert_stops_while_frozen(cluster, pids.first, log)
    end
    assert_match(/stopped with the database unavailable \(.*the worker's stop is due.*\): its unfinished jobs stay claimed/, File.read(log))
    assert_equal "running", query { Bobbin::JobRecord.sole.state }, "left claimed for recovery"
  ensure
    FileUtils.rm_f(config.path) if config
  end

  # Its row's DELETE, on Active Record's session, waited for an answer for as long as the server stayed frozen.
  test "PostgreSQL frozen: a supervisor's TERM still ends it, its row left to be pruned, while the server stays frozen", long: true do
    cluster = cluster!
    log = log_file("frozen-supervisor-stop")
    config = start_config({ "fibers" => 2 }, heartbeat_interval: 1, process_alive_threshold: 600, shutdown_timeout: 1)
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("start", "-c", config.path, log: log)
      wait_for("the worker registered") { Bobbin::ProcessRecord.where(kind: "worker").exists? }
      assert_stops_while_frozen(cluster, pids.first, log)
    end
    assert_match(/bobbin supervisor \d+: stopped with the database unavailable \(.*did not answer.*\); its row is pruned 600s after its last heartbeat/, File.read(log))
    assert query { Bobbin::ProcessRecord.exists?(kind: "supervisor") }, "its row is left"
  ensure
    FileUtils.rm_f(config.path) if config
  end

  # Sends `signal` to each of the server's `pids`; a backend that exited since they were listed (its client gone) is
  # passed over (ESRCH failed a CI run).
  def signal_each(signal, pids)
    pids.each do |pid|
      Process.kill(signal, pid)
    rescue Errno::ESRCH
      nil
    end
  end

  # Each try at returning its jobs said so: a line a second for each worker that exited during the outage, and each
  # restart that found the database down added one more.
  test "a worker killed while PostgreSQL is down: one line says its jobs wait for the database, and they go back once it is back", long: true do
    cluster = cluster!
    log = log_file("recovery-in-outage")
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("start", "--fibers", "5", "--polling-interval", "0.1", log: log)
      Bobbin.enqueue_all([ [ CrashSafeJob, [ 60, "killed" ] ] ])
      worker = wait_for("the job running") { Bobbin::JobRecord.where(state: "running").pick(:claimed_by) }
      worker_pid = Bobbin::ProcessRecord.find(worker).pid
      assert pg_ctlcluster(*cluster, "stop", "-m", "fast"), "PostgreSQL stopped"
      Process.kill(:KILL, worker_pid)
      wait_for("the worker started twice again to find the database down", timeout: 30, seen: -> { File.read(log) }) do
        File.read(log).scan(/the supervisor starts it again/).size >= 2
      end
      tries = File.read(log).lines.grep(/bobbin supervisor: .*(recover|returning the jobs)/)
      assert pg_ctlcluster(*cluster, "start"), "PostgreSQL started again"
      wait_for("the killed worker's job back to ready", timeout: 60) { query { Bobbin::JobRecord.sole.crashes } == 1 }
      assert_equal 1, tries.size, "one line for the whole outage:\n#{tries.join}"
      wait_for("a line saying it works again") { File.read(log).include?("bobbin supervisor: returning the jobs of workers that exited works again") }
    end
  ensure
    pg_ctlcluster(*cluster, "start") if cluster
  end

  test "a worker that dies while PostgreSQL is down is started again until it is back: a warning per try, no crash trace", long: true do
    cluster = cluster!
    log = log_file("restart-in-outage")
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("start", "--fibers", "5", "--polling-interval", "0.1", log: log)
      worker = wait_for("the worker to register") { Bobbin::ProcessRecord.where(kind: "worker").pick(:pid) }
      assert pg_ctlcluster(*cluster, "stop", "-m", "fast"), "PostgreSQL stopped"
      Process.kill(:KILL, worker)
      wait_for("the worker started again to find the database down", timeout: 30, seen: -> { File.read(log) }) do
        File.read(log).match?(/bobbin worker \d+ stopped: the database is unavailable \(.+\); the supervisor starts it again/)
      end
      assert pg_ctlcluster(*cluster, "start"), "PostgreSQL started again"
      query { Bobbin.enqueue_all([ [ OutageSafeJob, [ "after" ] ] ]) }
      wait_for("the job to run on a worker started once the database was back", timeout: 60) { query { Bobbin.counts["succeeded"] } == 1 }
      output = File.read(log)
      assert_no_match(/crashed/, output)
      assert_no_match(/\.rb:\d+:in /, output, "no backtrace")
    end
  ensure
    pg_ctlcluster(*cluster, "start") if cluster
  end

  # A failover can leave a worker's address answered by a read-only server (the old primary, now a replica) for a
  # while. Played here by a role of the worker's own whose new sessions are read-only, then writable again.
  test "PostgreSQL turns read-only under a running worker: it logs an outage, keeps running, and runs jobs once writable", long: true do
    with_role("failover") { |role, url, name| read_only_under_a_worker(role, url, name) }
  end

  def read_only_under_a_worker(role, url, name)
    connection = Bobbin::Record.connection
    terminate = -> { connection.select_value("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = '#{name}'") }
    log = log_file("read-only")
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("work", "--fibers", "5", "--polling-interval", "0.2", log: log, env: { "DATABASE_URL" => url })
      wait_for("the worker to register") { Bobbin::ProcessRecord.exists?(kind: "worker") }
      connection.execute("ALTER ROLE #{role} SET default_transaction_read_only = on")
      assert terminate.call.positive?
      Bobbin.enqueue_all([ [ LedgerUpsertJob, [ "while-read-only" ] ] ])
      wait_for("the worker to find the database read-only") { File.read(log).include?("read-only transaction") }
      sleep(1) # claims fail meanwhile, with the worker alive
      assert_nil Process.wait(pids.first, Process::WNOHANG), "the worker is still running:\n#{File.read(log)}"
      assert_equal 0, LedgerEntry.count
      connection.execute("ALTER ROLE #{role} RESET default_transaction_read_only")
      terminate.call
      wait_for("the job to run once the database is writable", timeout: 30) { LedgerEntry.exists?(key: "while-read-only") }
      Process.kill(:TERM, pids.first)
      assert wait_exit(pids.first, timeout: 30)&.success?
    end
    output = File.read(log)
    # The claimer logs the first failure of an outage: the terminated session (PG::ConnectionBad) or, when it had
    # already reconnected, the read-only refusal; either way the refusals after it were taken as the same outage.
    assert_match(/database unavailable during claim: PG::(ReadOnlySqlTransaction|ConnectionBad)/, output)
    assert_match(/ReadOnlySqlTransaction|read-only transaction/, output)
    assert_match(/database reachable again/, output)
    assert_no_match(/\.rb:\d+:in /, output, "no backtrace")
  end

  # Between its registration and its first claim a worker opens its own sessions (claims, outcomes, notifications);
  # a server that refuses them then (max_connections reached, a restart, a blip) used to end the worker with a
  # backtrace. Played here by a role allowed one session: the worker's pooled one, which registered it.
  test "PostgreSQL refuses a worker's own sessions just after it registered: it logs an outage, keeps running, and runs jobs once let in", long: true do
    with_role("limited", "CONNECTION LIMIT 1") do |role, url|
      log = log_file("refused-at-boot")
      pids = []
      ensure_killed(pids) do
        Bobbin.enqueue_all([ [ LedgerUpsertJob, [ "while-refused" ] ] ])
        pids << spawn_bobbin("work", "--fibers", "5", "--polling-interval", "0.2", log: log, env: { "DATABASE_URL" => url })
        wait_for("the worker to find its sessions refused", seen: -> { File.read(log) }) { File.read(log).include?("database unavailable during claim") }
        sleep(1) # claims fail meanwhile, with the worker alive
        assert_nil Process.wait(pids.first, Process::WNOHANG), "the worker is still running:\n#{File.read(log)}"
        assert_equal 0, LedgerEntry.count
        Bobbin::Record.connection.execute("ALTER ROLE #{role} CONNECTION LIMIT -1")
        wait_for("the job to run once the worker's sessions are let in", timeout: 30) { LedgerEntry.exists?(key: "while-refused") }
        Process.kill(:TERM, pids.first)
        assert wait_exit(pids.first, timeout: 30)&.success?
      end
      output = File.read(log)
      assert_match(/database unavailable during claim: .*too many connections for role/, output)
      assert_match(/database reachable again/, output)
      assert_no_match(/\.rb:\d+:in /, output, "no backtrace:\n#{output}")
    end
  end

  test "PostgreSQL crashes (immediate stop) while jobs are enqueued one by one and run: every enqueue that returned runs", long: true do
    cluster = cluster!
    log = log_file("crash")
    pids = []
    returned = Queue.new # a job is promised once its enqueue returns
    producing = true
    producer = Thread.new do
      (1..).each do |i|
        break unless producing

        OutageSafeJob.enqueue("crash-#{i}") and returned << "crash-#{i}"
        sleep(0.002)
      rescue ActiveRecord::ActiveRecordError
        ActiveRecord::Base.connection_handler.clear_all_connections!
        sleep(0.05)
      end
    end
    ensure_killed(pids) do
      pids << spawn_bobbin("start", "--fibers", "20", "--processes", "2", "--polling-interval", "0.1", log: log)
      wait_for("jobs to flow") { LedgerEntry.count >= 200 }
      assert pg_ctlcluster(*cluster, "stop", "-m", "immediate"), "PostgreSQL crashed"
      sleep(4) # the clock retries every second meanwhile
      assert pg_ctlcluster(*cluster, "start"), "PostgreSQL recovered"
      before = returned.size
      wait_for("enqueues to return again") { returned.size > before + 200 }
      producing = false
      producer.join
      keys = Array.new(returned.size) { returned.pop }
      missing = -> { query { keys - LedgerEntry.where(key: keys).pluck(:key) } }
      wait_for("every job whose enqueue returned to run", timeout: 120, interval: 0.25) { missing.call.empty? }
      assert_equal 0, Bobbin.counts["failed"]
      Process.kill(:TERM, pids.first)
      assert wait_exit(pids.first, timeout: 30)&.success?
    end
    output = File.read(log)
    clock = output.scan(/bobbin supervisor: clock .*/)
    # Once (CI, stop 31) the first of these lines was "works again", with no failure before it: the supervisor's lines
    # come with the assertion so that the next time says why.
    seen = "\nthe supervisor's lines:\n#{output.lines.grep(/#{pids.first}\]|log writing/).join}"
    assert_match(/\Abobbin supervisor: clock failed: .*; retrying\z/, clock.first, "the outage is logged when it starts#{seen}")
    assert_match(/\Abobbin supervisor: clock works again after \d+s\z/, clock.last, "and when it ends#{seen}")
    assert_equal 2, clock.size, "one line each, not one a second#{seen}"
  ensure
    producing = false
    producer&.join
  end

  # A failover turns the database read-only for a while (`default_transaction_read_only`), and a session reads that
  # setting when it starts: the Active Record sessions the supervisor opened in the window refused every write long
  # after it ended, so its heartbeat and recurring ticks stopped for good (a trial).
  test "a database read-only for a while: the supervisor's heartbeat writes again once it is writable", long: true do
    skip_unless_postgres
    database = Bobbin::Record.connection.select_value("SELECT current_database()")
    log = log_file("read-only")
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("start", "--fibers", "2", "--processes", "1", "--polling-interval", "0.1", log: log)
      wait_for("the supervisor's heartbeat") { Bobbin::ProcessRecord.exists?(kind: "supervisor") }
      read_only(database, true)
      wait_for("the supervisor to fail to beat", timeout: 30) { File.read(log).include?("bobbin supervisor: heartbeat failed") }
      sleep(3) # it tries again within a second: on a new session, read-only from its start
      read_only(database, false)
      written = Time.now.utc
      wait_for("the supervisor to beat again", timeout: 30, seen: -> { File.read(log)[-600..] }) do
        query { Bobbin::ProcessRecord.where(kind: "supervisor").pick(:last_heartbeat_at) }.then { it && it > written }
      end
      Process.kill(:TERM, pids.first)
      assert wait_exit(pids.first, timeout: 30)&.success?
    end
    assert_match(/bobbin supervisor: heartbeat works again/, File.read(log))
  ensure
    read_only(database, false) if database
  end

  # Sets the database's default_transaction_read_only, on a session of its own; turning it on also ends every other
  # session of the database (a failover's), so each starts again read-only. Turning it off ends none.
  def read_only(database, on)
    sessions_killed!
    connection = Bobbin::Record.connection_db_config.new_connection
    connection.execute("SET default_transaction_read_only = off")
    name = connection.quote_column_name(database)
    connection.execute(on ? "ALTER DATABASE #{name} SET default_transaction_read_only = on" : "ALTER DATABASE #{name} RESET default_transaction_read_only")
    connection.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = #{connection.quote(database)} AND pid <> pg_backend_pid()") if on
  ensure
    connection&.disconnect!
  end

  # Through an outage the claim loop backed off and then slept its idle poll (polling_interval: 600 here), and the listener
  # backed off to its own 30 s: jobs that fell due meanwhile, or were enqueued as the database came back, waited for the
  # listener's next try (or the poll). Once the database answers, the worker claims at once and listens again.
  test "after a PostgreSQL outage a worker that polls rarely runs the jobs due meanwhile and those enqueued as it came back", long: true do
    cluster = cluster!
    log = log_file("outage-pickup")
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("work", "--threads", "2", "--polling-interval", "600", "--notified-polling-interval", "600", log: log)
      LedgerJob.enqueue("warm")
      wait_for("the worker to run a job") { LedgerEntry.exists?(key: "warm") }
      LedgerJob.enqueue_in(3, "due")
      assert pg_ctlcluster(*cluster, "stop", "-m", "fast"), "PostgreSQL stopped"
      wait_for("the listener to back off to its longest wait", timeout: 60, interval: 0.5) { File.read(log).include?("notifications lost") }
      sleep(Bobbin::Wakeups::Listener::MAX_BACKOFF + 5) # an outage the listener's backoff outgrew: its next try is ~30 s away
      assert pg_ctlcluster(*cluster, "start"), "PostgreSQL started again"
      wait_for("the job that fell due during the outage", timeout: 20, seen: -> { File.read(log) }) { query { LedgerEntry.exists?(key: "due") } }
      wait_for("the worker to claim again") { File.read(log).include?("database reachable again") }
      query { LedgerJob.enqueue("after") }
      wait_for("the job enqueued once the database was back", timeout: 20, seen: -> { File.read(log) }) { query { LedgerEntry.exists?(key: "after") } }
      assert_match(/notifications back/, File.read(log))
    end
  ensure
    pg_ctlcluster(*cluster, "start") if cluster
  end
end
