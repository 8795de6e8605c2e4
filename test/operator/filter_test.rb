# frozen_string_literal: true

require_relative "operator_helper"

# Every criterion of Operator::Filter selects exactly its jobs, on a table holding jobs it must leave out.
class OperatorFilterTest < Bobbin::TestCase
  include OperatorHelper

  setup do
    now = Time.now.utc
    @ready = insert_jobs(2, run_at: now - 5)
    @scheduled = insert_jobs(1, run_at: now + 3600)
    @blocked = insert_jobs(1, state: "blocked", concurrency_key: "k", concurrency_limit: 1)
    @running = insert_jobs(1, state: "running", claimed_by: 4242, claimed_at: now, started_at: now, attempts: 1)
    @succeeded = insert_jobs(1, state: "succeeded", attempts: 1, finished_at: now - 7200)
    @failed = insert_jobs(1, **failed_attributes(now - 60), last_error_message: "connection reset by <b>peer</b>")
    @discarded = insert_jobs(1, state: "discarded", finished_at: now)
    @mail = insert_jobs(1, queue: "mail", class_name: "MailJob", arguments: JSON.generate([ "ann@example.com" ]), active_job_id: "aj-1",
                        enqueued_at: now - 86_400)
  end

  def ids(criteria) = Bobbin::Operator.jobs(criteria, limit: 100).jobs.map(&:id).sort

  test "each state, with scheduled split by run_at from ready and blocked (a limited job set to run later is scheduled)" do
    @blocked_later = insert_jobs(1, state: "blocked", concurrency_key: "k", concurrency_limit: 1, run_at: Time.now.utc + 3600)
    assert_equal (@ready + @mail).sort, ids(state: "ready")
    { scheduled: @scheduled + @blocked_later, blocked: @blocked, running: @running, succeeded: @succeeded, failed: @failed,
      discarded: @discarded }.each do |state, expected|
      assert_equal expected.sort, ids(state: state), state
    end
    assert_equal 10, ids({}).size
    assert_equal %w[scheduled blocked], Bobbin::JobRecord.find(@blocked_later + @blocked).map(&:shown_state)
    assert_equal [ 2, 1 ], Bobbin.counts.values_at("scheduled", "blocked")
  end

  test "queue, class, process and Active Job id" do
    assert_equal @mail, ids(queue: "mail")
    assert_equal @mail, ids(class_name: "MailJob")
    assert_equal @running, ids(process_id: "4242")
    assert_equal @mail, ids(active_job_id: "aj-1")
    assert_equal [], ids(queue: "mail", state: "failed")
  end

  test "stalled: the jobs that held a fiber pool's event loop at least once" do
    Bobbin::JobRecord.where(id: @succeeded + @running).update_all(stalls: 2, longest_stall_ms: 480)
    assert_equal (@succeeded + @running).sort, ids(stalled: "true")
    assert_equal @running, ids(stalled: true, state: "running")
    assert_equal 9, ids(stalled: "false").size, "false is no criterion"
    assert_raises(ArgumentError) { ids(stalled: "maybe") }
  end

  test "enqueued and finished time windows" do
    now = Time.now.utc
    assert_equal @mail, ids(enqueued_before: (now - 3600).iso8601)
    assert_equal 8, ids(enqueued_after: (now - 3600).iso8601).size
    assert_equal @succeeded, ids(finished_before: (now - 3600).iso8601)
    assert_equal (@failed + @discarded).sort, ids(finished_after: (now - 3600).iso8601)
  end

  test "search finds a substring of the arguments or of the error, taken literally" do
    assert_equal @mail, ids(search: "ann@example")
    assert_equal @failed, ids(search: "<b>peer")
    assert_equal @failed, ids(search: "RuntimeError")
    assert_equal [], ids(search: "%")
    assert_equal @failed, ids(search: "reset", state: "failed")
  end

  # The arguments are stored as JSON: a search for an argument's quote, backslash or newline looked for the text as given
  # and found nothing, where the job's page showed the argument holding it.
  test "search finds an argument's text with quotes, backslashes or a newline, and still a fragment of the arguments' JSON" do
    path = insert_jobs(1, arguments: JSON.generate([ %q(C:\imports\Q3 "final".csv), "line one\nline two" ])).first
    # As the argument holds it, and as the job's page shows the JSON (C:\\imports, \"final\")
    [ %q(C:\imports\Q3), '"final"', "one\nline", '["C:\\\\imports', %q(\"final\") ].each { |text| assert_equal [ path ], ids(search: text), text }
    assert_equal [], ids(search: %q(C:\imports\Q4))
  end

  # SQLite refuses a LIKE pattern over 50,000 bytes: a search of 12,500 backslashes (doubled by JSON, then by LIKE's
  # escaping) was a 500 on the dashboard (a review).
  test "the longest search runs, whatever its characters; a longer one is refused" do
    longest = Bobbin::Operator::Filter::SEARCH_CHARACTERS
    [ "\\", "\u0001", "%", "\u{1F600}" ].each { |character| assert_equal [], ids(search: character * longest), character.inspect }
    assert_match(/search is at most #{longest} characters, got #{longest + 1}/, assert_raises(ArgumentError) { ids(search: "a" * (longest + 1)) }.message)
  end

  test "bad criteria are refused with a message naming them" do
    assert_match(/unknown state "lost"/, assert_raises(ArgumentError) { ids(state: "lost") }.message)
    assert_match(/unknown job filter colour/, assert_raises(ArgumentError) { ids(colour: "red") }.message)
    assert_match(/finished_after must be an ISO 8601 time/, assert_raises(ArgumentError) { ids(finished_after: "yesterday") }.message)
    assert_match(/process_id must be a number/, assert_raises(ArgumentError) { ids(process_id: "x") }.message)
    assert_match(/bad page cursor/, assert_raises(ArgumentError) { Bobbin::Operator.jobs({ state: "failed" }, cursor: "nope") }.message)
    [ "300000-01-01T00:00:00Z", "-4714-01-01T00:00:00Z" ].each do |far|
      assert_match(/enqueued_after must be an ISO 8601 time in years 1 to 9999/, assert_raises(ArgumentError) { ids(enqueued_after: far) }.message)
      assert_match(/bad page cursor/, assert_raises(ArgumentError) { Bobbin::Operator.jobs({ state: "failed" }, cursor: "#{far},1") }.message)
    end
    assert_raises(ArgumentError) { ids(finished_before: Time.utc(300_000)) }
  end

  test "a filter's times keep their fraction in its links and forms, so a bulk action covers the jobs its page listed" do
    noon = Time.utc(2026, 1, 1, 12)
    early, late = insert_jobs(2, **failed_attributes, enqueued_at: ->(i) { noon + [ 0.1, 0.9 ][i] })
    filter = Bobbin::Operator::Filter.from(state: "failed", enqueued_after: "2026-01-01T12:00:00.5Z", enqueued_before: "2026-01-01T13:00:00Z")
    assert_equal({ state: "failed", enqueued_after: "2026-01-01T12:00:00.500000Z", enqueued_before: "2026-01-01T13:00:00Z" }, filter.to_h)
    assert_equal [ late ], Bobbin::Operator.jobs(filter).jobs.map(&:id)
    assert_equal 1, Bobbin::Operator.retry_all(filter.to_h, by: "test"), "the form's fields: the listed job alone"
    assert_equal [ "failed", "ready" ], Bobbin::JobRecord.where(id: [ early, late ]).order(:id).pluck(:state)
  end

  test "blank values are ignored, as an empty form field sends them" do
    assert_equal 9, ids(state: "", queue: " ").size
  end
end
