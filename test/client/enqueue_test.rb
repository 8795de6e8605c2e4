# frozen_string_literal: true

require "test_helper"

class EnqueueTest < Bobbin::TestCase
  test "enqueue stores a ready row with the class's options and returns its id" do
    id = FlakyJob.enqueue("k", 0)
    job = Bobbin::JobRecord.find(id)
    assert_equal [ "FlakyJob", "default", "ready", 4, 0 ], [ job.class_name, job.queue, job.state, job.max_attempts, job.attempts ]
    assert_equal({ "ready" => 1, "blocked" => 0, "running" => 0, "succeeded" => 0, "failed" => 0, "discarded" => 0, "scheduled" => 0 }, Bobbin.counts)
  end

  test "enqueue_at stores a scheduled job that no worker claims before its time" do
    SleepJob.enqueue_at(Time.now + 3600, 0, "later")
    assert_equal 1, Bobbin.counts["scheduled"]
    drain(fibers: 5)
    assert_equal 1, Bobbin.counts["scheduled"]
    assert_empty LedgerEntry.all
  end

  test "enqueue_all writes many jobs with one INSERT and returns their ids in order" do
    inserts = []
    subscriber = ActiveSupport::Notifications.subscribe("sql.active_record") do |*, payload|
      inserts << payload[:sql] if payload[:sql].start_with?("INSERT")
    end
    ids = Bobbin.enqueue_all(Array.new(300) { |i| [ LedgerJob, [ "k#{i}" ] ] })
    assert_equal 1, inserts.size
    assert_equal 300, ids.size
    assert_equal [ "k0" ], Bobbin::JobRecord.find(ids.first).parsed_arguments
  ensure
    ActiveSupport::Notifications.unsubscribe(subscriber)
  end

  test "a class that is not a Bobbin job cannot be enqueued" do
    assert_refused(/NotAJob is not a Bobbin job \(include Bobbin::Job\)/) { Bobbin.enqueue_all([ [ NotAJob, [] ] ]) }
  end

  test "PostgreSQL: enqueues go on after Active Record resets the connection (DISCARD ALL drops the prepared statements, same session)" do
    skip_unless_postgres
    first = FlakyJob.enqueue("before", 0) # prepares the one-job INSERT on this connection
    # What the pool does to a connection it takes back from a thread that died holding it.
    Bobbin::Record.connection_pool.with_connection do |connection|
      pid = connection.raw_connection.backend_pid
      connection.reset!
      assert_equal pid, connection.raw_connection.backend_pid, "the same server session"
    end
    ids = [ FlakyJob.enqueue("after", 0), Bobbin::Record.transaction { FlakyJob.enqueue("in a transaction", 0) } ]
    assert_equal 3, Bobbin::JobRecord.where(id: [ first, *ids ]).count
  end

  # Runs the block in a fiber under Async (isolation level :fiber, as a fiber server's request), `locker` a session of
  # its own that can lock Bobbin's tables.
  def in_a_fiber_with_locker
    isolation_level = ActiveSupport::IsolatedExecutionState.isolation_level
    require "async"
    ActiveSupport::IsolatedExecutionState.isolation_level = :fiber
    locker = Bobbin::Record.connection_db_config.new_connection
    Sync { yield locker }
  ensure
    locker&.disconnect!
    ActiveSupport::IsolatedExecutionState.isolation_level = isolation_level
  end

  # A PREPARE waits for the table's lock like any statement (a migration altering bobbin_jobs holds it): a fiber's
  # timeout (Async) that cut the first enqueue of a session short there left that pooled session refusing every later
  # enqueue ("prepared statement … already exists").
  test "PostgreSQL: an enqueue cut short while its session prepared the INSERT leaves no session refusing the next ones" do
    skip_unless_postgres
    Bobbin::Record.connection_pool.disconnect! # a new session: its first enqueue prepares the INSERT
    in_a_fiber_with_locker do |locker|
      locker.execute("BEGIN; LOCK TABLE bobbin_jobs IN ACCESS EXCLUSIVE MODE")
      assert_raises(Timeout::Error) { Timeout.timeout(0.3) { FlakyJob.enqueue("cut short", 0) } }
      locker.execute("ROLLBACK")
      ids = Array.new(3) { |i| FlakyJob.enqueue("after #{i}", 0) }
      assert_equal 3, Bobbin::JobRecord.where(id: ids).count
    end
  end

  # On PostgreSQL an enqueue outside a transaction sends its INSERT and NOTIFY in one libpq pipeline.
  test "PostgreSQL: an enqueue cut short mid-pipeline (a fiber's timeout) leaves its session fit for the app's next statement" do
    skip_unless_postgres
    in_a_fiber_with_locker do |locker|
      Bobbin::Record.connection_pool.with_connection do # one session for the fiber throughout, as a request holds one
        before = FlakyJob.enqueue("before", 0)
        locker.execute("BEGIN; LOCK TABLE bobbin_jobs IN EXCLUSIVE MODE") # the INSERT waits for it
        assert_raises(Timeout::Error) { Timeout.timeout(0.3) { FlakyJob.enqueue("cut short", 0) } }
        locker.execute("ROLLBACK")
        assert Bobbin::JobRecord.exists?(before), "the app's next statement on the session (\"cut short\" may or may not be stored)"
        assert FlakyJob.enqueue("after", 0)
      end
    end
  end

  # The pooled session of the app's thread, by its server pid (not raw_connection: that marks the connection as one
  # Active Record cannot restore by reconnecting, and so never checks it again).
  def backend_pid = Bobbin::Record.connection_pool.with_connection { |connection| connection.select_value("SELECT pg_backend_pid()") }

  def terminate(pid)
    admin = PG.connect(TestDatabase.url)
    admin.exec_params("SELECT pg_terminate_backend($1)", [ pid ])
    wait_for("the session gone") { admin.exec_params("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", [ pid ]).getvalue(0, 0) == "0" }
    # Out of pg_stat_activity a moment before its process exits and its socket closes (the test's server is local).
    wait_for("the server process gone") { !File.exist?("/proc/#{pid}") } if File.directory?("/proc/self")
  ensure
    admin&.close
  end

  # A PostgreSQL restart or failover ends every pooled session. Active Record checks only a connection idle longer than
  # verify_timeout, so the first enqueue on a connection used a moment before the restart failed, though it had sent
  # nothing.
  test "PostgreSQL: an enqueue on a pooled session the server ended while it sat idle opens a new one and goes through" do
    skip_unless_postgres
    sessions_killed!
    ActiveRecord::Base.connection_handler.clear_all_connections!(:all) # none an earlier test marked unrestorable (raw_connection)
    Bobbin::Record.connection_pool.with_connection do |connection|
      connection.instance_variable_get(:@config)[:verify_timeout] = 600 # Active Record's 2 s, however slow the machine
      FlakyJob.enqueue("before", 0)
      pid = backend_pid
      terminate(pid)
      id = FlakyJob.enqueue("on the ended session", 0)
      assert Bobbin::JobRecord.exists?(id)
      refute_equal pid, backend_pid, "a new session"
    end
  ensure
    Bobbin::Record.connection_pool.disconnect! # no connection with that verify_timeout stays in the pool
  end

  test "PostgreSQL: an enqueue whose session the server ends on its way raises Active Record's connection error, and the next one goes through" do
    skip_unless_postgres
    sessions_killed!
    ActiveRecord::Base.connection_handler.clear_all_connections!(:all)
    locker = PG.connect(TestDatabase.url)
    locker.exec("BEGIN; LOCK TABLE bobbin_jobs IN EXCLUSIVE MODE") # the INSERT waits for it
    pid = nil
    enqueue = Thread.new do
      pid = backend_pid
      FlakyJob.enqueue("on its way", 0)
    end
    enqueue.report_on_exception = false
    wait_for("the INSERT waiting") { pid && locker.exec_params("SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1", [ pid ]).getvalue(0, 0) == "Lock" }
    terminate(pid)
    locker.exec("ROLLBACK")
    error = assert_raises(ActiveRecord::ActiveRecordError) { enqueue.value }
    assert Bobbin::Store.outage?(error), "a lost connection, as callers tell one: #{error.class}: #{error.message}"
    refute_match(/pipeline mode/, error.message, "the error that ended the session, not libpq's complaint at leaving pipeline mode")
    assert FlakyJob.enqueue("after", 0)
  ensure
    locker&.close
  end

  test "an enqueue to a database without Bobbin's tables says to migrate, not the database's own complaint" do
    without_bobbin_tables("enqueue_empty") do
      error = assert_raises(Bobbin::ConfigurationError) { FlakyJob.enqueue("nowhere", 0) }
      hidden = " \\(or they are not on this session's search_path: a SET search_path left on its connection, as schema-per-tenant apps make, hides them\\)" if postgres?
      assert_match(/\ABobbin's tables are missing in this database#{hidden}: call Bobbin.migrate! once after Bobbin.connect/, error.message)
      assert_raises(Bobbin::ConfigurationError) { Bobbin.enqueue_all([ [ FlakyJob, [ "nowhere", 0 ] ] ] * 2) }
    end
    assert FlakyJob.enqueue("back on the test database", 0)
  end

  test "unknown bobbin_options are a configuration error naming them" do
    error = assert_raises(Bobbin::ConfigurationError) { Class.new { include Bobbin::Job; bobbin_options(retry: 3) } }
    assert_match(/unknown bobbin_options retry/, error.message)
  end
end
