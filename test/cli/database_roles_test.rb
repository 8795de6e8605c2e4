# frozen_string_literal: true

require_relative "cli_helper"
require_relative "../operator/operator_helper"

# A DBA's least-privilege role for the workers, missing a grant: `bobbin start` exited 1 with a backtrace (a trial).
# It says, in one line, which privilege is missing and what Bobbin needs; so does `bobbin migrate` for a role that
# may not create tables.
class DatabaseRolesTest < Bobbin::TestCase
  include CLIHelper
  include OperatorHelper

  test "PostgreSQL: a role missing a grant gets one line naming it, exit 78" do
    skip_unless_postgres
    connection = Bobbin::Record.connection
    skip("needs a role that may create roles") unless connection.select_value("SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user")
    role = "bobbin_reader_#{Process.pid}"
    connection.execute("CREATE ROLE #{role} LOGIN PASSWORD 'secret'")
    connection.execute("GRANT SELECT ON ALL TABLES IN SCHEMA public TO #{role}") # reads, but may not register a process
    database = connection.select_value("SELECT current_database()")
    url = "postgres://#{role}:secret@127.0.0.1:#{TestDatabase.url[/port=(\d+)/, 1] || 5432}/#{database}"

    status, _, err = run_bobbin("start", "--fibers", "2", "--processes", "1", env: { "DATABASE_URL" => url })
    assert_equal 78, status.exitstatus, err
    assert_match(/\Abobbin: the database role lacks a privilege Bobbin needs \(.*permission denied for (table|sequence) bobbin_\w+\): grant it SELECT, INSERT, UPDATE and DELETE on Bobbin's tables and USAGE on their sequences/, err)
    assert_equal 1, err.lines.size, err

    connection.execute("REVOKE ALL ON ALL TABLES IN SCHEMA public FROM #{role}")
    connection.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC") if connection.select_value("SHOW server_version_num").to_i < 150_000
    Bobbin::Schema.down(connection)
    status, _, err = run_bobbin("migrate", env: { "DATABASE_URL" => url })
    assert_equal 78, status.exitstatus, err
    assert_match(/\Abobbin: migrate failed: the database role may not create or change Bobbin's tables \(.*permission denied for schema public\): run it as a role with CREATE on the schema/, err)
    assert_equal 1, err.lines.size, err
  ensure
    if role
      Bobbin.migrate!
      connection.execute("REVOKE ALL ON ALL TABLES IN SCHEMA public FROM #{role}")
      connection.execute("DROP ROLE IF EXISTS #{role}")
    end
  end

  # A replica, or a failover's old primary, as the workers' database: `bobbin start` and `bobbin work` exited 1 with a
  # backtrace of the process row's INSERT. One line, and exit 69 as for a server that is down: a restart mends it once
  # the database takes writes.
  test "PostgreSQL: a database that takes no writes gets one line saying so, exit 69" do
    skip_unless_postgres
    url = "#{TestDatabase.url_with_pool}&options=-c%20default_transaction_read_only%3Don"

    [ %w[start --fibers 2 --processes 1], %w[work --fibers 2] ].each do |args|
      assert_config_exit(run_bobbin(*args, env: { "DATABASE_URL" => url }),
                         /the database "\w+" takes no writes \(.*read-only transaction\): its URL reaches a replica or a failover's old primary, or default_transaction_read_only is on/,
                         exitstatus: 69)
    end
  end

  # An operator's command pointed at a replica (pause, retry, discard): exit 1 and a backtrace of its first write.
  test "PostgreSQL: an operator command that writes to a database that takes no writes gets one line, exit 69" do
    skip_unless_postgres
    url = "#{TestDatabase.url_with_pool}&options=-c%20default_transaction_read_only%3Don"
    failed = insert_jobs(2, **failed_attributes)

    [ %w[pause mail], %w[retry --failed], [ "discard", failed.last.to_s ] ].each do |args|
      assert_config_exit(run_bobbin(*args, env: { "DATABASE_URL" => url }), /the database "\w+" takes no writes \(.*read-only transaction\)/, exitstatus: 69)
    end
  end
end
