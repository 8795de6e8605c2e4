# frozen_string_literal: true

# Bobbin's tables as its first release created them (lib/bobbin/store/schema.rb at commit 83fe3da, before schema
# versions): what an upgrade meets in an old install. Copied, not derived from Bobbin::Schema, so a change there
# cannot quietly change the starting point of the upgrade tests.
module VersionOneSchema
  # The database the old rows are written to: the tests' own, unless a test points it elsewhere (establish_connection).
  class Record < ActiveRecord::Base
    self.abstract_class = true
  end

  # A row of the old jobs table, written with only the columns version 1 has.
  class JobRow < Record
    self.table_name = "bobbin_jobs"
  end

  # A row of the old processes table.
  class ProcessRow < Record
    self.table_name = "bobbin_processes"
  end

  # The Rails files of an old install, as the install generator wrote them before it noted schema versions: the
  # migration (primary database) and db/queue_schema.rb (a queue database of its own).
  RAILS_MIGRATION = <<~RUBY
    # Bobbin's tables (bobbin_jobs, bobbin_processes, …), versioned by Bobbin::Schema: after upgrading the gem, a
    # migration calling Bobbin::Schema.up again (or `bin/bobbin migrate`) brings them up to date.
    class CreateBobbinTables < ActiveRecord::Migration[8.1]
      def up = Bobbin::Schema.up(connection)

      def down = Bobbin::Schema.down(connection)
    end
  RUBY
  QUEUE_SCHEMA_FILE = <<~RUBY
    # Bobbin's tables, loaded into the queue database by bin/rails db:prepare (db:schema:load). A later
    # `bin/rails db:schema:dump` may replace this file with a dump of the same tables; both load the same schema.
    ActiveRecord::Schema[8.1].define do
      Bobbin::Schema.up(connection)
    end
  RUBY

  module_function

  # Drops Bobbin's tables on `connection` and creates the version-1 ones in their place.
  def install(connection)
    Bobbin::Schema.down(connection)
    create_jobs(connection)
    create_processes(connection)
    create_pauses(connection)
    [ JobRow, ProcessRow, Bobbin::JobRecord, Bobbin::ProcessRecord ].each(&:reset_column_information)
  end

  def create_jobs(connection)
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
    connection.add_index :bobbin_jobs, %i[priority run_at id], name: "bobbin_jobs_claim", where: "state = 'ready'"
    connection.add_index :bobbin_jobs, %i[queue priority run_at id], name: "bobbin_jobs_claim_by_queue", where: "state = 'ready'"
    connection.add_index :bobbin_jobs, %i[claimed_by], name: "bobbin_jobs_running", where: "state = 'running'"
    connection.add_index :bobbin_jobs, %i[state finished_at], name: "bobbin_jobs_finished"
  end

  def create_processes(connection)
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
    connection.add_index :bobbin_processes, %i[last_heartbeat_at], name: "bobbin_processes_heartbeat"
  end

  def create_pauses(connection)
    connection.create_table :bobbin_pauses do |t|
      t.string :queue, null: false
      t.datetime :created_at, null: false
    end
    connection.add_index :bobbin_pauses, %i[queue], name: "bobbin_pauses_queue", unique: true
  end

  # Jobs an old install has in flight: `ready` LedgerJobs (keys), one running on a worker that stopped
  # heartbeating an hour ago, one failed. Returns their ids by state.
  def jobs_in_flight(ready:)
    now = Time.now.utc
    worker = ProcessRow.create!(kind: "worker", name: "fibers-10", pid: 999_999, hostname: "old-host", last_heartbeat_at: now - 3600, created_at: now - 7200)
    row = { queue: "default", class_name: "LedgerJob", run_at: now - 60, enqueued_at: now - 60, max_attempts: 1 }
    { "ready" => ready.map { |key| JobRow.create!(row.merge(arguments: JSON.generate([ key ]))).id },
      "running" => [ JobRow.create!(row.merge(arguments: '["was-running"]', state: "running", attempts: 1, claimed_by: worker.id,
                                           claimed_at: now - 3600, started_at: now - 3600)).id ],
      "failed" => [ JobRow.create!(row.merge(arguments: '["failed"]', state: "failed", attempts: 1, finished_at: now - 30,
                                          last_error_class: "RuntimeError", last_error_message: "boom")).id ] }
  end
end
