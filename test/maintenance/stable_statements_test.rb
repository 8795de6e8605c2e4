# frozen_string_literal: true

require "test_helper"

# Housekeeping runs every second (the clock) or every heartbeat_interval for as long as a process lives, and the
# dashboard refreshes its counts every few seconds. With the time written into their SQL, every pass was a statement
# never seen before, and Active Record prepares each new text on the server (up to statement_limit, 1,000 a
# connection): a supervisor's session gained a prepared statement a second, and the app's connections filled with the
# dashboard's. Their times are now bind parameters: passes apart in time send the same texts, none with a timestamp.
class StableStatementsTest < Bobbin::TestCase
  TIMESTAMP = /'\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d/

  test "housekeeping passes apart in time send the same statements, with no time in them" do
    first = statements { housekeeping }
    sleep 0.01
    second = statements { housekeeping }

    assert_operator first.size, :>=, 5, "the passes ran their queries: #{first.inspect}"
    assert_empty first.grep(TIMESTAMP), "a time written into the SQL"
    assert_equal first, second
  end

  test "the operator layer's counts and filters send the same statements at another time" do
    filter = Bobbin::Operator::Filter.new(state: "failed", enqueued_after: Time.now.utc - 3_600, enqueued_before: Time.now.utc,
                                          finished_after: Time.now.utc - 60, finished_before: Time.now.utc)
    pages = lambda do |now|
      Bobbin::Operator::Stats.counts(now)
      Bobbin::Operator::Stats.queues(now)
      Bobbin::Operator::Stats.queues(now, cap: 10)
      Bobbin::Operator::Stats.throughput(now: now)
      filter.scope(now).to_a
      Bobbin::Operator::Filter.new(state: "scheduled").scope(now).count
      Bobbin::JobRecord.scheduled.count
      Bobbin::Operator.delete_finished(before: now - 86_400)
    end
    SleepJob.enqueue(0) # a queue for the capped counts to visit
    first = statements { pages.call(Time.now.utc) }
    second = statements { pages.call(Time.now.utc + 61) }

    assert_empty first.grep(TIMESTAMP), "a time written into the SQL"
    assert_equal first, second
  end

  test "a search for other text sends the same statement" do
    job = Bobbin::JobRecord.find(SleepJob.enqueue(0, "needle in the arguments"))
    search = ->(text) { Bobbin::Operator::Filter.new(search: text).scope.pluck(:id) }
    found = nil
    first = statements { found = search.call("needle") }
    second = statements { search.call("hay_100%") }

    assert_equal [ job.id ], found, "the search still finds its job"
    assert_empty first.grep(/needle/), "the searched text written into the SQL"
    assert_equal first, second
  end

  private
    # What the supervisor's housekeeping runs: recovery, retention, old recurring runs, due concurrency slots, and
    # the election of a host's housekeeper among supervisor-less workers.
    def housekeeping
      Bobbin::Maintenance.run("test")
      Bobbin::Store.promote_due
      Bobbin::Maintenance.elected?(0)
    end

    # The distinct SQL texts the block sends (schema lookups, transactions and savepoints left out).
    def statements
      seen = []
      callback = ->(*, payload) { seen << payload[:sql] unless payload[:name] == "SCHEMA" || payload[:sql].match?(/\A\s*(BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE)/i) }
      ActiveSupport::Notifications.subscribed(callback, "sql.active_record") { yield }
      seen.uniq.sort
    end
end
