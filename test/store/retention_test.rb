# frozen_string_literal: true

require "test_helper"

class RetentionTest < Bobbin::TestCase
  test "succeeded and discarded jobs older than the retention are deleted; failed and recent ones stay" do
    ids = Bobbin.enqueue_all(Array.new(5) { |i| [ SleepJob, [ i ] ] })
    old = Time.now.utc - 2 * 86_400
    Bobbin::JobRecord.where(id: ids[0]).update_all(state: "succeeded", finished_at: old)
    Bobbin::JobRecord.where(id: ids[1]).update_all(state: "discarded", finished_at: old)
    Bobbin::JobRecord.where(id: ids[2]).update_all(state: "failed", finished_at: old)
    Bobbin::JobRecord.where(id: ids[3]).update_all(state: "succeeded", finished_at: Time.now.utc)
    assert_equal Bobbin::Retention::Sweep.new(2, false), Bobbin::Retention.sweep(retention: 86_400)
    assert_equal ids[2..], Bobbin::JobRecord.order(:id).pluck(:id)
    assert_equal 0, Bobbin::Retention.sweep(retention: nil).deleted, "nil keeps everything"
  end

  # A host finishing more than a thousand jobs a second must not pile up finished rows: a sweep once deleted at
  # most 10,000 a round (one round every heartbeat_interval, 10 s by default).
  test "a sweep deletes every expired job, batch after batch, until none is left" do
    expired_jobs(10 * Bobbin::Retention::BATCH + 17)
    assert_equal Bobbin::Retention::Sweep.new(10 * Bobbin::Retention::BATCH + 17, false), Bobbin::Retention.sweep(budget: 600)
    assert_equal 0, Bobbin::JobRecord.count
  end

  test "a sweep out of time stops after a batch and says it is behind; Maintenance then comes back within a second" do
    expired_jobs(2 * Bobbin::Retention::BATCH + 5)
    assert_equal Bobbin::Retention::Sweep.new(Bobbin::Retention::BATCH, true), rescanning_plans { Bobbin::Retention.sweep(budget: 0) }
    assert_equal Bobbin::Maintenance::SOON, Bobbin::Maintenance.run("test", retention_budget: 0)
    assert_equal 5, Bobbin::JobRecord.count
    assert_equal Bobbin.config.heartbeat_interval, Bobbin::Maintenance.run("test")
    assert_equal 0, Bobbin::JobRecord.count
  end

  # PostgreSQL once ran a batch's DELETE as a nested loop over the table that ran its LIMIT subquery again for every
  # row, and deleted all 2,005 rows in one statement; table statistics left stale by the previous test chose it.
  # On PostgreSQL the block runs with every other plan priced out, so that plan is the one chosen.
  def rescanning_plans
    return yield unless postgres?

    switches = %w[enable_hashjoin enable_mergejoin enable_material enable_hashagg enable_sort enable_indexscan enable_bitmapscan]
    connection = Bobbin::JobRecord.connection
    connection.execute(switches.map { |name| "SET #{name} = off" }.join("; "))
    yield
  ensure
    connection&.execute(switches.map { |name| "RESET #{name}" }.join("; "))
  end

  test "PostgreSQL: a sweep's batch reads the index, not the table, on the plan cached for its prepared statement" do
    skip_unless_postgres
    ids = Bobbin.enqueue_all(Array.new(3_000) { |i| [ SleepJob, [ i ] ] })
    Bobbin::JobRecord.where(id: ids).update_all(state: "succeeded", finished_at: Time.now.utc - 60) # finished, not expired
    connection = Bobbin::Record.connection
    # The index as a table of this size has it: the suite's earlier tests (rows inserted, then deleted between tests)
    # left it many times larger, and the planner, pricing its pages, once chose the Seq Scan for 3,000 rows (CI 163).
    connection.execute("REINDEX INDEX bobbin_jobs_state_finished")
    connection.execute("ANALYZE bobbin_jobs")
    sql, binds = connection.send(:to_sql_and_binds, Bobbin::Retention.expired("succeeded", Time.now.utc - 86_400).arel)
    nodes = TestDatabase.generic_plan_nodes(sql, binds.map { |bind| connection.quote(bind.value_for_database) })
    assert_empty nodes.map { |node| node["Node Type"] }.grep(/Seq Scan/), "a batch read the whole table: #{nodes.map { |node| node.except("Plans") }}"
  end

  test "on PostgreSQL a sweep steps over the rows another transaction holds instead of waiting for it" do
    skip_unless_postgres
    ids = expired_jobs(Bobbin::Retention::BATCH + 10)
    held = ids.first(Bobbin::Retention::BATCH)
    locked = Queue.new
    release = Queue.new
    other = Thread.new do # another host's sweep, mid-batch
      Bobbin::JobRecord.transaction do
        Bobbin::JobRecord.where(id: held).lock.to_a
        locked << true
        release.pop
      end
    end
    locked.pop
    sweep = Thread.new { Bobbin::Retention.sweep }
    done = sweep.join(10)
    release << true
    other.join
    assert done, "the sweep waited for the other transaction's rows"
    assert_equal Bobbin::Retention::Sweep.new(10, false), sweep.value
    assert_equal held, Bobbin::JobRecord.order(:id).pluck(:id)
  end
end
