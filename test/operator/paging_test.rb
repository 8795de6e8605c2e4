# frozen_string_literal: true

require_relative "operator_helper"

# Keyset pages: every row exactly once across pages, however many rows are inserted between page reads.
class OperatorPagingTest < Bobbin::TestCase
  include OperatorHelper

  # Reads every page of `criteria`, inserting `insert` rows (via the block) before each next page.
  def walk(criteria, limit:)
    seen = []
    cursor = nil
    loop do
      page = Bobbin::Operator.jobs(criteria, cursor: cursor, limit: limit)
      seen.concat(page.jobs.map(&:id))
      cursor = page.next_cursor or break
      yield if block_given?
    end
    seen
  end

  test "failed jobs newest first: pages hold each row once while new failures arrive at the front" do
    base = Time.now.utc - 3600
    # Ties on finished_at (ten rows per second) make the id part of the key carry the order.
    original = insert_jobs(95, **failed_attributes, finished_at: ->(i) { base + i / 10 })
    seen = walk({ state: "failed" }, limit: 10) { insert_jobs(3, **failed_attributes(Time.now.utc)) }
    assert_equal original.sort, seen.sort, "every original row once, none of the newer ones"
    assert_equal seen.uniq, seen
    finished = Bobbin::JobRecord.where(id: seen).pluck(:id, :finished_at).to_h
    assert_equal seen, seen.sort_by { |id| [ -finished[id].to_f, -id ] }, "newest first, then higher id"
  end

  test "ready jobs by run time: later inserts join at the end and nothing repeats" do
    base = Time.now.utc - 600
    original = insert_jobs(42, run_at: ->(i) { base + i / 5 })
    seen = walk({ state: "ready" }, limit: 7) { insert_jobs(2, run_at: Time.now.utc) }
    assert_equal seen.uniq, seen
    assert_empty original - seen, "every original row seen"
    assert_equal original, seen.first(42), "oldest run_at first, ties by id"
  end

  test "all jobs by id, newest first" do
    original = insert_jobs(25)
    seen = walk({}, limit: 4) { insert_jobs(1) }
    assert_equal original.sort.reverse, seen
  end

  test "a page reads the rows after its cursor, not an offset" do
    insert_jobs(5, **failed_attributes)
    page = Bobbin::Operator.jobs({ state: "failed" }, limit: 2)
    Bobbin::JobRecord.where(id: page.jobs.map(&:id)).delete_all
    rest = Bobbin::Operator.jobs(page.filter, cursor: page.next_cursor, limit: 10).jobs
    assert_equal 3, rest.size, "deleting the first page moves nothing"
    assert_nil Bobbin::Operator.jobs(page.filter, cursor: page.next_cursor, limit: 10).next_cursor
  end

  test "a page after a cursor starts in the index at the cursor (a deep page reads its own rows, not those before it)" do
    base = Time.now.utc - 3600
    insert_jobs(2_000, state: "succeeded", finished_at: ->(i) { base + i })
    Bobbin::JobRecord.connection.execute(postgres? ? "ANALYZE bobbin_jobs" : "ANALYZE")
    cursor = nil
    20.times { cursor = Bobbin::Operator.jobs({ state: "succeeded" }, cursor: cursor, limit: 50).next_cursor }
    statements = []
    subscriber = ActiveSupport::Notifications.subscribe("sql.active_record") { |*, payload| statements << payload if payload[:sql].include?("ORDER BY") }
    page = Bobbin::Operator.jobs({ state: "succeeded" }, cursor: cursor, limit: 50)
    ActiveSupport::Notifications.unsubscribe(subscriber)
    assert_equal 50, page.jobs.size
    plan = explain_preferring_indexes(statements.last)
    if postgres?
      assert_match(/Index Cond: .*finished_at <=/, plan, "the cursor bounds the index scan")
    else
      assert_match(/SEARCH bobbin_jobs USING (COVERING )?INDEX \w+ \(state=\? AND finished_at<\?\)/, plan, "the cursor bounds the index scan")
    end
  end

  # A queue's name on the Queues page links to its jobs in any state, newest first. Found by walking every job from
  # the newest, a queue with few jobs cost a read of the whole table on PostgreSQL (0.5 s at 3,000,000 jobs, a trial).
  test "a queue's or a class's jobs in any state are read from their index, not by walking every job newest first" do
    reports = insert_jobs(2, queue: "reports", class_name: "ReportJob", **failed_attributes) + insert_jobs(1, queue: "reports", class_name: "ReportJob")
    insert_jobs(5_000, state: "succeeded", finished_at: Time.now.utc)
    Bobbin::JobRecord.connection.execute(postgres? ? "ANALYZE bobbin_jobs" : "ANALYZE")
    { { queue: "reports" } => "bobbin_jobs_state_queue", { class_name: "ReportJob" } => "bobbin_jobs_state_class" }.each do |criteria, index|
      statements = []
      subscriber = ActiveSupport::Notifications.subscribe("sql.active_record") { |*, payload| statements << payload if payload[:sql].include?("ORDER BY") }
      page = Bobbin::Operator.jobs(criteria, limit: 50)
      ActiveSupport::Notifications.unsubscribe(subscriber)
      assert_equal reports.sort.reverse, page.jobs.map(&:id), "#{criteria}: its jobs, newest first"
      next unless postgres? # SQLite's planner skip-scans the index by itself once its statistics say the table is big

      plan = Bobbin::JobRecord.connection.explain(statements.last[:sql], statements.last[:binds])
      assert_match(/#{index}.*\n.*Index Cond: .*state.* = ANY .*#{criteria.keys.first}/, plan, "#{criteria}: a range of #{index}, not all of it")
      refute_match(/bobbin_jobs_pkey/, plan, "#{criteria}: not a walk of every job")
    end
  end

  # Scheduled jobs are stored ready or blocked (run_at ahead). Read as one statement over both states, the page sorted
  # every scheduled job: 0.5 s at 1,000,000 (a trial). Each state's range is read in index order and merged instead.
  test "scheduled jobs, ready and blocked, page by run time across both states" do
    base = Time.now.utc + 3600
    # Interleaved states, and ties on run_at across them (three rows a second), so the merge and the id order both count.
    original = insert_jobs(40, state: ->(i) { i % 3 == 1 ? "blocked" : "ready" }, run_at: ->(i) { base + i / 3 })
    insert_jobs(5, run_at: Time.now.utc - 60) + insert_jobs(2, state: "blocked", run_at: Time.now.utc - 60) # due: not scheduled
    seen = walk({ state: "scheduled" }, limit: 6) { insert_jobs(1, state: "blocked", run_at: base + 7200) }
    run_at = Bobbin::JobRecord.where(id: seen).pluck(:id, :run_at).to_h
    assert_equal seen.uniq, seen
    assert_equal original, seen.first(40), "every scheduled row once, by run_at then id, whichever its state"
    assert_equal seen, seen.sort_by { |id| [ run_at[id], id ] }
  end

  test "a page of scheduled jobs reads each state's range in index order, not every scheduled job sorted" do
    base = Time.now.utc + 3600
    insert_jobs(3_000, state: ->(i) { i.odd? ? "blocked" : "ready" }, run_at: ->(i) { base + i })
    Bobbin::JobRecord.connection.execute(postgres? ? "ANALYZE bobbin_jobs" : "ANALYZE")
    statements = []
    subscriber = ActiveSupport::Notifications.subscribe("sql.active_record") { |*, payload| statements << payload if payload[:sql].include?("ORDER BY") }
    page = Bobbin::Operator.jobs({ state: "scheduled" }, limit: 20)
    ActiveSupport::Notifications.unsubscribe(subscriber)
    assert_equal 20, page.jobs.size
    refute_empty statements
    statements.each do |statement|
      plan = explain_preferring_indexes(statement)
      refute_match(postgres? ? /Sort/ : /TEMP B-TREE/, plan, "rows in index order, the page's worth read")
    end
  end

  # The processes page links to every job that stalled a fiber pool's loop, newest first: found by walking every job
  # from the newest, a page of the few that stalled read the whole table (a review).
  test "the jobs that stalled are read from their own index, newest first, not by walking every job" do
    stalled = insert_jobs(3, state: "succeeded", finished_at: Time.now.utc, stalls: 1, longest_stall_ms: 120)
    insert_jobs(3_000, state: "succeeded", finished_at: Time.now.utc)
    Bobbin::JobRecord.connection.execute(postgres? ? "ANALYZE bobbin_jobs" : "ANALYZE")
    statements = []
    subscriber = ActiveSupport::Notifications.subscribe("sql.active_record") { |*, payload| statements << payload if payload[:sql].include?("ORDER BY") }
    page = Bobbin::Operator.jobs({ stalled: true }, limit: 50)
    ActiveSupport::Notifications.unsubscribe(subscriber)
    assert_equal stalled.reverse, page.jobs.map(&:id)
    plan = Bobbin::JobRecord.connection.explain(statements.last[:sql], statements.last[:binds])
    assert_match(/bobbin_jobs_stalled/, plan)
  end

  private
    # The plan of `statement` with sequential scans priced out on PostgreSQL: at 2,000 rows a whole-table scan can
    # be the cheaper plan (it was once on CI), and what is checked is whether the cursor can bound an index scan.
    def explain_preferring_indexes(statement)
      connection = Bobbin::JobRecord.connection
      return connection.explain(statement[:sql], statement[:binds]) unless postgres?

      connection.transaction do
        connection.execute("SET LOCAL enable_seqscan = off")
        connection.explain(statement[:sql], statement[:binds])
      end
    end
end
