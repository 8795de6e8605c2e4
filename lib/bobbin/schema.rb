# frozen_string_literal: true

module Bobbin
  # Bobbin's tables, versioned. `Bobbin.migrate!` and a Rails migration (`def up = Bobbin::Schema.up(connection)`)
  # share it: `up` brings any older install to VERSION, step by step, each step safe to run again.
  module Schema
    # The schema this code needs; workers refuse to start on an older one.
    VERSION = 10
    # What each version adds, after the tables of version 1. (Version 6's index, bobbin_jobs_due, is gone in 9.)
    STEPS = { 2 => :add_crashes, 5 => :add_recurring_and_concurrency, 7 => :add_operator_columns,
              8 => :add_stall_columns, 9 => :slim_job_indexes, 10 => :prefix_and_stalled_indexes }.freeze
    # Indexes of earlier versions that version 9 drops: each wrote an entry for every job at every change of state.
    # bobbin_jobs_finished (state, finished_at) is the front of bobbin_jobs_state_finished (state, finished_at, id);
    # bobbin_jobs_due (run_at) WHERE state = 'ready' walks as bobbin_jobs_state_run_at (state, run_at, id) does from
    # state = 'ready'; bobbin_jobs_active_job_id also held a NULL for every job not from Active Job.
    DROPPED_INDEXES = %w[bobbin_jobs_finished bobbin_jobs_due bobbin_jobs_active_job_id].freeze

    module_function

    # Creates whatever of Bobbin's tables, columns and indexes are missing and records VERSION; safe to run again.
    # Tables of a newer Bobbin (this one rolled back) are left as they are: its steps do not know them. Returns the
    # version it found (read in its turn: another process's half-made tables are not "version 1").
    def up(connection)
      one_at_a_time(connection) { up_alone(connection) }
    end

    # Two processes making the tables at once (two containers' `bin/rails db:prepare` or `bobbin migrate` at a deploy)
    # raced, and one failed with "relation already exists" (a trial). On PostgreSQL they take turns, on an advisory
    # lock (until the transaction's end, inside a migration's), and the second finds the work done. On SQLite each
    # step was a write of its own, so two `bobbin migrate` at once both found a column missing and one failed
    # ("duplicate column name", a trial): outside a migration's transaction they take turns in one of their own (Active
    # Record's SQLite transactions take the write lock as they begin, and wait for it as any writer does).
    def one_at_a_time(connection)
      unless postgresql?(connection)
        return connection.transaction_open? ? yield : connection.transaction { yield }
      end

      if connection.transaction_open?
        connection.execute("SELECT pg_advisory_xact_lock(#{LOCK})", "Bobbin Schema")
        return yield
      end
      # Not pg_advisory_lock: a session waiting in it holds a snapshot, which the first one's CREATE INDEX CONCURRENTLY
      # waits for while the session waits for the lock, and PostgreSQL ended it "deadlock detected" (a trial: three
      # `bobbin migrate` at once on tables with jobs, two failed). It tries again, between statements.
      sleep(LOCK_RETRY) until connection.select_value("SELECT pg_try_advisory_lock(#{LOCK})", "Bobbin Schema")
      begin
        yield
      ensure
        connection.execute("SELECT pg_advisory_unlock(#{LOCK})", "Bobbin Schema") if connection.active?
      end
    end

    # The advisory lock key of `one_at_a_time` ("bobbin" as a number), and how often a process waiting for it tries.
    LOCK = 0x626f6262696e
    LOCK_RETRY = 0.1

    def up_alone(connection)
      found = version(connection)
      return found if found > VERSION

      create_jobs(connection)
      create_processes(connection)
      create_pauses(connection)
      STEPS.each_value { |step| send(step, connection) }
      record_version(connection)
      # SQLite's prepared statements keep the column list they were prepared with: a `SELECT *` of bobbin_jobs
      # cached before the upgrade would go on returning rows without the new columns.
      connection.clear_cache!
      found
    end

    # Gives Bobbin's database Rails' own tables (schema_migrations, ar_internal_metadata) where it has none. Rails'
    # db:migrate and db:prepare load the schema dump into a database without schema_migrations, and a dump's
    # `create_table ..., force: :cascade` dropped the jobs of tables `bobbin migrate` had made (a trial). With them, it
    # runs the app's migrations instead: Bobbin's own find their work done.
    def initialized_for_rails(pool)
      pool.schema_migration.create_table
      pool.internal_metadata.create_table_and_set_flags(pool.db_config.env_name)
    end

    # Drops Bobbin's tables (tests and `rails db:rollback`).
    def down(connection)
      %i[bobbin_schema bobbin_recurring_runs bobbin_recurring_tasks bobbin_pauses bobbin_processes bobbin_jobs].each { |table| connection.drop_table(table, if_exists: true) }
    end

    # The version of the schema in the database: 0 without Bobbin's tables, 1 for installs before versions.
    def version(connection)
      return 0 unless connection.table_exists?(:bobbin_jobs)
      return 1 unless connection.table_exists?(:bobbin_schema)

      recorded = connection.select_value("SELECT MAX(version) FROM bobbin_schema")
      recorded ? recorded.to_i : dumped_version(connection)
    end

    # A schema loaded from a Rails schema dump (db/schema.rb, db/queue_schema.rb) has the tables but not the
    # version row; the dump keeps the column's default, which record_version sets to the version. Versions 2 to 4 set
    # none: theirs is some older version, 1 (it read 0, "Bobbin's tables are missing", beside the tables).
    def dumped_version(connection)
      [ connection.columns(:bobbin_schema).find { |column| column.name == "version" }&.default.to_i, 1 ].max
    end

    # What creates the tables, or brings them up to date, for the messages that refuse to start without: the command
    # line, or in a Rails app the generator (on an older install it adds an upgrade migration) and then the migrations.
    INSTALL = "run `bobbin migrate` (in a Rails app: bin/rails generate bobbin:install, then bin/rails db:prepare)"
    UPGRADE = "run `bobbin migrate` (in a Rails app: bin/rails generate bobbin:install, then bin/rails db:migrate)"
    # Rails' pending-migration check makes schema_migrations in every development database on the app's first request,
    # a new SQLite file's too; db:prepare then counts the database as set up and never loads db/queue_schema.rb into it.
    # A user who opened the app (or its dashboard) before db:prepare was told to run db:prepare, which did nothing (a trial).
    SET_UP = "run bin/rails bobbin:migrate (this database already has Rails' schema_migrations table, so bin/rails " \
             "db:prepare counts it as set up and loads no schema file into it)"

    # What to run where Bobbin's tables are missing in the database of `connection`: INSTALL, or SET_UP in a Rails
    # app whose database Rails counts as set up.
    def install_hint(connection)
      rails = defined?(::Rails.application) && ::Rails.application
      rails && connection.data_source_exists?("schema_migrations") ? SET_UP : INSTALL
    rescue ActiveRecord::ActiveRecordError
      INSTALL
    end

    # Raises ConfigurationError unless the database has the schema this code needs, saying how to upgrade. On the
    # tables of a newer Bobbin (a rollback of the code) it runs, saying so: a newer version keeps what older ones use.
    def check!(connection)
      found = version(connection)
      said_newer(found) if found > VERSION
      return if found >= VERSION

      raise ConfigurationError, found.zero? ? "Bobbin's tables are missing: #{INSTALL}" :
        "Bobbin's tables are at schema version #{found} but this Bobbin needs #{VERSION}: #{UPGRADE}"
    end

    # Logged once a process (and its forks) for each newer version found: the start's check and its worker's both
    # found it, and said it twice (a trial).
    def said_newer(found)
      return if @said_newer == found

      @said_newer = found
      Bobbin.logger.warn("bobbin: #{newer(found)}; running on them")
    end

    # Says that the tables, at version `found`, are a newer Bobbin's.
    def newer(found) = "Bobbin's tables are at schema version #{found}, newer than this Bobbin's (#{VERSION}: rolled back?)"

    # Version 2: how many crashes each job was in flight for (quarantine and crash blame).
    def add_crashes(connection)
      add_column(connection, :bobbin_jobs, :crashes, :integer, null: false, default: 0)
    end

    # Version 5: recurring tasks and their runs (one row per task and tick: the unique key that makes each tick
    # enqueue once across every scheduler), and concurrency limits on jobs ("blocked" jobs wait for a slot).
    def add_recurring_and_concurrency(connection)
      add_concurrency_columns(connection)
      create_recurring_tasks(connection)
      create_recurring_runs(connection)
    end

    # Version 7: who last retried, discarded or released a job and when (operators' actions), and the indexes the
    # operator layer's keyset pages and filters read: a state's jobs by finish time or by run time, then id; a
    # queue's or class's jobs by state. (Its Active Job id index is version 9's.)
    def add_operator_columns(connection)
      { operated_by: :string, operated_at: :datetime, operation: :string }.each do |column, type|
        add_column(connection, :bobbin_jobs, column, type)
      end
      add_index(connection, :bobbin_jobs, %i[state finished_at id], "bobbin_jobs_state_finished", nil)
      add_index(connection, :bobbin_jobs, %i[state run_at id], "bobbin_jobs_state_run_at", nil)
      add_index(connection, :bobbin_jobs, %i[state queue run_at], "bobbin_jobs_state_queue", nil)
      add_index(connection, :bobbin_jobs, %i[state class_name], "bobbin_jobs_state_class", nil)
    end

    # Version 8: fiber health. A job's stalls (times it held its pool's event loop past the stall threshold) and the
    # longest; a process's loop lag now and at most, and its stalls so far.
    def add_stall_columns(connection)
      add_column(connection, :bobbin_jobs, :stalls, :integer, null: false, default: 0)
      add_column(connection, :bobbin_jobs, :longest_stall_ms, :float)
      { loop_lag_ms: :float, max_loop_lag_ms: :float, stalls: :integer }.each { |column, type| add_column(connection, :bobbin_processes, column, type) }
    end

    # Version 9: fewer index entries per job. A job's row changes state three times or more (ready, running, a
    # finish), and every index holding `state` takes a new entry at each change: version 8 wrote 25 index entries
    # over the life of a plain job (enqueued, claimed, succeeded), version 9 writes 18. The three DROPPED_INDEXES
    # go; the Active Job id is indexed only where a job has one (`active_job_id = ?` implies it, on both databases).
    def slim_job_indexes(connection)
      DROPPED_INDEXES.each { |name| remove_index(connection, :bobbin_jobs, name) }
      add_index(connection, :bobbin_jobs, %i[active_job_id], "bobbin_jobs_active_job", "active_job_id IS NOT NULL")
    end

    # Version 10: the queue index of the claim serves a wildcard's prefix too. bobbin_jobs_claim_by_queue (queue,
    # priority, run_at, id) bounded `queue LIKE 'llm\_%'` only under the C collation, so a wildcard's claim read the due
    # jobs of every other queue (a review: 40 ms a claim beside 300,000). create_jobs builds its successor,
    # bobbin_jobs_claim_by_prefix, first: the claims of named queues always have one of them. And the jobs that
    # stalled a fiber pool's loop (the dashboard's "Every job that stalled"), newest first: without an index that page
    # walked every job from the newest (a review); a job that never stalled has no entry in it.
    def prefix_and_stalled_indexes(connection)
      remove_index(connection, :bobbin_jobs, "bobbin_jobs_claim_by_queue")
      add_index(connection, :bobbin_jobs, %i[id], "bobbin_jobs_stalled", "stalls > 0")
    end

    def add_column(connection, table, column, type, **options)
      connection.add_column(table, column, type, **options) unless connection.column_exists?(table, column)
    end

    def record_version(connection)
      connection.create_table(:bobbin_schema, id: false) { |t| t.integer :version, null: false } unless connection.table_exists?(:bobbin_schema)
      connection.change_column_default(:bobbin_schema, :version, VERSION) if dumped_version(connection) < VERSION
      return if version(connection) >= VERSION

      connection.execute("INSERT INTO bobbin_schema (version) VALUES (#{Integer(VERSION)})")
    end

    def add_concurrency_columns(connection)
      { concurrency_key: :string, concurrency_limit: :integer, concurrency_duration: :float }.each do |column, type|
        add_column(connection, :bobbin_jobs, column, type)
      end
      add_index(connection, :bobbin_jobs, %i[concurrency_key priority run_at id], "bobbin_jobs_blocked", "state = 'blocked'")
      add_index(connection, :bobbin_jobs, %i[concurrency_key], "bobbin_jobs_holding",
                "state IN ('ready', 'running') AND concurrency_key IS NOT NULL")
    end

    def create_recurring_tasks(connection)
      unless connection.table_exists?(:bobbin_recurring_tasks)
        connection.create_table :bobbin_recurring_tasks do |t|
          t.string :key, null: false
          t.string :schedule, null: false
          t.string :class_name
          t.text :command
          t.text :arguments, null: false, default: "[]"
          t.string :queue
          t.integer :priority
          t.text :description
          t.datetime :created_at, null: false
          t.datetime :updated_at, null: false
        end
      end
      add_index(connection, :bobbin_recurring_tasks, %i[key], "bobbin_recurring_tasks_key", nil, unique: true)
    end

    def create_recurring_runs(connection)
      unless connection.table_exists?(:bobbin_recurring_runs)
        connection.create_table :bobbin_recurring_runs do |t|
          t.string :task_key, null: false
          t.datetime :run_at, null: false
          t.bigint :job_id
          t.datetime :created_at, null: false
        end
      end
      add_index(connection, :bobbin_recurring_runs, %i[task_key run_at], "bobbin_recurring_runs_tick", nil, unique: true)
    end

    def create_jobs(connection)
      unless connection.table_exists?(:bobbin_jobs)
        connection.create_table :bobbin_jobs do |t|
          t.string :queue, null: false
          t.string :class_name, null: false
          t.text :arguments, null: false
          t.integer :priority, null: false, default: 0
          t.string :state, null: false, default: "ready"
          t.datetime :run_at, null: false
          t.integer :attempts, null: false, default: 0
          t.integer :max_attempts, null: false, default: 1
          t.bigint :claimed_by
          t.datetime :claimed_at
          t.datetime :enqueued_at, null: false
          t.datetime :started_at
          t.datetime :finished_at
          t.string :last_error_class
          t.text :last_error_message
          t.text :last_error_backtrace
          t.string :active_job_id
        end
      end
      add_index(connection, :bobbin_jobs, %i[priority run_at id], "bobbin_jobs_claim", "state = 'ready'")
      add_index(connection, :bobbin_jobs, %i[queue priority run_at id], "bobbin_jobs_claim_by_prefix", "state = 'ready'",
                opclass: ({ queue: :text_pattern_ops } if postgresql?(connection)))
      add_index(connection, :bobbin_jobs, %i[claimed_by], "bobbin_jobs_running", "state = 'running'")
    end

    def create_processes(connection)
      return if connection.table_exists?(:bobbin_processes)

      connection.create_table :bobbin_processes do |t|
        t.string :kind, null: false
        t.string :name, null: false
        t.integer :pid, null: false
        t.string :hostname, null: false
        t.bigint :supervisor_id
        t.text :metadata, null: false, default: "{}"
        t.datetime :last_heartbeat_at, null: false
        t.datetime :created_at, null: false
      end
      add_index(connection, :bobbin_processes, %i[last_heartbeat_at], "bobbin_processes_heartbeat", nil)
    end

    def create_pauses(connection)
      return if connection.table_exists?(:bobbin_pauses)

      connection.create_table :bobbin_pauses do |t|
        t.string :queue, null: false
        t.datetime :created_at, null: false
      end
      add_index(connection, :bobbin_pauses, %i[queue], "bobbin_pauses_queue", nil, unique: true)
    end

    # Builds index `name` where it is missing. On PostgreSQL, outside a transaction (`bobbin migrate`, the generator's
    # upgrade migration) and on a table with rows, CONCURRENTLY: a plain build blocks every write to the table while it
    # reads it all (a trial: no enqueue or outcome for 9 s, at 550,000 jobs). A concurrent build that failed (the
    # process stopped, a unique index met a duplicate) leaves an invalid index behind, which is built again.
    def add_index(connection, table, columns, name, where, unique: false, opclass: nil)
      return if connection.index_name_exists?(table, name) && !(postgresql?(connection) && invalid_index?(connection, name))

      remove_index(connection, table, name)
      connection.add_index(table, columns, name: name, where: where, unique: unique, **{ opclass: opclass }.compact, **without_blocking(connection, table))
    end

    def remove_index(connection, table, name)
      return unless connection.index_name_exists?(table, name)

      connection.remove_index(table, name: name, **without_blocking(connection, table))
    end

    # How an index on `table` is built or dropped without blocking writes: CONCURRENTLY, which PostgreSQL can outside a
    # transaction; a new, empty table needs no care (and a concurrent build would wait for every older transaction).
    def without_blocking(connection, table)
      return {} unless postgresql?(connection) && !connection.transaction_open?
      return {} unless connection.select_value("SELECT EXISTS (SELECT 1 FROM #{connection.quote_table_name(table)})", "Bobbin Schema")

      { algorithm: :concurrently }
    end

    # From the connection itself: one made outside a pool (`db_config.new_connection`) has a pool without its config,
    # and the claim's queue index was built without its text_pattern_ops there (a test's racing sessions).
    def postgresql?(connection) = connection.adapter_name.match?(/postg/i)

    def invalid_index?(connection, name)
      connection.select_value("SELECT NOT indisvalid FROM pg_index WHERE indexrelid = to_regclass(#{connection.quote(name)})", "Bobbin Schema")
    end
  end
end
