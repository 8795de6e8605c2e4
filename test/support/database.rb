# frozen_string_literal: true

require "logger"

# Connects to the database the Rakefile chose (BOBBIN_TEST_DATABASE) and keeps it clean between tests.
module TestDatabase
  # How pg_stat_activity shows a worker's claim and its look for the next due time (Store::PostgreSQL), for LIKE.
  # Anchored at the start: unanchored, a test's own pg_stat_activity query matches itself once its session is idle.
  CLAIM_QUERY = "WITH claimed AS%"
  NEXT_DUE_QUERY = "SELECT (%EXTRACT(EPOCH FROM clock_timestamp())%"

  module_function

  # SQLite waits up to 20 s for its write lock here (Bobbin's default is 5): the suites share 2 cores with PostgreSQL's,
  # and SQLite's lock is not fair, so a writer on a loaded machine twice waited out 5 s behind a worker's writes.
  def url = ENV.fetch("BOBBIN_TEST_DATABASE") { "sqlite3:tmp/test-#{Process.pid}.sqlite3?timeout=20000" }

  # The SQLite file's path (relative to the repository).
  def sqlite_path = url.delete_prefix("sqlite3:").split("?").first

  def postgres? = url.start_with?("postgres")

  # The URL with a pool big enough for the thread pools the tests run. On PostgreSQL its sessions are named:
  # `name: application_name` for this process's own, so tests count their own sessions and no child's.
  def url_with_pool(pool = 25, name: "bobbin-test-child")
    url + (url.include?("?") ? "&" : "?") + "pool=#{pool}" + (postgres? ? "&application_name=#{name}" : "")
  end

  # The application_name of this process's PostgreSQL sessions.
  def application_name = "bobbin-test-#{Process.pid}"

  def setup!
    FileUtils.mkdir_p("tmp")
    remove_sqlite_files
    Bobbin.config.logger = Logger.new(ENV["BOBBIN_TEST_LOG"] || File::NULL)
    Bobbin.connect(url_with_pool(name: application_name))
    ActiveRecord::Base.connection_pool.with_connection do |connection|
      Bobbin::Schema.down(connection)
      connection.drop_table(:bobbin_test_ledger, if_exists: true)
      connection.drop_table(:bobbin_test_starts, if_exists: true)
      connection.create_table(:bobbin_test_starts) { |t| t.string :key, null: false }
      Bobbin.migrate!
      connection.create_table(:bobbin_test_ledger) do |t|
        t.string :key, null: false, index: { unique: true }
        t.integer :pid
      end
    end
    Minitest.after_run { remove_sqlite_files }
  end

  def remove_sqlite_files
    return if postgres?

    path = sqlite_path
    [ path, "#{path}-wal", "#{path}-shm" ].each { |file| FileUtils.rm_f(file) }
  end

  def clean!
    ActiveRecord::Base.connection_pool.with_connection do |connection|
      %w[bobbin_jobs bobbin_processes bobbin_pauses bobbin_recurring_tasks bobbin_recurring_runs bobbin_test_ledger bobbin_test_starts].each { |table| connection.execute("DELETE FROM #{table}") }
    end
  end

  # The nodes of the plan PostgreSQL caches for `sql` once prepared (its generic plan, made without the parameters'
  # values), as EXPLAIN ANALYZE ran it with `arguments` (SQL literals), in a transaction rolled back after.
  def generic_plan_nodes(sql, arguments)
    connection = Bobbin::Record.connection
    plan = nil
    connection.transaction do
      connection.execute("SET LOCAL plan_cache_mode = force_generic_plan")
      connection.execute("PREPARE bobbin_test_generic AS #{sql}")
      plan = JSON.parse(connection.select_value("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE bobbin_test_generic(#{arguments.join(', ')})"))
      raise ActiveRecord::Rollback
    end
    nodes = ->(node) { [ node, *Array(node["Plans"]).flat_map(&nodes) ] }
    nodes.(plan.first["Plan"])
  ensure
    connection&.execute("DEALLOCATE bobbin_test_generic") rescue nil
  end
end
