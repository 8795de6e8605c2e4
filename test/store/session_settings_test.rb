# frozen_string_literal: true

require "test_helper"

# Managed platforms and DBAs set session defaults on the role or the database. Bobbin's statements are written for
# READ COMMITTED: under `default_transaction_isolation = 'serializable'` claims failed with serialization errors that
# crashed the worker, and succeeded jobs were recorded as failed when their outcome write failed the same way (a trial).
class SessionSettingsTest < Bobbin::TestCase
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
end
