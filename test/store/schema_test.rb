# frozen_string_literal: true

require "test_helper"
require_relative "../support/version_one_schema"
require_relative "../cli/cli_helper"

class SchemaTest < Bobbin::TestCase
  include CLIHelper

  def with_connection(&) = ActiveRecord::Base.connection_pool.with_connection(&)

  def version = with_connection { |connection| Bobbin::Schema.version(connection) }

  # Whatever a test leaves, the next one starts from the current schema.
  teardown do
    Bobbin.migrate!
    [ Bobbin::JobRecord, Bobbin::ProcessRecord ].each(&:reset_column_information)
  end

  test "an install from Bobbin's first schema, with jobs in flight, is refused by a worker, then upgraded in place; its jobs carry on" do
    with_connection { |connection| VersionOneSchema.install(connection) }
    ids = VersionOneSchema.jobs_in_flight(ready: %w[old-0 old-1])
    assert_equal 1, version

    error = assert_raises(Bobbin::ConfigurationError) { drain(fibers: 2) }
    assert_equal "Bobbin's tables are at schema version 1 but this Bobbin needs #{Bobbin::Schema::VERSION}: run `bobbin migrate` " \
                 "(in a Rails app: bin/rails generate bobbin:install, then bin/rails db:migrate)", error.message
    assert_equal %w[ready ready], VersionOneSchema::JobRow.where(id: ids["ready"]).pluck(:state), "the refused worker claimed nothing"

    before = VersionOneSchema::JobRow.order(:id).map(&:attributes)
    2.times { Bobbin.migrate! }
    [ Bobbin::JobRecord, Bobbin::ProcessRecord ].each(&:reset_column_information)
    assert_equal Bobbin::Schema::VERSION, version
    after = Bobbin::JobRecord.order(:id).map(&:attributes)
    assert_equal before, after.map { |row| row.slice(*before.first.keys) }, "every old column of every row is as it was"
    assert_equal [ [ 0, 0 ] ], after.map { |row| row.values_at("crashes", "stalls") }.uniq, "new columns take their defaults"

    assert_equal 1, Bobbin::Recovery.prune, "the running job of the old worker (silent for an hour) is recovered as any other"
    drain(fibers: 2)
    assert_equal %w[old-0 old-1 was-running], LedgerEntry.order(:key).pluck(:key)
    assert_equal({ "succeeded" => 3, "failed" => 1 }, Bobbin.counts.slice("succeeded", "failed"))
    assert Bobbin.retry(ids["failed"].first), "an old failed job can be retried"
    drain(fibers: 2)
    assert_equal "succeeded", Bobbin::JobRecord.find(ids["failed"].first).state
  end

  test "every version's step runs on old tables: the columns and indexes of the current version are there after the upgrade" do
    fresh = with_connection { |connection| shape(connection) }
    with_connection { |connection| VersionOneSchema.install(connection) }
    Bobbin.migrate!
    assert_equal fresh, with_connection { |connection| shape(connection) }, "an upgraded install has the tables of a new one"
  end

  test "an install at version 8 upgrades to 9: the indexes that took an entry at each job's change of state for nothing are gone" do
    fresh = with_connection { |connection| shape(connection) }
    with_connection do |connection| # version 8's indexes, as it created them
      connection.remove_index(:bobbin_jobs, name: "bobbin_jobs_active_job")
      connection.add_index(:bobbin_jobs, %i[state finished_at], name: "bobbin_jobs_finished")
      connection.add_index(:bobbin_jobs, %i[run_at], name: "bobbin_jobs_due", where: "state = 'ready'")
      connection.add_index(:bobbin_jobs, %i[active_job_id], name: "bobbin_jobs_active_job_id")
      connection.execute("DELETE FROM bobbin_schema")
      connection.execute("INSERT INTO bobbin_schema (version) VALUES (8)")
    end
    assert_equal 8, version
    assert_raises(Bobbin::ConfigurationError) { drain(threads: 1) }

    Bobbin.migrate!
    assert_equal Bobbin::Schema::VERSION, version
    after = with_connection { |connection| shape(connection) }
    assert_equal fresh, after
    names = after["bobbin_jobs"][:indexes].map(&:first)
    assert_empty names & Bobbin::Schema::DROPPED_INDEXES
    _, columns, _, where = after["bobbin_jobs"][:indexes].assoc("bobbin_jobs_active_job")
    assert_equal [ "active_job_id" ], columns
    assert_match(/\A\(?active_job_id IS NOT NULL\)?\z/, where, "only jobs with an Active Job id are indexed")
  end

  test "an install at version 9 upgrades to 10: the claim's queue index serves a wildcard's prefix whatever the collation" do
    fresh = with_connection { |connection| shape(connection) }
    with_connection do |connection| # version 9's queue index, as it created it
      connection.remove_index(:bobbin_jobs, name: "bobbin_jobs_claim_by_prefix")
      connection.add_index(:bobbin_jobs, %i[queue priority run_at id], name: "bobbin_jobs_claim_by_queue", where: "state = 'ready'")
      connection.execute("DELETE FROM bobbin_schema")
      connection.execute("INSERT INTO bobbin_schema (version) VALUES (9)")
    end
    Bobbin.enqueue_all(Array.new(3) { |i| [ SleepJob, [ i ], { queue: "reports_#{i}" } ] })
    assert_raises(Bobbin::ConfigurationError) { drain(threads: 1) }

    2.times { Bobbin.migrate! }
    assert_equal Bobbin::Schema::VERSION, version
    after = with_connection { |connection| shape(connection) }
    assert_equal fresh, after
    _, columns, _, _, opclasses = after["bobbin_jobs"][:indexes].assoc("bobbin_jobs_claim_by_prefix")
    assert_equal %w[queue priority run_at id], columns
    assert_equal(postgres? ? { "queue" => :text_pattern_ops } : {}, opclasses)
    assert_nil after["bobbin_jobs"][:indexes].assoc("bobbin_jobs_claim_by_queue")
    drain(threads: 1, queues: [ "reports_*" ])
    assert_equal [ 3, 0 ], Bobbin.counts.values_at("succeeded", "ready").map(&:to_i), "the wildcard's worker took every job"
  end

  # A plain CREATE INDEX waits for the table's writers and every write queues behind it: an upgrade from version 5 held
  # enqueues and outcomes for 9 s at 550,000 jobs (a trial). Built concurrently, writes go on while the build waits.
  test "PostgreSQL: an upgrade builds its indexes without blocking writes, and builds again one a failed build left invalid" do
    skip_unless_postgres
    SleepJob.enqueue(0, "a row, as a live install has")
    with_connection { |connection| connection.remove_index(:bobbin_jobs, name: "bobbin_jobs_state_queue") }
    url = Bobbin::Record.connection_db_config.configuration_hash
    writer, other = Array.new(2) { PG.connect(dbname: url[:database], host: url[:host], port: url[:port], user: url[:username], password: url[:password]) }
    writer.exec("BEGIN; LOCK TABLE bobbin_jobs IN ROW EXCLUSIVE MODE") # a transaction writing jobs, still open
    upgrade = Thread.new { Bobbin.migrate! }
    wait_for("the build to wait for the open writer") do
      other.exec("SELECT 1 FROM pg_stat_activity WHERE wait_event_type IN ('Lock', 'IPC') AND query ILIKE 'CREATE INDEX%'").ntuples == 1
    end
    other.exec("SET lock_timeout = '5s'; BEGIN; LOCK TABLE bobbin_jobs IN ROW EXCLUSIVE MODE; COMMIT") # a plain build: lock timeout
    writer.exec("COMMIT")
    upgrade.join
    assert_includes with_connection { |connection| connection.indexes(:bobbin_jobs).map(&:name) }, "bobbin_jobs_state_queue"

    with_connection do |connection| # a concurrent build that failed: the index is there, invalid
      connection.remove_index(:bobbin_jobs, name: "bobbin_jobs_state_queue")
      SleepJob.enqueue(0, "a second ready row: a duplicate for the unique build below")
      assert_raises(ActiveRecord::RecordNotUnique) { connection.execute("CREATE UNIQUE INDEX CONCURRENTLY bobbin_jobs_state_queue ON bobbin_jobs (state)") }
    end
    invalid = -> { with_connection { |connection| connection.select_value("SELECT NOT indisvalid FROM pg_index WHERE indexrelid = 'bobbin_jobs_state_queue'::regclass") } }
    assert invalid.call
    Bobbin.migrate!
    refute invalid.call
    assert_equal %w[state queue run_at], with_connection { |connection| connection.indexes(:bobbin_jobs).find { |index| index.name == "bobbin_jobs_state_queue" }.columns }
  ensure
    upgrade&.join(30)
    [ writer, other ].each { |connection| connection&.close }
  end

  test "tables of a newer Bobbin (this one rolled back): migrate leaves them as they are, a worker runs on them and says so" do
    newer = Bobbin::Schema::VERSION + 1
    with_connection { |connection| connection.execute("INSERT INTO bobbin_schema (version) VALUES (#{newer})") }
    indexes = with_connection { |connection| connection.indexes(:bobbin_jobs).map(&:name).sort }
    with_connection { |connection| connection.add_index(:bobbin_jobs, :queue, name: "bobbin_jobs_due") } # a name version 9 drops
    Bobbin.migrate!
    assert_equal newer, version
    assert_equal (indexes + [ "bobbin_jobs_due" ]).sort, with_connection { |connection| connection.indexes(:bobbin_jobs).map(&:name).sort },
                 "no step of this version ran on them"

    SleepJob.enqueue(0, "on-newer")
    log = bobbin_log { 2.times { drain(fibers: 2) } }
    assert_equal [ "on-newer" ], LedgerEntry.pluck(:key)
    said = /Bobbin's tables are at schema version #{newer}, newer than this Bobbin's \(#{Bobbin::Schema::VERSION}: rolled back\?\); running on them/
    assert_equal 1, log.scan(said).size, "said once, not at every check (#{log})"
  ensure
    with_connection do |connection|
      connection.remove_index(:bobbin_jobs, name: "bobbin_jobs_due", if_exists: true)
      connection.execute("DELETE FROM bobbin_schema WHERE version > #{Bobbin::Schema::VERSION}")
    end
  end

  # Versions 2 to 4 made bobbin_schema without the default a dump keeps: their db/queue_schema.rb dump, loaded by
  # db:prepare on a new machine, read as version 0, so a worker said "Bobbin's tables are missing" beside the tables
  # (and the advice for a new install), and `bobbin migrate` said it "created" them.
  test "a dump of a version-2 install, loaded without its version row, is an older install, not a database without tables" do
    with_connection do |connection|
      VersionOneSchema.install(connection)
      connection.add_column(:bobbin_jobs, :crashes, :integer, null: false, default: 0)
      connection.create_table(:bobbin_schema, id: false) { |t| t.integer :version, null: false }
    end
    assert_equal 1, version, "some older version: the dump does not say which"
    error = assert_raises(Bobbin::ConfigurationError) { drain(threads: 1) }
    assert_match(/tables are at schema version 1 but this Bobbin needs #{Bobbin::Schema::VERSION}: run `bobbin migrate`/, error.message)
    assert_equal 1, Bobbin.migrate!, "upgraded, not created"
    assert_equal Bobbin::Schema::VERSION, version
  end

  test "without tables the version is 0 and a worker says how to create them" do
    with_connection { |connection| Bobbin::Schema.down(connection) }
    assert_equal 0, version
    error = assert_raises(Bobbin::ConfigurationError) { drain(threads: 1) }
    assert_match(/tables are missing: run `bobbin migrate` \(in a Rails app: bin\/rails generate bobbin:install, then bin\/rails db:prepare\)/,
                 error.message)
  end

  # Two containers' `db:prepare` (or `bobbin migrate`) at one deploy raced on an empty database, and one failed with
  # "relation already exists" (a trial). They take turns; the second finds the work done, and says so (the version it
  # read in its turn: `bobbin migrate` said "upgraded from version 1" of the first's half-made tables).
  test "PostgreSQL: processes creating the tables at once each succeed, and the schema is made once" do
    skip_unless_postgres
    5.times do
      with_connection { |connection| Bobbin::Schema.down(connection) }
      sessions = Array.new(3) { Bobbin::Record.connection_db_config.new_connection }
      gate = Queue.new
      racers = sessions.map { |session| Thread.new { gate.pop && Bobbin::Schema.up(session) } }
      3.times { gate << true }
      found = racers.map(&:value) # raises what a racer raised
      assert_equal [ 0, Bobbin::Schema::VERSION, Bobbin::Schema::VERSION ], found.sort, "one made them; the others found them made"
      assert_equal Bobbin::Schema::VERSION, version
    ensure
      sessions&.each(&:disconnect!)
    end
  end

  # On tables with jobs an upgrade builds its indexes CONCURRENTLY, and such a build waits for every session that holds a
  # snapshot: a second `bobbin migrate` waiting in pg_advisory_lock held one, while it waited for the first, and
  # PostgreSQL ended the wait with "deadlock detected" (a trial: three at once, two failed, every time).
  test "PostgreSQL: processes upgrading tables with jobs at once each succeed, and the jobs are kept", long: true do
    skip_unless_postgres
    2.times do
      with_connection { |connection| VersionOneSchema.install(connection) }
      ids = VersionOneSchema.jobs_in_flight(ready: %w[old-0 old-1])
      results = Array.new(3) { Thread.new { run_bobbin("migrate") } }.map(&:value)
      results.each { |status, _, err| assert_equal 0, status.exitstatus, err }
      assert_equal [ "Bobbin's tables are at schema version #{Bobbin::Schema::VERSION} already" ] * 2 +
                   [ "upgraded Bobbin's tables from schema version 1 to #{Bobbin::Schema::VERSION}" ], results.map { |_, out, _| out.chomp }.sort
      assert_equal ids.values.flatten.sort, Bobbin::JobRecord.pluck(:id).sort
    end
  end

  # `bobbin migrate` made the tables step by step outside a transaction on SQLite, so two at once (two containers at a
  # deploy sharing a volume) both found a column missing and one failed: "duplicate column name: operated_at"; another
  # said "upgraded from schema version 1" of the first's half-made tables. They take turns, as on PostgreSQL.
  test "SQLite: processes running bobbin migrate at once on a new file each succeed, and the schema is made once", long: true do
    once_per_run
    with_tmpdir do |dir|
      4.times do |round|
        url = "sqlite3:#{dir}/race-#{round}.sqlite3"
        results = Array.new(4) { Thread.new { run_bobbin("migrate", env: { "DATABASE_URL" => url }) } }.map(&:value)
        results.each { |status, _, err| assert_equal 0, status.exitstatus, err }
        said = results.map { |_, out, _| out.chomp }.sort
        assert_equal [ "Bobbin's tables are at schema version #{Bobbin::Schema::VERSION} already" ] * 3 +
                     [ "created Bobbin's tables (schema version #{Bobbin::Schema::VERSION})" ], said, "one made them; the others found them made"
      end
    end
  end

  private
    # Bobbin's tables as the database describes them: columns (name, type, null, default) and indexes.
    def shape(connection)
      %w[bobbin_jobs bobbin_processes bobbin_pauses bobbin_recurring_tasks bobbin_recurring_runs bobbin_schema].to_h do |table|
        columns = connection.columns(table).map { |c| [ c.name, c.sql_type, c.null, c.default ] }.sort
        indexes = connection.indexes(table).map { |i| [ i.name, i.columns, i.unique, i.where, i.opclasses ] }.sort_by(&:first)
        [ table, { columns: columns, indexes: indexes } ]
      end
    end
end
