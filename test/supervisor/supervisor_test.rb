# frozen_string_literal: true

require "test_helper"
require_relative "../cli/cli_helper"

class SupervisorTest < Bobbin::TestCase
  include CLIHelper
  def worker_pids = Bobbin::ProcessRecord.where(kind: "worker").pluck(:pid)

  test "kill -9 a fiber worker with 200 jobs in flight: every job completes, only those in flight run twice" do
    Bobbin.enqueue_all(Array.new(300) { |i| [ CrashSafeJob, [ 1.5, "job-#{i}" ] ] })
    pids = []
    in_flight = nil
    ensure_killed(pids) do
      pids << spawn_bobbin("start", "--fibers", "200", "--polling-interval", "0.05", "--shutdown-timeout", "5")
      wait_for("200 jobs in flight") { Bobbin.counts["running"] == 200 && StartEntry.count >= 200 }
      in_flight = Bobbin::JobRecord.where(state: "running").map { |job| job.parsed_arguments.last }
      victim = worker_pids.first
      Process.kill(:KILL, victim)
      wait_for("all 300 jobs done", timeout: 60) { Bobbin.counts["succeeded"] == 300 }
      refute_includes worker_pids, victim, "the supervisor replaced the killed worker"
      assert_equal 1, worker_pids.size
      Process.kill(:TERM, pids.first)
      assert wait_exit(pids.first, timeout: 20)&.success?
    end
    assert_equal 300, LedgerEntry.distinct.count(:key), "no job lost"
    ran_twice = StartEntry.group(:key).having("count(*) > 1").count.keys
    assert_operator ran_twice.size, :>, 0, "the killed jobs ran again"
    assert_empty ran_twice - in_flight, "only jobs in flight at the kill ran twice"
    assert_equal [ "Bobbin::ProcessDied" ], Bobbin::JobRecord.where(crashes: 1).distinct.pluck(:last_error_class)
    assert_equal [ 1 ], Bobbin::JobRecord.distinct.pluck(:attempts), "a crash with 200 jobs in flight costs none an attempt"
  end

  test "TERM during long jobs: short ones finish, long ones return to ready, the supervisor exits within the timeout", long: true do
    Bobbin.enqueue_all(Array.new(3) { |i| [ CrashSafeJob, [ 60, "long-#{i}" ] ] } + Array.new(3) { |i| [ CrashSafeJob, [ 0.5, "short-#{i}" ] ] })
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("start", "--threads", "3", "--processes", "2", "--shutdown-timeout", "2", "--polling-interval", "0.05")
      wait_for("6 jobs started") { StartEntry.count == 6 }
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      Process.kill(:TERM, pids.first)
      assert wait_exit(pids.first, timeout: 20)&.success?
      assert_operator Process.clock_gettime(Process::CLOCK_MONOTONIC) - started, :<, 10
    end
    assert_equal %w[short-0 short-1 short-2], LedgerEntry.order(:key).pluck(:key)
    assert_equal({ "ready" => 3, "running" => 0 }, Bobbin.counts.slice("ready", "running"))
    assert_equal 0, Bobbin::ProcessRecord.count, "every process deregistered"
  end

  # systemd's KillMode=control-group, Ctrl-C in a terminal and foreman signal every process of the group, the supervisor
  # forwards the signal too, and Puma's plugin sends the supervisor a TERM of its own: the workers took the forward for a
  # second signal and interrupted their jobs at once, whatever shutdown_timeout said (a trial, 3 of 3). A closed terminal
  # or a dropped ssh session sends HUP to the group: Ruby's default ended every process at once, the jobs left to
  # recovery without shutdown_timeout (a review).
  %i[TERM INT HUP].each do |signal|
    test "#{signal} to the whole process group is one graceful stop: the running jobs finish", long: true do
      Bobbin.enqueue_all(Array.new(2) { |i| [ CrashSafeJob, [ 3, "long-#{i}" ] ] })
      log = File.join(Dir.mktmpdir, "bobbin.log")
      pids = []
      ensure_killed(pids) do
        pids << spawn_bobbin("start", "--fibers", "2", "--processes", "2", "--shutdown-timeout", "60", "--polling-interval", "0.05", log: log)
        wait_for("2 jobs started") { StartEntry.count == 2 }
        Process.kill(signal, -pids.first)
        if signal != :INT # then the supervisor alone again, as Puma's plugin does once Puma has stopped
          wait_for("the stop to begin") { File.read(log).include?("stopping workers gracefully") }
          Process.kill(signal, pids.first)
        end
        assert wait_exit(pids.first, timeout: 60)&.success?, File.read(log)
      end
      assert_equal %w[long-0 long-1], LedgerEntry.order(:key).pluck(:key), File.read(log)
      assert_equal [ "succeeded" ], Bobbin::JobRecord.distinct.pluck(:state), "the jobs finished, not recovered"
      refute_match(/interrupting the running jobs now|stopping workers now|crashed/, File.read(log))
    end
  end

  # Bobbin trapped HUP over the ignore nohup set, so closing the terminal of a `nohup bobbin start &` stopped it all the
  # same (a review).
  test "under nohup a HUP to the whole process group stops nothing; the workers go on running jobs", long: true do
    log = File.join(Dir.mktmpdir, "bobbin.log")
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("start", "--fibers", "2", "--processes", "2", "--polling-interval", "0.05", log: log, prefix: [ "nohup" ])
      wait_for("2 workers started", seen: -> { File.read(log) }) { File.read(log).scan(/bobbin worker \d+ \(pid \d+\) started/).size == 2 }
      Process.kill(:HUP, -pids.first)
      LedgerJob.enqueue("after-hup")
      wait_for("the job enqueued after the HUP to run", seen: -> { File.read(log) }) { LedgerEntry.exists?(key: "after-hup") }
      refute_match(/HUP|stopping/, File.read(log))
      Process.kill(:TERM, pids.first)
      assert wait_exit(pids.first, timeout: 60)&.success?, File.read(log)
    end
  end

  # Signalled alone (kill PID, not the group, as systemd's KillMode=mixed or an operator does), the supervisor read no
  # signal while it waited for its workers: a QUIT after TERM was lost and the stop took the whole shutdown_timeout.
  test "QUIT to the supervisor while its TERM waits for long jobs stops the workers at once", long: true do
    Bobbin.enqueue_all(Array.new(2) { |i| [ CrashSafeJob, [ 60, "long-#{i}" ] ] })
    log = stop_twice(%w[start --fibers 2], :TERM, :QUIT, begun: "stopping workers gracefully", running: 2)
    assert_match(/QUIT while stopping, stopping workers now/, log)
    assert_equal({ "ready" => 2, "running" => 0 }, Bobbin.counts.slice("ready", "running"))
  end

  # A TERM that reached a worker between its fork and its own traps ran the supervisor's inherited handler and was
  # lost: the worker then ran until killed, shutdown_timeout + KILL_GRACE later (a CI run's supervisor took > 30 s).
  test "TERM while a worker is still forking: the worker stops as it boots, and the supervisor exits at once", long: true do
    log = "tmp/term-forking-#{Process.pid}.log"
    mark = File.expand_path("../../tmp/forked-term-#{Process.pid}", __dir__)
    FileUtils.rm_f(mark)
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("start", "--fibers", "5", "--polling-interval", "0.05", log: log,
                           env: { "BOBBIN_TEST_SLOW_FORK" => "1.5", "BOBBIN_TEST_FORK_MARK" => mark })
      wait_for("the worker forked") { File.exist?(mark) }
      Process.kill(:TERM, pids.first)
      status = wait_exit(pids.first, timeout: 20) # shutdown_timeout is 25 s: a lost TERM is waited out past this
      assert status&.success?, "the supervisor exited by itself, cleanly (#{status.inspect}): #{File.read(log)}"
    end
    assert_match(/bobbin worker \d+ stopped; 0 unfinished jobs/, File.read(log))
    refute_match(/crashed/, File.read(log))
    assert_equal 0, Bobbin::ProcessRecord.count, "the worker deregistered"
  ensure
    [ mark, log ].each { |path| FileUtils.rm_f(path) }
  end

  # A trial: a job that trapped TERM took its worker's stop; the worker went on claiming, and the supervisor killed it
  # once shutdown_timeout had passed, saying nothing. The worker puts its handler back within a second, saying so.
  # In async mode the job runs in the supervisor's process, and takes the supervisor's TERM.
  %w[fork async].each do |mode|
    test "#{mode} mode: a job that traps TERM does not take the stop: the handler is put back, and TERM stops the workers gracefully" do
      log = "tmp/trap-term-#{Process.pid}.log"
      mark = File.expand_path("../../tmp/trap-term-mark-#{Process.pid}", __dir__)
      FileUtils.rm_f(mark)
      pids = []
      ensure_killed(pids) do
        pids << spawn_bobbin("start", "--mode", mode, "--fibers", "5", "--polling-interval", "0.05", log: log)
        TrapTermJob.enqueue(mark)
        wait_for("the handler put back") { File.read(log).include?("its TERM handler was replaced by other code") }
        Process.kill(:TERM, pids.first)
        status = wait_exit(pids.first, timeout: 20) # shutdown_timeout is 25 s: a TERM the job took is waited out past this
        assert status&.success?, "the supervisor exited by itself, cleanly (#{status.inspect}): #{File.read(log)}"
      end
      assert_match(mode == "fork" ? /bobbin worker \d+ stopping on TERM/ : /bobbin supervisor: TERM, stopping workers gracefully/, File.read(log))
      refute File.exist?(mark), "the job's handler did not get the TERM"
      assert_equal 1, LedgerEntry.where(key: "trapped").count
    ensure
      [ mark, log ].each { |path| FileUtils.rm_f(path) }
    end
  end

  # Killed at the stop's deadline without a word, as if it had stopped: a worker that never began its stop (above).
  test "a worker still running at the stop's deadline is killed, named in the log, and its running job goes back to ready", long: true do
    log = "tmp/overdue-#{Process.pid}.log"
    id = CrashSafeJob.enqueue(60, "overdue")
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("start", "--fibers", "2", "--polling-interval", "0.05", "--shutdown-timeout", "0", log: log)
      wait_for("the job started") { StartEntry.exists?(key: "overdue") }
      worker = Bobbin::ProcessRecord.where(kind: "worker").pick(:pid)
      Process.kill(:STOP, worker) # it cannot act on the stop
      Process.kill(:TERM, pids.first)
      wait_exit(pids.first, timeout: 60)
    end
    assert_match(/bobbin supervisor: worker fibers-2#0 \(pid \d+, queues \*\) still running \d+s after the stop \(shutdown_timeout \+ \d+s\); killing it/, File.read(log))
    assert_equal "ready", Bobbin::JobRecord.where(id: id).pick(:state), File.read(log)
  ensure
    FileUtils.rm_f(log)
  end

  # Async mode's twin: a stop asked before the slot's thread had made its Worker found none to tell, and the thread
  # then ran its worker until the supervisor left it behind as stuck (exit 3).
  test "async mode: a stop asked while a worker thread is still booting stops it" do
    slot = Bobbin::Supervisor::Slot.new(Bobbin::Pool.parse({ "fibers" => 2, "polling_interval" => 0.05 }, "test"), 0)
    slot.start({ id: nil, async: true })
    slot.stop(graceful: true)
    wait_for("the worker thread to stop by itself", timeout: 20) { !slot.alive? }
    assert_equal :stopped, slot.exited
    assert_equal 0, Bobbin::ProcessRecord.count, "its worker deregistered"
  ensure
    slot&.worker&.stop(timeout: 0)
  end

  # SQLite goes on with the file it has open: a directory moved (or a backup restored with mv) left the workers on the
  # old file while jobs went into the new one, where they waited for ever with nothing said (a trial).
  %w[start work].each do |command|
    test "SQLite: bobbin #{command} whose database file is replaced under it says so and exits 75, to be started again" do
      skip("an SQLite file") if TestDatabase.postgres?
      with_tmpdir do |dir|
        path = File.join(dir, "db/jobs.sqlite3")
        FileUtils.mkdir_p(File.dirname(path))
        url = "sqlite3:#{path}?pool=10"
        assert run_bobbin("migrate", "-d", url).first.success?
        log = File.join(dir, "bobbin.log")
        pid = spawn_bobbin(command, "--fibers", "2", "--polling-interval", "0.05", log: log, env: { "DATABASE_URL" => url })
        ensure_killed(pid) do
          wait_for("the worker to start", timeout: 60) { File.read(log).match?(/bobbin worker \d+ \(pid \d+\) started/) }
          restored = File.join(dir, "restored/jobs.sqlite3") # a backup restored with mv, beside the one in use
          FileUtils.mkdir_p(File.dirname(restored))
          assert run_bobbin("migrate", "-d", "sqlite3:#{restored}").first.success?
          File.rename(File.dirname(path), "#{File.dirname(path)}-moved")
          File.rename(File.dirname(restored), File.dirname(path))
          status = wait_exit(pid, timeout: 60)
          assert_equal 75, status&.exitstatus, File.read(log)
        end
        assert_match(/the SQLite database #{Regexp.escape(path)} was moved, deleted or replaced while it ran.*check that file first/, File.read(log))
      end
    end
  end

  test "a worker that crashes as it boots logs the error with where it was raised, and the supervisor starts it again", long: true do
    boot = Tempfile.create([ "crash_once", ".rb" ])
    armed = "#{boot.path}.armed"
    File.write(armed, "")
    boot.write(<<~RUBY)
      Bobbin::Worker::Claimer.prepend(Module.new do
        def initialize(...)
          if File.exist?(#{armed.inspect})
            File.delete(#{armed.inspect})
            raise "boom as the worker boots"
          end
          super
        end
      end)
    RUBY
    boot.close
    log = "tmp/crash-trace-#{Process.pid}.log"
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("start", "--fibers", "5", "--polling-interval", "0.05", "-r", boot.path, log: log)
      Bobbin.enqueue_all([ [ LedgerJob, [ "after-the-crash" ] ] ])
      wait_for("the job to run on the worker started again", timeout: 30) { Bobbin.counts["succeeded"] == 1 }
    end
    assert_match(/bobbin worker \d+ crashed: RuntimeError: boom as the worker boots\n\s+#{Regexp.escape(boot.path)}:\d+:in /, File.read(log))
  ensure
    [ boot&.path, armed, log ].compact.each { |path| FileUtils.rm_f(path) }
  end

  test "a worker whose fork hook (the app's after_fork) raises crashes as it boots, leaving the supervisor's row and stop alone", long: true do
    mark = File.expand_path("../../tmp/fork-raised-#{Process.pid}", __dir__)
    FileUtils.rm_f(mark)
    log = "tmp/fork-raise-#{Process.pid}.log"
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("start", "--fibers", "5", "--polling-interval", "0.05", log: log, env: { "BOBBIN_TEST_FORK_RAISE" => mark })
      wait_for("the first worker's hook to raise") { File.exist?(mark) }
      Bobbin.enqueue_all([ [ LedgerJob, [ "after-the-crash" ] ] ])
      wait_for("the job to run on the worker started again", timeout: 30) { Bobbin.counts["succeeded"] == 1 }
      supervisor = Bobbin::ProcessRecord.find_by!(kind: "supervisor")
      beat = supervisor.last_heartbeat_at
      wait_for("the supervisor's next heartbeats") { (supervisor.reload.last_heartbeat_at - beat) >= 1 }
      Process.kill(:TERM, pids.first)
      assert wait_exit(pids.first)&.success?
    end
    output = File.read(log)
    assert_match(/bobbin worker \d+ crashed: RuntimeError: the app's after-fork hook failed/, output)
    assert_no_match(/pruned as dead while alive/, output, "the crashed child did not delete the supervisor's row")
    assert_equal 1, output.scan(/bobbin supervisor \d+ \(fork\) starting/).size
  ensure
    [ mark, log ].each { |path| FileUtils.rm_f(path) }
  end

  # Its heartbeat ran in its signal loop: while a lock on bobbin_processes (or a frozen server) held it, a TERM waited
  # as long, and the workers were told to stop that late (18 s of a 20 s lock); TTIN during a stop was dropped (a review).
  test "PostgreSQL: TERM and TTIN reach the workers while the supervisor's heartbeat waits for a lock", long: true do
    skip_unless_postgres
    Bobbin.enqueue_all([ [ CrashSafeJob, [ 3, "long" ] ] ])
    log = File.join(Dir.mktmpdir, "bobbin.log")
    locker = Bobbin::Record.connection_db_config.new_connection
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("start", "-c", start_config({ "threads" => 1 }, shutdown_timeout: 60).path, log: log)
      wait_for("the job started") { StartEntry.count == 1 }
      locker.execute("BEGIN; LOCK TABLE bobbin_processes IN ACCESS EXCLUSIVE MODE")
      wait_for("the supervisor's heartbeat (Active Record's UPDATE; a worker's is Bobbin's own SQL) to wait for the lock") do
        Bobbin::Record.connection.select_value(<<~SQL).positive? # not the locker's: its transaction sees one snapshot of the statistics
          SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'UPDATE "bobbin_processes" SET "last_heartbeat_at"%'
        SQL
      end
      Process.kill(:TERM, pids.first)
      wait_for("the supervisor to act on TERM under the lock", timeout: 5) { File.read(log).include?("TERM, stopping workers gracefully") }
      Process.kill(:TTIN, pids.first)
      wait_for("the worker's TTIN dump", timeout: 5) { File.read(log).match?(/TTIN: 1 running job/) }
      locker.execute("ROLLBACK")
      assert wait_exit(pids.first, timeout: 60)&.success?, File.read(log)
    end
    assert_equal %w[long], LedgerEntry.pluck(:key), "the job finished before the stop ended"
  ensure
    locker&.disconnect!
  end

  # The supervisor queries from its clock's thread and its heartbeat's (and its main loop, recovering a worker that
  # exited), each on a connection of its Active Record pool: a beat held up (a lock, a long retention sweep) while the
  # clock ticked kept two open, where `bobbin doctor`'s total, held against max_connections, counted one.
  test "PostgreSQL: the connections a deployment holds, its supervisor's heartbeat waiting while its clock ticks, stay within doctor's total", long: true do
    skip_unless_postgres
    pool = Bobbin::Pool.parse({ "threads" => 1 }, "workers[0]")
    total = Bobbin::ConnectionBudget.total([ pool ], :fork) # the child's Active Record pool is this process's size (25)
    sessions = -> { Bobbin::Record.connection.select_value("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'bobbin-test-child'") }
    log = File.join(Dir.mktmpdir, "bobbin.log")
    locker = Bobbin::Record.connection_db_config.new_connection
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("start", "-c", start_config({ "threads" => 1 }).path, log: log)
      wait_for("the worker to start") { File.read(log).include?("started: threads-1") }
      locker.execute("BEGIN; LOCK TABLE bobbin_processes IN ACCESS EXCLUSIVE MODE")
      wait_for("the supervisor's heartbeat to wait for the lock") do
        Bobbin::Record.connection.select_value(<<~SQL).positive?
          SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'UPDATE "bobbin_processes" SET "last_heartbeat_at"%'
        SQL
      end
      sleep 2 # the clock ticks every second meanwhile
      held = sessions.call
      locker.execute("ROLLBACK")
      assert_operator held, :<=, total, "sessions the deployment held, against ConnectionBudget.total (doctor's)"
      Process.kill(:TERM, pids.first)
      assert wait_exit(pids.first, timeout: 30)&.success?, File.read(log)
    end
  ensure
    locker&.disconnect!
  end

  # PRODUCT.md: Bobbin warns or refuses at boot when PostgreSQL's max_connections cannot hold the pool it computed. Only
  # `bobbin doctor` checked; `bobbin start` booted without a word, and the workers' sessions were refused at their busiest.
  test "PostgreSQL: bobbin start warns as it boots when max_connections cannot hold what its pools may open, or not beside other clients", long: true do
    skip_unless_postgres
    max, reserved = %w[max_connections superuser_reserved_connections].map { |name| Bobbin::Record.connection.select_value("SHOW #{name}").to_i }
    others = Array.new(5) { Bobbin::Record.connection_db_config.new_connection.tap(&:connect!) } # other clients' sessions
    { max - reserved + 10 => /may open #{max - reserved + 16} database connections, but PostgreSQL allows #{max - reserved} .*: at their busiest their sessions are refused/,
      max - reserved - 8 => /may open #{max - reserved - 2} database connections, but PostgreSQL allows #{max - reserved} .* and other clients hold \d+ now, leaving \d+: their sessions may be refused; raise max_connections/ }.each do |size, warning|
      log = File.join(Dir.mktmpdir, "bobbin.log")
      pids = []
      ensure_killed(pids) do # a fiber pool may lease its whole Active Record pool: `size` + 2 own + a listener, + 3 for the supervisor
        pids << spawn_bobbin("start", "--fibers", size.to_s, log: log, env: { "DATABASE_URL" => TestDatabase.url_with_pool(size) })
        wait_for("the supervisor to start its worker") { File.read(log).include?("starting 1 workers") }
        assert_match(/WARN -- : bobbin supervisor: these pools #{warning}/, File.read(log))
        Process.kill(:TERM, pids.first)
        assert wait_exit(pids.first, timeout: 30)&.success?, File.read(log)
      end
    end
  ensure
    others&.each(&:disconnect!)
  end

  # `bobbin work` (one worker, no supervisor) booted without a word where `bobbin start` warned.
  test "PostgreSQL: bobbin work warns as it boots when max_connections cannot hold what its worker may open" do
    skip_unless_postgres
    max, reserved = %w[max_connections superuser_reserved_connections].map { |name| Bobbin::Record.connection.select_value("SHOW #{name}").to_i }
    size = max - reserved + 10
    log = File.join(Dir.mktmpdir, "bobbin.log")
    pids = []
    ensure_killed(pids) do # a fiber pool may lease its whole Active Record pool: `size` + 2 own + a listener, no supervisor
      pids << spawn_bobbin("work", "--fibers", size.to_s, log: log, env: { "DATABASE_URL" => TestDatabase.url_with_pool(size) })
      wait_for("the worker to start", seen: -> { File.read(log) }) { File.read(log).include?("started: ") }
      assert_match(/WARN -- : bobbin worker: this worker may open #{size + 3} database connections, but PostgreSQL allows #{max - reserved} .*: at their busiest their sessions are refused/,
                   File.read(log))
      Process.kill(:TERM, pids.first)
      assert wait_exit(pids.first, timeout: 30)&.success?, File.read(log)
    end
  end

  # In async mode the supervisor's clock and heartbeat threads take connections from the pool its jobs use: with a pool
  # of just the jobs' need, jobs holding theirs (a transaction) left its heartbeat waiting checkout_timeout, again and
  # again, and its row went stale past process_alive_threshold (a supervisor judged dead while alive).
  test "async mode: the Active Record pool must hold the supervisor's clock and heartbeat besides the jobs, whose transactions then starve neither", long: true do
    assert_config_exit(run_bobbin("start", "--mode", "async", "--threads", "2", env: { "DATABASE_URL" => TestDatabase.url_with_pool(2) }, timeout: 30),
                       /the Active Record pool of "primary" has 2 connections but 1 pools in one process and its supervisor's clock and heartbeat needs 4; set pool: 4/)
    skip("SQLite: the jobs' write transactions hold its one writer, whatever the pool") unless postgres?

    Bobbin.enqueue_all(Array.new(2) { |i| [ TransactionSleepJob, [ "held-#{i}", 4 ] ] })
    config = start_config({ "threads" => 2 }, heartbeat_interval: 0.5, process_alive_threshold: 3)
    log = File.join(Dir.mktmpdir, "bobbin.log")
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("start", "--mode", "async", "-c", config.path, log: log, env: { "DATABASE_URL" => TestDatabase.url_with_pool(4) })
      wait_for("both jobs in their transactions") { Bobbin.counts["running"] == 2 }
      ages = Array.new(6) do
        sleep 0.5
        Bobbin::ProcessRecord.where(kind: "supervisor").pick(Arel.sql("extract(epoch FROM (now() AT TIME ZONE 'UTC') - last_heartbeat_at)")).to_f
      end
      # Judged by the alive threshold (3 s), not by a time of its own: a heartbeat that waited checkout_timeout (5 s) was older.
      assert_operator ages.max, :<, 3, "the supervisor's heartbeat age while the jobs held their connections: #{ages.inspect}\n#{File.read(log)}"
      refute_match(/could not obtain a connection from the pool/, File.read(log))
      wait_for("the jobs to finish") { Bobbin.counts["succeeded"] == 2 }
      Process.kill(:TERM, pids.first)
      assert wait_exit(pids.first, timeout: 30)&.success?, File.read(log)
    end
  end

  # With Bobbin's tables in a database of their own (connects_to), the async supervisor's clock and heartbeat take their
  # connections from that database's pool, which the jobs' enqueues use too; its size was not checked: jobs holding its
  # connections (enqueues in a transaction) left the heartbeat waiting checkout_timeout, its row stale (a review).
  test "async mode with a queue database of its own: its pool must hold the supervisor's clock and heartbeat besides the jobs' enqueues", long: true do
    skip_unless_postgres # SQLite: the jobs' write transactions hold its one writer, whatever the pool
    queue = write_queue_database_file
    assert_config_exit(run_bobbin("start", "--mode", "async", "--threads", "2", "-r", queue,
                                  env: { "BOBBIN_TEST_QUEUE_URL" => TestDatabase.url_with_pool(2) }, timeout: 30),
                       /the Active Record pool of "queue" has 2 connections but 1 pools in one process' enqueues and its supervisor's clock and heartbeat needs 4; set pool: 4/)

    Bobbin.enqueue_all(Array.new(2) { |i| [ QueueTransactionSleepJob, [ "held-#{i}", 4 ] ] })
    config = start_config({ "threads" => 2 }, heartbeat_interval: 0.5, process_alive_threshold: 3)
    log = File.join(Dir.mktmpdir, "bobbin.log")
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("start", "--mode", "async", "-c", config.path, "-r", queue, log: log, env: { "BOBBIN_TEST_QUEUE_URL" => TestDatabase.url_with_pool(4) })
      # The pool it asks for is enough: the supervisor's row beats while both jobs hold a connection each.
      wait_for("both jobs in their transactions") { Bobbin.counts["running"] == 2 }
      beat = Bobbin::ProcessRecord.where(kind: "supervisor").pick(:last_heartbeat_at)
      wait_for("a supervisor heartbeat while the jobs hold their connections", seen: -> { File.read(log) }) do
        Bobbin.counts["running"] == 2 && Bobbin::ProcessRecord.where(kind: "supervisor").pick(:last_heartbeat_at) > beat
      end
      wait_for("the jobs to finish") { Bobbin.counts["succeeded"] == 4 }
      refute_match(/could not obtain a connection from the pool/, File.read(log))
      Process.kill(:TERM, pids.first)
      assert wait_exit(pids.first, timeout: 30)&.success?, File.read(log)
    end
  end

  # The supervisor's heartbeat waits on another process's write lock, inside an SQLite call, while the killed worker is
  # forked again (its recovery gave up on the lock after the busy timeout, made short here): that child hung for ever
  # in the sqlite3 gem's after-fork close, and no job ran again. The holder waits its turn for the lock: the
  # supervisor's heartbeat and its worker write too, and a BEGIN IMMEDIATE among them failed a CI run.
  test "SQLite: a worker restarted while the supervisor's threads wait on another writer's lock runs jobs", long: true do
    skip("SQLite's write lock") if postgres?
    log = File.join(Dir.mktmpdir, "bobbin.log")
    holder = "db = SQLite3::Database.new(ARGV[0]); db.busy_timeout = 10_000; db.execute('BEGIN IMMEDIATE'); puts('locked'); $stdout.flush; sleep(6); db.execute('COMMIT')"
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("start", "-c", start_config({ "fibers" => 5 }, heartbeat_interval: 0.2, process_alive_threshold: 30).path,
                          log: log, env: { "DATABASE_URL" => TestDatabase.url_with_pool.sub("timeout=20000", "timeout=1000") })
      wait_for("a worker registered") { worker_pids.size == 1 }
      victim = worker_pids.first
      IO.popen([ *ruby, "-rsqlite3", "-e", holder, TestDatabase.sqlite_path ]) do |lock|
        assert_equal "locked\n", lock.gets
        sleep(1) # the supervisor's next heartbeat is waiting for the lock
        Process.kill(:KILL, victim)
        wait_for("the supervisor to see its worker die") { File.read(log).include?("(pid #{victim}, queues *) exited") }
      end
      id = CrashSafeJob.enqueue(0, "after")
      wait_for("the restarted worker to run a job", timeout: 30, seen: -> { File.read(log) }) { Bobbin::JobRecord.find(id).state == "succeeded" }
      refute_includes worker_pids, victim
      Process.kill(:TERM, pids.first)
      assert wait_exit(pids.first, timeout: 20)&.success?, File.read(log)
    end
  end

  test "workers of a supervisor killed with -9 stop on their own within seconds", long: true do
    pids = []
    children = []
    ensure_killed(pids, children) do
      pids << spawn_bobbin("start", "--fibers", "5", "--processes", "2", "--polling-interval", "0.05")
      wait_for("2 workers registered") { worker_pids.size == 2 }
      children.concat(worker_pids)
      Process.kill(:KILL, pids.first)
      Process.wait(pids.first)
      wait_for("orphaned workers to exit", timeout: 10) { children.none? { |pid| alive?(pid) } }
    end
    assert_equal 0, Bobbin::ProcessRecord.where(kind: "worker").count, "they deregistered on the way out"
  end

  test "async mode runs the pools as threads of one process" do
    Bobbin.enqueue_all(Array.new(40) { |i| [ SleepJob, [ 0.1, "job-#{i}" ] ] })
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("start", "--mode", "async", "--fibers", "10", "--processes", "2", "--polling-interval", "0.05")
      wait_for("40 jobs done") { Bobbin.counts["succeeded"] == 40 }
      assert_equal [ pids.first ], worker_pids.uniq
      assert_equal 2, worker_pids.size
      Process.kill(:TERM, pids.first)
      assert wait_exit(pids.first, timeout: 20)&.success?
    end
  end

  # A watchdog a job left running raised into the job's thread (a fiber pool's: its worker's) an exception that is no
  # StandardError: the slot's thread ended with it, the supervisor's reap raised it again, and the whole process exited,
  # every pool gone, nothing restarted.
  %w[Exception Interrupt].each do |error|
    test "async mode: #{error} raised into a worker's thread ends that worker alone, and the supervisor starts it again", long: true do
      log = "tmp/async-raised-#{error}-#{Process.pid}.log"
      async_worker_replaced(log) { WatchdogRaisingJob.enqueue(error) }
      assert_match(/bobbin worker thread crashed: #{error}: the watchdog's #{error}/, File.read(log))
      assert_match(/bobbin supervisor: worker fibers-2#0 \(thread, queues \*\) exited \(crashed\)/, File.read(log))
      assert_equal 0, Bobbin::ProcessRecord.count
    ensure
      FileUtils.rm_f(log) if passed?
    end
  end

  # A fiber job's Thread.exit ends its worker's thread, which has no value then: the slot took it for a thread still
  # running, so the supervisor never said the worker exited and restarted it with no delay, however fast it kept dying.
  test "async mode: a worker whose thread a job ended is said to have exited, and is started again", long: true do
    log = "tmp/async-killed-#{Process.pid}.log"
    id = nil
    async_worker_replaced(log) { id = ExitJob.enqueue("thread_exit") }
    assert_equal [ "failed", "Bobbin::ThreadKilled" ], Bobbin::JobRecord.where(id: id).pick(:state, :last_error_class)
    assert_equal 1, File.read(log).scan(/bobbin supervisor: worker fibers-2#0 \(thread, queues \*\) exited \(killed\)/).size, File.read(log)
  ensure
    FileUtils.rm_f(log) if passed?
  end

  test "async mode: a slot whose worker thread a job ended reports it killed" do
    slot = Bobbin::Supervisor::Slot.new(Bobbin::Pool.parse({ "fibers" => 2, "polling_interval" => 0.05 }, "test"), 0)
    slot.start({ id: nil, async: true })
    ExitJob.enqueue("thread_exit")
    wait_for("the worker thread to end") { !slot.alive? }
    assert_equal :killed, slot.exited
    assert_not slot.running?
  ensure
    slot&.worker&.stop(timeout: 0)
  end

  # Its worker thread ended once the stop gave up on the job (killed, it ran on in its C call): the process then waited at
  # exit for the call to return (for ever, for one that never does), and the job stayed claimed by a row the worker had
  # removed, for any host to give to another worker while it still ran.
  test "async mode: a thread job stuck in a C call past the stop goes back to ready, and the process exits 3 in bounded time", long: true do
    id = CCallJob.enqueue(120_000, "stuck")
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("start", "--mode", "async", "--threads", "2", "--shutdown-timeout", "1", "--polling-interval", "0.05")
      wait_for("the job in its C call") { StartEntry.count == 1 }
      Process.kill(:TERM, pids.first)
      status = wait_exit(pids.first, timeout: 1 + Bobbin::Worker::STOP_GRACE + Bobbin::Supervisor::KILL_GRACE + 10)
      assert_equal Bobbin::Worker::EXIT_STUCK, status&.exitstatus, "exited, with the status of a stop that left a job running"
    end
    assert_equal [ "ready", "Bobbin::ProcessDied" ], Bobbin::JobRecord.where(id: id).pick(:state, :last_error_class)
    assert_equal 0, Bobbin::ProcessRecord.count
  end

  test "bobbin pause and resume from the command line; a paused queue is not claimed" do
    assert system({ "DATABASE_URL" => TestDatabase.url_with_pool }, *ruby, "exe/bobbin", "pause", "llm", out: File::NULL)
    Bobbin::Client::Enqueuer.enqueue(SleepJob, [ 0, "llm" ], queue: "llm")
    SleepJob.enqueue(0, "default")
    drain(fibers: 5)
    assert_equal [ "default" ], LedgerEntry.pluck(:key)
    assert system({ "DATABASE_URL" => TestDatabase.url_with_pool }, *ruby, "exe/bobbin", "resume", "llm", out: File::NULL)
    drain(fibers: 5)
    assert_equal %w[default llm], LedgerEntry.order(:key).pluck(:key)
  end

  test "a bad config file stops bobbin start with the message and a non-zero status" do
    Tempfile.create([ "bobbin", ".yml" ]) do |file|
      file.write("development:\n  workers: [{ fibers: 2, threads: 2 }]\n")
      file.close
      output = IO.popen({ "DATABASE_URL" => TestDatabase.url_with_pool }, [ *ruby, "exe/bobbin", "start", "-c", file.path ], err: [ :child, :out ], &:read)
      refute $?.success?
      assert_match(/#{Regexp.escape(file.path)}: development\.workers\[0\]: give exactly one of fibers or threads/, output)
    end
  end

  private
    # Starts `bobbin start --mode async` with one fiber pool (its output in `log`), runs the block (which enqueues a job
    # that ends the worker's thread), waits for another worker in its place to run a job, and stops the supervisor.
    def async_worker_replaced(log)
      pids = []
      ensure_killed(pids) do
        pids << spawn_bobbin("start", "--mode", "async", "--fibers", "2", "--polling-interval", "0.05", log: log)
        wait_for("the worker to start") { worker_pids.size == 1 }
        first = Bobbin::ProcessRecord.where(kind: "worker").pick(:id)
        yield
        wait_for("another worker in its place", seen: -> { File.read(log) }) { Bobbin::ProcessRecord.where(kind: "worker").where.not(id: first).exists? }
        LedgerJob.enqueue("after")
        wait_for("the new worker to run a job") { LedgerEntry.exists?(key: "after") }
        Process.kill(:TERM, pids.first)
        assert wait_exit(pids.first, timeout: 30)&.success?, "the supervisor stops cleanly:\n#{File.read(log)}"
      end
    end

    # A -r file that gives Bobbin's tables a pool of their own on BOBBIN_TEST_QUEUE_URL, as config.bobbin.connects_to does.
    def write_queue_database_file
      Tempfile.create([ "queue", ".rb" ]).tap do |file|
        file.write(<<~RUBY)
          Bobbin::Record.establish_connection(ActiveRecord::DatabaseConfigurations::UrlConfig.new("test", "queue", ENV.fetch("BOBBIN_TEST_QUEUE_URL")))
        RUBY
        file.close
      end.path
    end
end
