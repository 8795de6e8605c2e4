# frozen_string_literal: true

require "test_helper"
require_relative "../cli/cli_helper"

# Managed platforms and DBAs set session defaults on the role or the database. Bobbin's statements are written for
# READ COMMITTED: under `default_transaction_isolation = 'serializable'` claims failed with serialization errors that
# crashed the worker, and succeeded jobs were recorded as failed when their outcome write failed the same way (a trial).
class SessionSettingsTest < Bobbin::TestCase
  include CLIHelper

  test "a worker's own sessions run READ COMMITTED whatever the role's default isolation" do
    skip_unless_postgres
    connection = Bobbin::Record.connection
    role, database = connection.select_rows("SELECT current_user, current_database()").first
    setting = "ALTER ROLE #{connection.quote_column_name(role)} IN DATABASE #{connection.quote_column_name(database)}"
    connection.execute("#{setting} SET default_transaction_isolation = 'serializable'")
    store = Bobbin::Store.open(Bobbin::Store::QueueSelection.new([ "*" ]))
    plain = Bobbin::Record.connection_db_config.new_connection
    assert_equal "serializable", plain.select_value("SHOW transaction_isolation"), "the role's setting reaches a new session"

    process = Bobbin::ProcessRecord.register(kind: "test", name: "isolation")
    ids = Array.new(3) { |i| SleepJob.enqueue(i) }
    claimed = store.claim(process.id, 3)
    assert_equal ids, claimed.map(&:id)
    store.finish(process.id, claimed.map { |job| Bobbin::Store::Outcome.new(job.id, "succeeded", Bobbin::Store.timestamp(Time.now), nil, nil, nil, nil, nil, nil, 1) })
    assert_equal [ "succeeded" ], Bobbin::JobRecord.where(id: ids).distinct.pluck(:state)
    own = Bobbin::Store::OwnConnections.open(Bobbin::Record.connection_db_config)
    assert_equal "read committed", own.select_value("SHOW transaction_isolation")
  ensure
    connection&.execute("#{setting} RESET default_transaction_isolation") if setting
    [ store, plain, own ].each { |session| session&.then { it.respond_to?(:close) ? it.close : it.disconnect! } }
  end

  # Rails 8.1's database.yml sizes the pool with max_connections:, and a DATABASE_URL's ?pool= (as Bobbin's own messages
  # suggest) is merged beside it: Active Record takes the config (max_connections wins), but the worker stopped at boot
  # with "Ambiguous configuration: 'pool' (5) and 'max_connections' (8)" and a backtrace as it opened its own sessions.
  test "a worker boots on a database config with both pool and max_connections, as Active Record does" do
    skip_unless_postgres
    SleepJob.enqueue(0, "ran")
    status, _, err = run_bobbin("work", "--threads", "1", "--drain", "-r", File.join(ROOT, "test/support/worker_boot.rb"),
                                env: { "DATABASE_URL" => "#{TestDatabase.url_with_pool(5)}&max_connections=8" })
    assert_equal 0, status.exitstatus, err
    assert_equal [ "ran" ], LedgerEntry.pluck(:key)
  end
end
