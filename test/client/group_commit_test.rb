# frozen_string_literal: true

require "test_helper"
require_relative "../wakeups/notice_probe"

# Concurrent enqueues of one process share a statement and a commit; each caller gets its own ids, only once its
# rows are committed, and only its own errors.
class GroupCommitTest < Bobbin::TestCase
  include NoticeProbe

  # On SQLite a writer waits for the lock only as long as its connection's busy timeout (5 s by default), and a busy
  # machine can take longer than that to line up the callers below; the tests here wait for callers, not timeouts.
  setup { Bobbin.connect(TestDatabase.url_with_pool(name: TestDatabase.application_name) + "&timeout=120000") unless postgres? }
  teardown { Bobbin.connect(TestDatabase.url_with_pool(name: TestDatabase.application_name)) unless postgres? }

  # Holds the database's write lock on another connection until the block returns (the first writer waits on it).
  def holding_write_lock
    db_config = Bobbin::Record.connection_db_config
    other = db_config.new_connection
    postgres? ? other.execute("BEGIN; LOCK TABLE bobbin_jobs IN EXCLUSIVE MODE") : other.raw_connection.execute("BEGIN IMMEDIATE")
    yield
  ensure
    other&.execute("ROLLBACK") rescue nil # rubocop:disable Style/RescueModifier -- the lock goes with the connection anyway
    other&.disconnect!
  end

  def group_commit = Bobbin::Store.group_commit

  def arguments_of(id) = JSON.parse(Bobbin::JobRecord.find(id).arguments)

  test "callers arriving while a write waits share the next statement; each gets the ids of its own rows" do
    @probe = Probe.new
    Bobbin::Wakeups.subscribe(@probe)
    if postgres?
      wait_for("the listener to listen") { Bobbin::Wakeups.listening? }
      @probe.take # the listener's wake-up on listening, not an enqueue's announcement
    end
    results = Queue.new
    holding_write_lock do
      first = Thread.new { results << [ "first", SleepJob.enqueue(0, "first") ] }
      wait_for("the first caller to write (blocked by the lock)") { group_commit.writing? && group_commit.queued.zero? }
      followers = Array.new(10) { |i| Thread.new { results << [ "follower-#{i}", SleepJob.enqueue(0, "follower-#{i}") ] } }
      wait_for("ten callers waiting for the next write") { group_commit.queued == 10 }
      assert_equal 0, Bobbin::JobRecord.count, "nothing committed while the lock is held"
      @threads = [ first, *followers ]
    end
    @threads.each(&:join)
    ids = Array.new(11) { results.pop }.to_h
    ids.each { |key, id| assert_equal [ 0, key ], arguments_of(id), "job #{id} holds the arguments its caller enqueued" }
    follower_ids = ids.except("first").values.sort
    assert_equal (follower_ids.first..follower_ids.last).to_a, follower_ids, "the ten followers were inserted by one statement"
    assert_heard(2) # one announcement per statement: the first write, then the followers' (11 without grouping)
  ensure
    Bobbin::Wakeups.unsubscribe(@probe)
  end

  test "a statement carries at most 64 × max_argument_bytes of arguments; the callers past that wait for the next" do
    Bobbin.config.max_argument_bytes = 1_000
    @probe = Probe.new
    Bobbin::Wakeups.subscribe(@probe)
    if postgres?
      wait_for("the listener to listen") { Bobbin::Wakeups.listening? }
      @probe.take
    end
    holding_write_lock do
      first = Thread.new { SleepJob.enqueue(0, "first") }
      wait_for("the first caller to write (blocked by the lock)") { group_commit.writing? && group_commit.queued.zero? }
      followers = Array.new(100) { |i| Thread.new { SleepJob.enqueue(0, i.to_s.rjust(900, "x")) } } # ~910 bytes each
      wait_for("a hundred callers waiting for the next write") { group_commit.queued == 100 }
      @threads = [ first, *followers ]
    end
    assert_equal 101, @threads.map(&:value).uniq.size
    assert_heard(3, "the first write, then the hundred followers' ~91 KB in two statements of at most 64,000 bytes")
  ensure
    Bobbin::Wakeups.unsubscribe(@probe)
  end

  test "a row the database refuses fails its own caller only; the others in its batch are stored" do
    skip_unless_postgres # a CHECK constraint stands in for any row-level refusal
    Bobbin::Record.connection.execute("ALTER TABLE bobbin_jobs ADD CONSTRAINT test_no_poison CHECK (arguments NOT LIKE '%poison%')")
    outcomes = Queue.new
    holding_write_lock do
      Thread.new { SleepJob.enqueue(0, "blocker") }
      wait_for("the first caller to write (blocked by the lock)") { group_commit.writing? && group_commit.queued.zero? }
      @threads = %w[good-1 poison good-2].map do |key|
        Thread.new { outcomes << [ key, SleepJob.enqueue(0, key) ] rescue outcomes << [ key, $! ] } # rubocop:disable Style/RescueModifier
      end
      wait_for("three callers waiting for the next write") { group_commit.queued == 3 }
    end
    @threads.each(&:join)
    results = Array.new(3) { outcomes.pop }.to_h
    assert_kind_of ActiveRecord::StatementInvalid, results["poison"]
    %w[good-1 good-2].each { |key| assert_equal [ 0, key ], arguments_of(results[key]) }
  ensure
    Bobbin::Record.connection.execute("ALTER TABLE bobbin_jobs DROP CONSTRAINT IF EXISTS test_no_poison") if postgres?
  end

  # Rack::Timeout, Timeout.timeout or a fiber's with_timeout can end a caller while it waits for the next batch.
  # Its rows must not be stored after it was told otherwise, and the batch after must still be written by someone.
  # Each caller alone waited the timeout again: with 16 Puma threads and SQLite's 5 s, the last one raised after 85 s.
  # Counted in statements, not seconds: the first caller's, then one for the eight behind it (not one more each).
  test "a batch refused for a lock it waited for in vain fails its callers at once, not after each waits again alone" do
    url = TestDatabase.url_with_pool(name: TestDatabase.application_name)
    # SQLite's busy timeout; PostgreSQL's lock_timeout, as an app may set it: 0.5 s either way.
    Bobbin.connect(postgres? ? "#{url}&options=-c%20lock_timeout%3D500" : url.sub(/timeout=\d+/, "timeout=500"))
    SleepJob.enqueue(0, "before") # opens the database before the lock
    outcomes = Queue.new
    enqueue = lambda do |key|
      Thread.new do
        SleepJob.enqueue(0, key)
      rescue ActiveRecord::StatementInvalid => error
        outcomes << [ key, error ]
      end
    end
    statements = Concurrent::AtomicFixnum.new
    counting = ActiveSupport::Notifications.subscribe("sql.active_record") { |*, payload| statements.increment if payload[:name] == "Bobbin Enqueue" }
    holding_write_lock do
      first = enqueue.("first")
      wait_for("the first caller to write (blocked by the lock)") { group_commit.writing? && group_commit.queued.zero? }
      followers = Array.new(8) { |i| enqueue.("follower-#{i}") }
      wait_for("eight callers waiting for the next write") { group_commit.queued == 8 }
      [ first, *followers ].each { |thread| assert thread.join(60), "every caller returns" }
    end
    results = Array.new(9) { outcomes.pop(timeout: 1) }.compact
    assert_equal 9, results.size, "every caller raised"
    results.each { |key, error| assert Bobbin::Store.transient?(error), "#{key}: a wait for the lock: #{error.class}" }
    assert_equal 2, statements.value, "the first caller's INSERT and the batch's, each waiting for the lock once"
    assert_equal 1, Bobbin::JobRecord.count
  ensure
    ActiveSupport::Notifications.unsubscribe(counting) if counting
    Bobbin.connect(TestDatabase.url_with_pool(name: TestDatabase.application_name))
  end

  test "a caller whose wait is cut short stores nothing and holds up no later enqueue" do
    outcomes = Queue.new
    holding_write_lock do
      @threads = [ Thread.new { outcomes << [ "first", SleepJob.enqueue(0, "first") ] } ]
      wait_for("the first caller to write (blocked by the lock)") { group_commit.writing? && group_commit.queued.zero? }
      @threads << Thread.new do
        Timeout.timeout(0.2) { SleepJob.enqueue(0, "impatient") }
      rescue Timeout::Error => error
        outcomes << [ "impatient", error ]
      end
      @threads.last.join
      assert_equal 0, group_commit.queued, "the impatient caller left the queue"
    end
    @threads.first.join
    after = Thread.new { SleepJob.enqueue(0, "after") }
    assert after.join(30), "an enqueue after the interrupted one returns"
    results = Array.new(2) { outcomes.pop }.to_h
    assert_kind_of Timeout::Error, results["impatient"]
    assert_equal [ [ 0, "first" ], [ 0, "after" ] ], Bobbin::JobRecord.order(:id).pluck(:arguments).map { |json| JSON.parse(json) }
    refute group_commit.writing?
  end

  # rack-timeout's Thread#raise (a RuntimeError) into the thread writing a batch for others was raised in theirs too,
  # though their jobs were stored (a review: 1,300 of 1,500 enqueues of threads with no timeout raised).
  test "an interrupt of the thread writing a batch ends that thread alone; the batch's other callers get their stored ids" do
    skip_unless_postgres # a trigger holds each INSERT at an advisory lock the test holds: gate 1 the first's, gate 2 the batch's
    connection = Bobbin::Record.connection
    connection.execute(<<~SQL)
      CREATE FUNCTION test_gate() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
        PERFORM pg_advisory_xact_lock_shared(CASE WHEN NEW.arguments LIKE '%gate-one%' THEN 1 WHEN NEW.arguments LIKE '%gate-two%' THEN 2 ELSE 3 END);
        RETURN NEW;
      END $$;
      CREATE TRIGGER test_gate BEFORE INSERT ON bobbin_jobs FOR EACH ROW EXECUTE FUNCTION test_gate();
    SQL
    gates = Bobbin::Record.connection_db_config.new_connection
    gates.execute("SELECT pg_advisory_lock(1), pg_advisory_lock(2)")
    waiting = -> { connection.select_value("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted") }
    outcomes = Queue.new
    enqueue = ->(key) { Thread.new { outcomes << [ key, SleepJob.enqueue(0, key) ] rescue outcomes << [ key, $! ] } } # rubocop:disable Style/RescueModifier
    first = enqueue.("gate-one first")
    wait_for("the first caller's INSERT to wait at gate 1") { waiting.call == 1 }
    @batch = [ "gate-two writer", "gate-two rider-1", "gate-two rider-2" ].each_with_index.map do |key, i|
      enqueue.(key).tap { wait_for("#{key} to wait for the pen") { group_commit.queued == i + 1 } }
    end
    gates.execute("SELECT pg_advisory_unlock(1)")
    assert_equal "gate-one first", outcomes.pop(timeout: 30)&.first
    wait_for("the writer's batch of three to wait at gate 2") { group_commit.queued.zero? && waiting.call == 1 }
    @batch.first.raise(RuntimeError, "Request ran for longer than 15000ms")
    sleep(0.2) # the interrupt is raised now, had the writer not put it off
    gates.execute("SELECT pg_advisory_unlock(2)")
    [ first, *@batch ].each { |thread| assert thread.join(30), "every caller returns" }
    results = Array.new(3) { outcomes.pop(timeout: 10) }.compact.to_h
    assert_equal "Request ran for longer than 15000ms", results["gate-two writer"]&.message, "the interrupted thread raises its own interrupt"
    [ "gate-two rider-1", "gate-two rider-2" ].each { |key| assert_equal [ 0, key ], arguments_of(results[key]), "#{key} gets its stored job's id" }
    assert_equal 4, Bobbin::JobRecord.count, "the batch was written whole"
    refute group_commit.writing?
    assert SleepJob.enqueue(0, "after"), "the next enqueue writes"
  ensure
    gates&.disconnect!
    connection&.execute("DROP TRIGGER IF EXISTS test_gate ON bobbin_jobs; DROP FUNCTION IF EXISTS test_gate()")
  end

  test "fibers enqueuing at once under Async each get their job stored and committed before enqueue returns" do
    require "async"
    seen = Queue.new
    Sync do
      Array.new(20) do |i|
        Async do
          id = SleepJob.enqueue(0, "fiber-#{i}")
          seen << Bobbin::Record.connection_db_config.new_connection.then { |c| c.select_value("SELECT id FROM bobbin_jobs WHERE id = #{id}").tap { c.disconnect! } }
        end
      end.each(&:wait)
    end
    found = Array.new(20) { seen.pop }
    assert found.all?, "each job is visible to another connection as soon as its enqueue returned"
    assert_equal 20, Bobbin::JobRecord.count
  end

  test "inside a transaction the rows join it: rolled back, nothing is stored" do
    Bobbin::Record.transaction do
      SleepJob.enqueue(0, "inside")
      raise ActiveRecord::Rollback
    end
    assert_equal 0, Bobbin::JobRecord.count
  end
end
