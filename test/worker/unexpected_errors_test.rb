# frozen_string_literal: true

require "test_helper"

# What a worker does when something fails that is not an outage (a bug, a trigger, a schema that does not match), and
# when a write is slow: it never hands back a job it still holds, and it never stops beating while it claims. Real
# workers in this process, real database errors raised by triggers, real row locks.
class UnexpectedErrorsTest < Bobbin::TestCase
  TRIGGER = "bobbin_test_refuse"

  teardown do
    drop_trigger
    if @worker_thread&.alive?
      @worker.stop(timeout: 0)
      @worker_thread.join(30)
    end
  end

  def start_worker(**options)
    @worker = Bobbin::Worker.new(polling_interval: 0.05, **options)
    @worker_thread = Thread.new { @worker.run }.tap { |thread| thread.report_on_exception = false }
    wait_for("the worker registered") { Bobbin::ProcessRecord.where(kind: "worker").exists? }
    @worker
  end

  # Makes the database refuse an UPDATE of `table` that matches `condition` (old/new rows, SQL of either database),
  # as an application's trigger or a constraint would: an error that is not an outage.
  def refuse_updates(table, condition)
    Bobbin::Record.with_connection do |connection|
      if postgres?
        connection.execute("CREATE FUNCTION #{TRIGGER}() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION 'refused by a test trigger'; END $$ LANGUAGE plpgsql")
        connection.execute("CREATE TRIGGER #{TRIGGER} BEFORE UPDATE ON #{table} FOR EACH ROW WHEN (#{condition}) EXECUTE FUNCTION #{TRIGGER}()")
      else
        connection.execute("CREATE TRIGGER #{TRIGGER} BEFORE UPDATE ON #{table} FOR EACH ROW WHEN #{condition} " \
                           "BEGIN SELECT RAISE(ABORT, 'refused by a test trigger'); END")
      end
    end
  end

  def drop_trigger
    Bobbin::Record.with_connection do |connection|
      if postgres?
        connection.execute("DROP FUNCTION IF EXISTS #{TRIGGER}() CASCADE")
      else
        connection.execute("DROP TRIGGER IF EXISTS #{TRIGGER}")
      end
    end
  end

  # PostgreSQL: a connection holding job `id`'s row lock (an outcome's write waits for it) until ROLLBACK or disconnect.
  def hold_row(id)
    Bobbin::Record.connection_db_config.new_connection.tap do |locker|
      locker.execute("BEGIN")
      locker.execute("SELECT 1 FROM bobbin_jobs WHERE id = #{id} FOR UPDATE")
    end
  end

  # Waits for an UPDATE of bobbin_jobs (an outcome's write) to wait for a row lock. Read on a connection outside
  # any transaction: pg_stat_activity is read once per transaction.
  def wait_for_blocked_update
    waiting = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'UPDATE bobbin_jobs%'"
    wait_for("an outcome's write waiting for its row") { Bobbin::Record.with_connection { |c| c.select_value(waiting) }.to_i.positive? }
  end

  # A TSTP (or the reconcile after an outage) hands back what the worker does not hold. A finished job whose outcome
  # a flush is writing still reads `running`; left out of what the worker holds, the release put it back to ready and
  # the write then matched nothing: the job ran again.
  test "PostgreSQL: a job whose outcome is being written counts as held, and going quiet leaves it to that write" do
    skip_unless_postgres
    gate = GatedJob.gate("in-flight")
    id = GatedJob.enqueue(gate, "in-flight")
    locker = nil
    log = bobbin_log(level: Logger::INFO) do |so_far|
      worker = start_worker(threads: 2)
      wait_for("the job started") { GatedJob.started(gate) == 1 }
      locker = hold_row(id)
      GatedJob.open_gate(gate)
      wait_for_blocked_update
      assert_includes worker.held_ids, id, "held while its outcome is being written"
      worker.quiet
      wait_for("the worker quiet, its release done") { so_far.call.include?("quiet: claiming no more jobs") }
      locker.execute("ROLLBACK")
      wait_for("the job's outcome written") { Bobbin::JobRecord.where(id: id).pick(:state) == "succeeded" }
      worker.stop
      assert @worker_thread.join(30)
    end
    assert_match(/quiet: claiming no more jobs; \d+ running go on here until they end \(a TERM still gives them shutdown_timeout\), 0 claimed ahead handed back/, log)
    assert_equal 1, LedgerEntry.where(key: "in-flight").count
  ensure
    locker&.disconnect! # its row lock goes with it, should the test have failed holding it
  end

  # Jobs in flight at two crashes run one at a time per worker, so that the next crash blames only the one that
  # caused it. A suspect whose perform had returned but whose outcome was still being written let the next suspect in;
  # when that one killed the process, both were in flight, and the innocent job was blamed until it failed.
  test "PostgreSQL: the next crash suspect is not claimed while the last one's outcome is being written" do
    skip_unless_postgres
    gate = GatedJob.gate("suspect")
    first = GatedJob.enqueue(gate, "first-suspect")
    second = LedgerJob.enqueue("second-suspect")
    Bobbin::JobRecord.where(id: [ first, second ]).update_all(crashes: Bobbin::Recovery::SUSPECT)
    locker = nil
    bobbin_log(level: Logger::INFO) do
      start_worker(threads: 2)
      wait_for("the first suspect started") { GatedJob.started(gate) == 1 }
      assert_equal "ready", Bobbin::JobRecord.where(id: second).pick(:state), "one suspect at a time"
      locker = hold_row(first)
      GatedJob.open_gate(gate)
      wait_for_blocked_update
      LedgerJob.enqueue("innocent") # a claim comes, with room for both
      wait_for("the innocent job ran") { LedgerEntry.exists?(key: "innocent") }
      assert_equal "ready", Bobbin::JobRecord.where(id: second).pick(:state), "the second suspect waits for the first's outcome"
      locker.execute("ROLLBACK")
      wait_for("every job done") { Bobbin.counts["succeeded"] == 3 }
      @worker.stop
      assert @worker_thread.join(30)
    end
  ensure
    locker&.disconnect!
  end

  # A trial: a suspect that never returned (a job hung on a call without a timeout) held back every other suspect of
  # its crashes for good, while its worker ran new jobs beside it. Past crash_quarantine the next one starts beside it,
  # at once, not at the worker's next poll.
  test "a crash suspect still running after crash_quarantine lets the next suspect start beside it" do
    Bobbin.config.set(crash_quarantine: 1)
    gate = GatedJob.gate("long-suspect")
    first = GatedJob.enqueue(gate, "long-suspect")
    second = LedgerJob.enqueue("next-suspect")
    Bobbin::JobRecord.where(id: [ first, second ]).update_all(crashes: Bobbin::Recovery::SUSPECT)
    Bobbin::JobRecord.where(id: second).update_all(priority: 1) # claimed after the first
    start_worker(threads: 2, polling_interval: 60, notified_polling_interval: 60)
    wait_for("the first suspect started") { GatedJob.started(gate) == 1 }
    wait_for("the next suspect ran beside it, before any poll", timeout: 30) { LedgerEntry.exists?(key: "next-suspect") }
    assert_equal "running", Bobbin::JobRecord.where(id: first).pick(:state), "the first still runs"
    GatedJob.open_gate(gate)
    wait_for("both done") { Bobbin.counts["succeeded"] == 2 }
  end

  test "a claim loop that fails stops like TERM: the running job finishes and its outcome is written, then the error goes on" do
    gate = GatedJob.gate("crash")
    running = GatedJob.enqueue(gate, "running")
    log = bobbin_log(level: Logger::INFO) do |so_far|
      start_worker(threads: 2)
      wait_for("the job started") { GatedJob.started(gate) == 1 }
      refuse_updates("bobbin_jobs", "OLD.state = 'ready' AND NEW.state = 'running'")
      waiting = SleepJob.enqueue(0, "never-claimed")
      wait_for("the claim refused") { so_far.call.include?("its claim loop failed") }
      assert @worker_thread.alive?, "still waiting for its running job"
      GatedJob.open_gate(gate)
      error = assert_raises(StandardError) { @worker_thread.value }
      assert_match(/refused by a test trigger/, error.message) # the driver's error: the claim is the store's own SQL
      assert_equal "ready", Bobbin::JobRecord.where(id: waiting).pick(:state)
    end
    assert_match(/stopping, its claim loop failed: \S+: .*refused by a test trigger/, log)
    assert_equal "succeeded", Bobbin::JobRecord.where(id: running).pick(:state), "it finished and its outcome was written"
    assert_equal 1, LedgerEntry.where(key: "running").count
    refute Bobbin::ProcessRecord.exists?, "the worker deregistered"
  end

  # A trial filled max_connections: the worker's writer could not reconnect but its claimer could, and it claimed jobs
  # for two minutes whose outcomes then waited in its memory, while another worker had room for them.
  test "a worker whose outcomes cannot be written claims no more jobs until they can" do
    skip_unless_postgres
    Bobbin::Record.with_connection do |connection| # a write refused as an outage: out of disk for this statement
      connection.execute("CREATE FUNCTION #{TRIGGER}() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION 'disk full (test)' USING ERRCODE = '53100'; END $$ LANGUAGE plpgsql")
      connection.execute("CREATE TRIGGER #{TRIGGER} BEFORE UPDATE ON bobbin_jobs FOR EACH ROW WHEN (OLD.state = 'running' AND NEW.state <> 'running') " \
                         "EXECUTE FUNCTION #{TRIGGER}()")
    end
    first = SleepJob.enqueue(0, "first")
    log = bobbin_log(level: Logger::INFO) do |so_far|
      start_worker(threads: 2)
      wait_for("its outcome refused") { so_far.call.include?("writing job outcomes failed") }
      later = Array.new(4) { |i| SleepJob.enqueue(0, "later-#{i}") }
      sleep 1.5 # 30 polls
      assert_equal [ "ready" ], Bobbin::JobRecord.where(id: later).distinct.pluck(:state), "left for a worker that can finish them"
      drop_trigger
      wait_for("every job done", timeout: 30) { Bobbin::JobRecord.where(state: "succeeded").count == 5 }
      @worker.stop
      assert @worker_thread.join(30)
    end
    assert_equal 1, Bobbin::JobRecord.where(id: first, attempts: 1).count, "ran once"
    assert_match(/writing job outcomes works again/, log)
  end

  test "a heartbeat that fails for another reason than an outage is logged, and the heartbeats go on" do
    Bobbin.config.set(heartbeat_interval: 0.2)
    beat_at = -> { Bobbin::ProcessRecord.where(kind: "worker").pick(:last_heartbeat_at) }
    log = bobbin_log(level: Logger::INFO) do |so_far|
      start_worker(threads: 1)
      first = beat_at.call
      wait_for("a heartbeat") { beat_at.call > first }
      refuse_updates("bobbin_processes", postgres? ? "true" : "1")
      wait_for("the heartbeat refused") { so_far.call.include?("heartbeat failed") }
      drop_trigger
      refused_at = beat_at.call
      wait_for("heartbeats again") { beat_at.call > refused_at }
      @worker.stop
      assert @worker_thread.join(30)
    end
    assert_match(/ERROR .*heartbeat failed: \S+: .*refused by a test trigger/, log)
  end
end
