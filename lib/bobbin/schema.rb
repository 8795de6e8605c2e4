# frozen_string_literal: true

module Bobbin
  # Bobbin's tables, versioned. `Bobbin.migrate!` and a Rails migration (`def up = Bobbin::Schema.up(connection)`)
  # share it: `up` brings any older install to VERSION, step by step, each step safe to run again.
  module Schema
    # The schema this code needs; workers refuse to start on an older one.
    VERSION = 2
    # What each version adds, after the tables of version 1.
    STEPS = { 2 => :add_crashes }.freeze

    module_function

    # Creates whatever of Bobbin's tables, columns and indexes are missing and records VERSION; safe to run again.
    def up(connection)
      create_jobs(connection)
      create_processes(connection)
      create_pauses(connection)
      STEPS.each_value { |step| send(step, connection) }
      record_version(connection)
    end

    # Drops Bobbin's tables (tests and `rails db:rollback`).
    def down(connection)
      %i[bobbin_schema bobbin_pauses bobbin_processes bobbin_jobs].each { |table| connection.drop_table(table, if_exists: true) }
    end

    # The version of the schema in the database: 0 without Bobbin's tables, 1 for installs before versions.
    def version(connection)
      return 0 unless connection.table_exists?(:bobbin_jobs)
      return 1 unless connection.table_exists?(:bobbin_schema)

      connection.select_value("SELECT MAX(version) FROM bobbin_schema").to_i
    end

    # Raises ConfigurationError unless the database has the schema this code needs, saying how to upgrade.
    def check!(connection)
      found = version(connection)
      return if found >= VERSION

      raise ConfigurationError, found.zero? ? "Bobbin's tables are missing: run `bobbin migrate` (or bin/rails db:migrate)" :
        "Bobbin's tables are at schema version #{found} but this Bobbin needs #{VERSION}: run `bobbin migrate` " \
        "(or add a migration calling Bobbin::Schema.up(connection) and run bin/rails db:migrate)"
    end

    # Version 2: how many crashes each job was in flight for (quarantine and crash blame).
    def add_crashes(connection)
      return if connection.column_exists?(:bobbin_jobs, :crashes)

      connection.add_column(:bobbin_jobs, :crashes, :integer, null: false, default: 0)
    end

    def record_version(connection)
      connection.create_table(:bobbin_schema, id: false) { |t| t.integer :version, null: false } unless connection.table_exists?(:bobbin_schema)
      return if version(connection) >= VERSION

      connection.execute("INSERT INTO bobbin_schema (version) VALUES (#{Integer(VERSION)})")
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
      add_index(connection, :bobbin_jobs, %i[queue priority run_at id], "bobbin_jobs_claim_by_queue", "state = 'ready'")
      add_index(connection, :bobbin_jobs, %i[claimed_by], "bobbin_jobs_running", "state = 'running'")
      add_index(connection, :bobbin_jobs, %i[state finished_at], "bobbin_jobs_finished", nil)
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

    def add_index(connection, table, columns, name, where, unique: false)
      return if connection.index_name_exists?(table, name)

      connection.add_index(table, columns, name: name, where: where, unique: unique)
    end
  end
end
