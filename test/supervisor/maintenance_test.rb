# frozen_string_literal: true

require "test_helper"

# One process per host keeps house: the supervisor, or a worker that runs without one. Both start with it.
class MaintenanceTest < Bobbin::TestCase
  # A process row silent for an hour, holding one running job; returns the job's id.
  def ghost_with_a_job(key)
    ghost = Bobbin::ProcessRecord.register(kind: "worker", name: "ghost")
    ghost.update_columns(last_heartbeat_at: Time.now.utc - 3600)
    id = LedgerJob.enqueue(key)
    Bobbin::JobRecord.where(id: id).update_all(state: "running", claimed_by: ghost.id, attempts: 1)
    id
  end

  %w[work start].each do |command|
    # More expired jobs than a round once deleted (10,000, one round every heartbeat_interval): a host that finishes
    # more than a thousand jobs a second must not pile them up. They are all gone before the second round. The
    # heartbeat is a minute apart, so what happens within the test's wait happened at start, not at a later beat.
    test "bobbin #{command} recovers a dead process's jobs and sweeps every expired one as it starts", long: true do
      id = ghost_with_a_job("rescued")
      # Dead by its pid (a process of this host killed): a silence alone is judged once the new process has reached the
      # database for the silent one's threshold (an outage may just have ended: see fresh_process_after_outage_test.rb).
      Bobbin::ProcessRecord.where(id: Bobbin::JobRecord.where(id: id).select(:claimed_by)).update_all(pid: dead_pid)
      expired = expired_jobs(10 * Bobbin::Retention::BATCH + 1)
      config = start_config({ "fibers" => 2 }, heartbeat_interval: 60, process_alive_threshold: 150)
      pids = []
      ensure_killed(pids) do
        pids << spawn_bobbin(command, "-c", config.path)
        wait_for("the dead process's job to run") { LedgerEntry.exists?(key: "rescued") }
        wait_for("the expired jobs to be deleted", timeout: 8) { !Bobbin::JobRecord.where(id: expired).exists? }
        Process.kill(:TERM, pids.first)
        assert wait_exit(pids.first, timeout: 30)&.success?
      end
      assert_equal [ "succeeded", "Bobbin::ProcessDied" ], Bobbin::JobRecord.where(id: id).pick(:state, :last_error_class)
    ensure
      File.delete(config.path)
    end
  end

  test "among workers without a supervisor, the oldest on the host keeps house; supervised ones never do" do
    elsewhere = Bobbin::ProcessRecord.register(kind: "worker", name: "on another host")
    elsewhere.update_columns(hostname: "another-host")
    first = Bobbin::ProcessRecord.register(kind: "worker", name: "a")
    second = Bobbin::ProcessRecord.register(kind: "worker", name: "b")
    supervised = Bobbin::ProcessRecord.register(kind: "worker", name: "c", supervisor_id: first.id)
    assert Bobbin::Maintenance.elected?(first.id), "the oldest here: another host's older worker keeps its own host's house"
    refute Bobbin::Maintenance.elected?(second.id)
    refute Bobbin::Maintenance.elected?(supervised.id)
    first.update_columns(pid: dead_pid)
    assert Bobbin::Maintenance.elected?(second.id), "one whose pid is gone (killed) holds no post, however recent its beat"
    first.update_columns(pid: Process.pid, last_heartbeat_at: Time.now.utc - 3600)
    assert Bobbin::Maintenance.elected?(second.id), "a silent one holds no post: the next one takes over"
    first.delete
    assert Bobbin::Maintenance.elected?(second.id)
  end

  # An error that waiting does not cure (here a table gone: a schema that does not match) is reported as what it is.
  # Calling it an outage would also make Recovery distrust every silent heartbeat for as long as it lasts, so no
  # dead process on the host would ever be pruned; and one failing service must not keep the others from running.
  test "a housekeeping service failing for another reason than an outage is logged as an error; the others still run" do
    state = ->(id) { Bobbin::JobRecord.where(id: id).pick(:state) }
    first = ghost_with_a_job("first")
    expired = expired_jobs(3)
    rename = ->(from, to) { Bobbin::Record.with_connection { |c| c.execute("ALTER TABLE #{from} RENAME TO #{to}") } }
    rename.("bobbin_recurring_runs", "bobbin_recurring_runs_away")
    reported = []
    Bobbin.config.on_thread_error = ->(error, context) { reported << [ error.class, context ] }
    log = bobbin_log(level: Logger::INFO) { assert_equal Bobbin.config.heartbeat_interval, Bobbin::Maintenance.run("test") }
    assert_equal [ [ ActiveRecord::StatementInvalid, { task: "bobbin test: sweeping old recurring runs", severity: :error } ] ], reported
    assert_match(/ERROR .*bobbin test: sweeping old recurring runs failed: ActiveRecord::StatementInvalid: .*bobbin_recurring_runs.* \(.*recurring_run\.rb:\d+/, log)
    refute_match(/unavailable/, log)
    assert_equal "ready", state.(first)
    refute Bobbin::JobRecord.where(id: expired).exists?, "retention ran after the failed service"

    second = ghost_with_a_job("second")
    bobbin_log { Bobbin::Maintenance.run("test") }
    assert_equal "ready", state.(second), "silent heartbeats are still trusted"
  ensure
    rename&.("bobbin_recurring_runs_away", "bobbin_recurring_runs")
    Bobbin::RecurringRun.reset_column_information # what Active Record learned while the table was away
  end

  # Through a 6-minute outage a standalone worker logged "maintenance skipped" at every run, each second: half of its
  # log (a trial). Housekeeping logs an outage as the other periodic tasks do: its start, reminders, its end.
  test "housekeeping through an outage logs its start once and its end" do
    once_per_run
    log = bobbin_log(level: Logger::INFO) do
      ActiveRecord::Base.establish_connection("postgres://bobbin@127.0.0.1:1/nothing?connect_timeout=1")
      3.times { assert_equal Bobbin::Maintenance::SOON, Bobbin::Maintenance.run("test") }
    ensure
      Bobbin.connect(TestDatabase.url_with_pool(name: TestDatabase.application_name))
    end
    assert_equal 1, log.scan("bobbin test: maintenance failed").size, log
    bobbin_log(level: Logger::INFO) do |said|
      Bobbin::Maintenance.run("test")
      assert_match(/INFO .*bobbin test: maintenance works again after \d+s/, said.call)
    end
  ensure
    Bobbin::Recovery.instance_variable_set(:@reachable_since, nil)
  end

  # A worker without a supervisor keeps house on its jobs' Active Record pool. Jobs that hold every connection
  # (ActiveRecord::Base.connection for the whole job) make housekeeping wait: that is not an outage, and once a
  # connection is free the dead processes are recovered at once, not a process_alive_threshold later.
  test "housekeeping on a pool with no free connection waits for one, and is not taken for an outage" do
    id = ghost_with_a_job("busy pool")
    pool = Bobbin::Record.connection_pool
    timeout = pool.checkout_timeout
    pool.checkout_timeout = 0.2
    held = []
    begin
      loop { held << pool.checkout }
    rescue ActiveRecord::ConnectionTimeoutError
      nil # every connection is out now
    end
    log = bobbin_log(level: Logger::INFO) do
      assert_equal Bobbin::Maintenance::SOON, Thread.new { Bobbin::Maintenance.run("test") }.value
    end
    assert_match(/WARN .*bobbin test: maintenance skipped, every connection of this process's Active Record pool is in use/, log)
    refute_match(/unavailable|ERROR/, log)
    held.each { |connection| pool.checkin(connection) }
    held = []
    assert_equal "running", Bobbin::JobRecord.where(id: id).pick(:state)
    bobbin_log { Thread.new { Bobbin::Maintenance.run("test") }.join }
    assert_equal "ready", Bobbin::JobRecord.where(id: id).pick(:state), "silent heartbeats are still trusted"
  ensure
    held&.each { |connection| pool.checkin(connection) }
    pool.checkout_timeout = timeout if timeout
  end
end
