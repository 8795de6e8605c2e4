# frozen_string_literal: true

require_relative "operator_helper"
require "active_job/errors/job_not_found_error" # mission_control-jobs' own error, which its controllers redirect on
require "active_job/queue" # and its queue list, in which ActiveJob::Base#queue finds a job's queue by name
require "active_job/queues"

# The Mission Control adapter's actions, without Mission Control's pages (test/rails/mission_control_test.rb drives
# those in a browser, once per run): what it answers when the job changed after the page showed it.
class MissionControlAdapterTest < Bobbin::TestCase
  include OperatorHelper

  Job = Struct.new(:job_id)

  def adapter = Object.new.extend(Bobbin::MissionControlAdapter)

  test "Retry or Discard of a job that is no longer failed is 'not found' (Mission Control's alert), not a success" do
    failed = insert_jobs(1, **failed_attributes).first
    running = insert_jobs(1, state: "running", claimed_by: 1, attempts: 1).first
    assert adapter.retry_job(Job.new("bobbin-#{failed}"), :failed_relation)
    error = assert_raises(ActiveJob::Errors::JobNotFoundError) { adapter.retry_job(Job.new("bobbin-#{failed}"), :failed_relation) }
    assert_equal [ "Job with id 'bobbin-#{failed}' not found", :failed_relation ], [ error.message, error.job_relation ]
    assert_raises(ActiveJob::Errors::JobNotFoundError) { adapter.discard_job(Job.new("bobbin-#{running}"), :failed_relation) }
    assert_equal "running", Bobbin::JobRecord.where(id: running).pick(:state)
    assert_raises(ActiveJob::Errors::JobNotFoundError) { adapter.retry_job(Job.new("bobbin-0"), :failed_relation) }
  end

  # Its enqueue, which hands Mission Control the job as a JobProxy, is clicked in test/rails/mission_control_test.rb.
  test "Run now of a recurring task is offered for a task whose job can be built, not one whose class is gone" do
    tasks = [ Bobbin::Recurring::Task.parse("tick", { schedule: "every day at 3am", class: "TickJob", args: [ "now" ], queue: "ticks" }, "t"),
              Bobbin::Recurring::Task.parse("gone", { schedule: "every day at 3am", class: "NoSuchJob" }, "t") ]
    Bobbin::RecurringTask.sync(tasks)
    assert adapter.can_enqueue_recurring_task?("tick")
    assert_not adapter.can_enqueue_recurring_task?("gone")
    assert_not adapter.can_enqueue_recurring_task?("unknown")

    # A task whose job refuses its arguments (here too large; a concurrency key that cannot be computed in a trial) is not
    # offered either: its error made Mission Control's whole Recurring list fail (500).
    Bobbin::RecurringTask.sync(tasks + [ Bobbin::Recurring::Task.parse("refused", { schedule: "every day at 3am", class: "TickJob", args: [ "x" * 100 ] }, "t") ])
    Bobbin.config.max_argument_bytes = 50
    assert_not adapter.can_enqueue_recurring_task?("refused")
    assert_raises(Bobbin::EnqueueError) { adapter.send(:recurring_task, "refused").job_row }
  end

  test "a recurring task's arguments read as JSON in Mission Control's list, Strings as themselves" do
    task = Bobbin::Recurring::Task.parse("report", { schedule: "every day at 3am", class: "TickJob", args: [ "daily", { "to" => [ "ops" ], "n" => 2 }, 7, nil ] }, "t")
    Bobbin::RecurringTask.sync([ task ])
    assert_equal [ "daily", '{"to":["ops"],"n":2}', "7", "null" ], adapter.find_recurring_task("report")[:arguments]
    assert_equal 'daily,{"to":["ops"],"n":2},7,null', adapter.recurring_tasks.first[:arguments].join(","), "as Mission Control's page joins them"
  end

  # What Mission Control's pages read of a row (JobProxy.new(payload)): a plain job that ran once showed "Retries 1"
  # (a trial); Active Job counts executions before this one. Arguments are always a list, with an enqueue time.
  test "a row's payload for Mission Control counts earlier runs as executions and always has a list of arguments" do
    ran_once = insert_jobs(1, state: "succeeded", attempts: 1, finished_at: Time.now.utc).first
    broken = insert_jobs(1, **failed_attributes, arguments: "{not json").first
    payload = ->(id) { adapter.send(:active_job_payload, Bobbin::JobRecord.find(id)) }
    assert_equal 0, payload.(ran_once)["executions"]
    assert_equal [ [ "{not json" ], "bobbin-#{broken}" ], payload.(broken).values_at("arguments", "job_id")
    assert Time.iso8601(payload.(broken)["enqueued_at"])
  end

  # Mission Control's date filters are inclusive ranges (`start..end` from its form): a job finished at the end itself
  # was left out, the filter's bound being exclusive.
  test "an inclusive date range includes its end; an exclusive one does not" do
    finish = Time.utc(2026, 11, 29, 12)
    ids = insert_jobs(3, **failed_attributes, finished_at: ->(i) { finish - 1 + i }) # a second before, at, a second after
    within = ->(range) { Bobbin::Operator::Filter.new(state: "failed", **adapter.send(:window, :finished, range)).scope.order(:id).pluck(:id) }
    assert_equal ids.first(2), within.((finish - 60)..finish)
    assert_equal ids.first(1), within.((finish - 60)...finish)
    assert_equal ids.last(2), within.(finish..)
  end

  # Mission Control links a job to its queue, found by name in the adapter's list (ActiveJob::Base#queue): a finished or
  # discarded job whose queue had nothing waiting, running or failed got nil there, and its pages failed (500).
  test "queues lists every queue a job is in, finished and discarded jobs' too, and the paused ones; those without waiting jobs show 0" do
    now = Time.now.utc
    insert_jobs(2, queue: "default", state: "succeeded", attempts: 1, finished_at: now)
    insert_jobs(1, queue: "drained", state: "discarded", finished_at: now)
    insert_jobs(3, queue: "busy")
    insert_jobs(1, queue: "broken", **failed_attributes)
    Bobbin::Operator.pause("idle")

    queues = adapter.queues
    assert_equal({ "busy" => [ 3, true ], "broken" => [ 0, true ], "idle" => [ 0, false ], "default" => [ 0, true ], "drained" => [ 0, true ] },
                 queues.to_h { |queue| [ queue[:name], [ queue[:size], queue[:active] ] ] })
    found = ActiveJob::Queues.new(queues.map { |queue| ActiveJob::Queue.new(queue[:name], size: queue[:size], active: queue[:active], queue_adapter: adapter) })
    %w[default drained busy broken idle].each { |name| assert_equal name, found[name]&.name, "Mission Control finds queue #{name}" }
    assert_equal 5, queues.size, "each queue once"
  end

  # Mission Control shows "Run now" on its Scheduled and Blocked pages. A blocked job's run_at set to now sent it behind
  # the jobs of its key that queued after it, while the page said it was dispatched.
  test "Run now makes a scheduled job due now and lets a blocked one through past its limit, never later in line" do
    waited = Time.now.utc.floor - 60
    scheduled = insert_jobs(1, run_at: Time.now.utc + 3600).first
    blocked, behind = insert_jobs(2, state: "blocked", run_at: ->(i) { waited + i }, concurrency_key: "acct", concurrency_limit: 1,
                                     concurrency_duration: 180)
    [ scheduled, blocked ].each { |id| adapter.dispatch_job(Job.new("bobbin-#{id}"), :relation) }
    rows = Bobbin::JobRecord.where(id: [ scheduled, blocked, behind ]).order(:id).pluck(:state, :run_at, :operation)
    assert_equal [ [ "ready", "dispatched" ], [ "ready", "dispatched" ], [ "blocked", nil ] ], rows.map { |state, _, operation| [ state, operation ] }
    assert_operator rows[0][1], :<=, Time.now.utc, "the scheduled job is due"
    assert_equal [ waited, waited + 1 ], [ rows[1][1], rows[2][1] ], "the blocked job keeps its place, ahead of the one behind it"
  end

  # A limited job scheduled for later is stored blocked; let through like one waiting for its slot, it ran beside the
  # job holding its key's only slot (a trial). It is made due instead, and takes its turn; Solid Queue's adapter does that.
  test "Run now of a limited job scheduled for later makes it due and leaves it to its limit; with a free slot it runs" do
    limited = { concurrency_limit: 1, concurrency_duration: 180 }
    insert_jobs(1, state: "running", claimed_by: 1, claimed_at: Time.now.utc, attempts: 1, concurrency_key: "acct-1", **limited)
    later = Time.now.utc + 3600
    held, free = [ "acct-1", "acct-2" ].map { |key| insert_jobs(1, state: "blocked", run_at: later, concurrency_key: key, **limited).first }
    [ held, free ].each { |id| adapter.dispatch_job(Job.new("bobbin-#{id}"), :relation) }
    rows = Bobbin::JobRecord.where(id: [ held, free ]).order(:id).pluck(:state, :run_at, :operation)
    assert_equal [ [ "blocked", "dispatched" ], [ "ready", "dispatched" ] ], rows.map { |state, _, operation| [ state, operation ] },
                 "acct-1's slot is held: its job waits for it; acct-2's is free: its job is let through"
    assert rows.all? { |_, run_at, _| run_at <= Time.now.utc }, "both are due now"
    assert_equal 1, Bobbin::JobRecord.where(concurrency_key: "acct-1", state: %w[ready running]).count
  end

  # What jobs_count reads of Mission Control's relation (ActiveJob::JobsRelation, mission_control-jobs' own class).
  Relation = Struct.new(:status, :offset_value, :limit_value, :queue_name, :job_class_name, :worker_id, :recurring_task_id, :finished_at,
                        :scheduled_at, :enqueued_at, keyword_init: true) do
    def limit_value_provided? = !limit_value.nil?
    def paginated? = !offset_value.to_i.zero? || limit_value_provided?
  end

  # Mission Control's count of a status (a tab's number, unlimited up to internal_query_count_limit) read scheduled jobs in
  # run_at order: both states' index ranges read and sorted, up to 500,000 of them, for a number (a review: a Sort of
  # 50,000 rows at 1,000,000 jobs). The count is the same in any order, its offset and cap kept.
  test "Mission Control's count of scheduled jobs does not sort them, and counts from its offset up to its cap" do
    unless defined?(::MissionControl::Jobs) # the gem's setting, without loading its engine
      stub_const = true
      ::MissionControl = Module.new unless defined?(::MissionControl)
      ::MissionControl.const_set(:Jobs, Module.new { mattr_accessor :internal_query_count_limit, default: 500_000 })
    end
    later = Time.now.utc + 3600
    insert_jobs(5, run_at: ->(i) { later + i })
    insert_jobs(3, state: "blocked", run_at: ->(i) { later + i }, concurrency_key: "k", concurrency_limit: 1)
    insert_jobs(2, run_at: Time.now.utc - 60)
    insert_jobs(1, **failed_attributes)
    statements = []
    counted = ActiveSupport::Notifications.subscribed(->(*, payload) { statements << payload unless payload[:name] == "SCHEMA" }, "sql.active_record") do
      adapter.jobs_count(Relation.new(status: :scheduled, offset_value: 2))
    end
    assert_equal 6, counted, "eight scheduled, from the third"
    count = statements.find { |payload| payload[:sql].include?("COUNT") }
    refute_match(/ORDER BY/i, count[:sql])
    if postgres?
      binds = count[:type_casted_binds].then { |values| values.respond_to?(:call) ? values.call : values }
      plan = Bobbin::JobRecord.connection.select_values("EXPLAIN #{count[:sql]}", "plan", binds).join("\n")
      refute_match(/Sort/, plan)
    end
    previous = ::MissionControl::Jobs.internal_query_count_limit
    ::MissionControl::Jobs.internal_query_count_limit = 7
    assert_equal 6, adapter.jobs_count(Relation.new(status: :scheduled, offset_value: 2))
    assert_equal Float::INFINITY, adapter.jobs_count(Relation.new(status: :scheduled, offset_value: 0)), "eight, over the cap of seven"
  ensure
    ::MissionControl::Jobs.internal_query_count_limit = previous if previous
    ::MissionControl.send(:remove_const, :Jobs) if stub_const
  end
end
