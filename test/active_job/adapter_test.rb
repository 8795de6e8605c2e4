# frozen_string_literal: true

require "test_helper"
require "support/active_jobs"
require "rack/mock"

ActiveJob::Base.include(ActiveJob::EnqueueAfterTransactionCommit)

class LedgerActiveJob < ActiveJob::Base
  def perform(key, options = {}) = LedgerEntry.create!(key: "#{key}#{options[:suffix]}", pid: Process.pid)
end

class RowLedgerActiveJob < ActiveJob::Base
  def perform(key) = LedgerEntry.create!(key: "#{key} #{provider_job_id}", pid: Process.pid)
end

class RetryingActiveJob < ActiveJob::Base
  retry_on ArgumentError, wait: 0, attempts: 3

  def perform(key)
    Recorder.around(key) { }
    raise ArgumentError, "again" if Recorder.calls.count(key) < 3

    LedgerEntry.create!(key: key)
  end
end

class ExhaustingActiveJob < ActiveJob::Base
  retry_on ArgumentError, wait: 0, attempts: 2

  def perform = raise(ArgumentError, "every time")
end

class DiscardingActiveJob < ActiveJob::Base
  discard_on KeyError

  def perform
    LedgerEntry.create!(key: "discarding ran", pid: Process.pid)
    raise(KeyError, "gone")
  end
end

class UnhandledActiveJob < ActiveJob::Base
  def perform = raise(ArgumentError, "nobody handles this")
end

class AfterCommitActiveJob < LedgerActiveJob
  self.enqueue_after_transaction_commit = true
end

# A job limited by Solid Queue's limits_concurrency (when both gems are loaded, Solid Queue's wins): the class
# attributes and key method its ActiveJob::ConcurrencyControls defines, with on_conflict: :discard.
class SolidQueueDiscardingJob < ActiveJob::Base
  class_attribute :concurrency_limit, default: 1
  class_attribute :concurrency_duration, default: 180
  class_attribute :concurrency_on_conflict, default: :discard

  def concurrency_key = "#{self.class.name}/#{arguments.first}"
  def perform(_account) = nil
end

# A job with the class attributes GoodJob::ActiveJobExtensions::Concurrency defines; its test sets them as
# good_job_control_concurrency_with(perform_limit: 1, key: ...) does (empty otherwise: a doctor run in this process sees it).
class GoodJobLimitedJob < ActiveJob::Base
  GOOD_JOB_LIMIT = { perform_limit: 1, key: -> { "account-#{arguments.first}" } }.freeze
  class_attribute :good_job_concurrency_config, instance_accessor: false, default: {}
  class_attribute :good_job_concurrency_rules, instance_accessor: false, default: []

  def perform(_account) = nil
end

class GoodJobLimitedPortedJob < GoodJobLimitedJob
  limits_concurrency to: 1, key: ->(account) { account }
end

# Two steps (ActiveJob::Continuable): each records that it ran.
class TwoStepsActiveJob < ActiveJob::Base
  include ActiveJob::Continuable
  self.resume_options = { wait: 0 }

  def perform(key)
    step(:a) { LedgerEntry.create!(key: "#{key} a") }
    step(:b) { LedgerEntry.create!(key: "#{key} b") }
  end
end

class ActiveJobAdapterTest < Bobbin::TestCase
  test "Solid Queue's on_conflict: :discard is refused at perform_later, not ignored (its jobs would run), and nothing is stored" do
    error = assert_raises(Bobbin::ConfigurationError) { SolidQueueDiscardingJob.perform_later("acct") }
    assert_match(/SolidQueueDiscardingJob: limits_concurrency on_conflict: :discard is not supported by Bobbin .*use on_conflict: :block/, error.message)
    assert_equal 0, Bobbin::JobRecord.count
    SolidQueueDiscardingJob.concurrency_on_conflict = :block
    2.times { SolidQueueDiscardingJob.perform_later("acct") }
    assert_equal %w[ready blocked], Bobbin::JobRecord.where(concurrency_key: "SolidQueueDiscardingJob/acct").order(:id).pluck(:state)
  ensure
    SolidQueueDiscardingJob.concurrency_on_conflict = :discard
  end

  test "GoodJob's concurrency controls are refused at perform_later, not ignored (its jobs would run unlimited), until limits_concurrency replaces them" do
    GoodJobLimitedJob.good_job_concurrency_config = GoodJobLimitedJob::GOOD_JOB_LIMIT
    error = assert_raises(Bobbin::ConfigurationError) { GoodJobLimitedJob.perform_later("acct") }
    assert_match(/\AGoodJobLimitedJob: GoodJob's concurrency controls .* do nothing under Bobbin.*declare limits_concurrency to: N/, error.message)
    GoodJobLimitedJob.good_job_concurrency_config = {}
    GoodJobLimitedJob.good_job_concurrency_rules = [ Object.new ]
    assert_raises(Bobbin::ConfigurationError) { GoodJobLimitedJob.perform_later("acct") }
    assert_equal 0, Bobbin::JobRecord.count

    2.times { GoodJobLimitedPortedJob.perform_later("acct") }
    assert_equal %w[ready blocked], Bobbin::JobRecord.where(concurrency_key: "GoodJobLimitedPortedJob/acct").order(:id).pluck(:state)
    GoodJobLimitedJob.good_job_concurrency_rules = []
    GoodJobLimitedJob.perform_later("acct")
    assert_equal 1, Bobbin::JobRecord.where(class_name: "GoodJobLimitedJob").count
  ensure
    GoodJobLimitedJob.good_job_concurrency_config = {}
    GoodJobLimitedJob.good_job_concurrency_rules = []
  end

  test "Solid Queue's limit and duration are checked as Bobbin's own: a limit of 0 or a duration ≤ 0 is refused at perform_later" do
    SolidQueueDiscardingJob.concurrency_on_conflict = :block
    { [ 0, 180 ] => /concurrency to: must be a whole number from 1 to 2147483647, got 0/,
      [ 2**31, 180 ] => /concurrency to: must be a whole number from 1 to 2147483647, got 2147483648/, [ 1, -5 ] => /concurrency duration: must be a number of seconds > 0, got -5.0/,
      [ 1, "soon" ] => /concurrency duration: must be a number of seconds, got "soon"/ }.each do |(limit, duration), message|
      SolidQueueDiscardingJob.concurrency_limit = limit
      SolidQueueDiscardingJob.concurrency_duration = duration
      error = assert_raises(Bobbin::ConfigurationError) { SolidQueueDiscardingJob.perform_later("acct") }
      assert_match(/\ASolidQueueDiscardingJob: #{message}/, error.message)
    end
    assert_equal 0, Bobbin::JobRecord.count
  ensure
    SolidQueueDiscardingJob.concurrency_limit = 1
    SolidQueueDiscardingJob.concurrency_duration = 180
    SolidQueueDiscardingJob.concurrency_on_conflict = :discard
  end

  test "arguments nested deeper than JSON allows are a SerializationError at perform_later, and nothing is stored" do
    deep = 150.times.reduce([]) { |inner, _| [ inner ] }
    error = assert_raises(Bobbin::SerializationError) { LedgerActiveJob.perform_later(deep) }
    assert_match(/LedgerActiveJob: arguments cannot be stored as JSON/, error.message)
    assert_equal 0, Bobbin::JobRecord.count
  end

  ACTIVE_JOBS = File.expand_path("../support/active_jobs.rb", __dir__)

  test "perform_later stores the job with Active Job's serialization and runs it" do
    job = LedgerActiveJob.perform_later("a", suffix: "!")
    row = Bobbin::JobRecord.find(job.provider_job_id)
    assert_equal [ "LedgerActiveJob", "default", job.job_id ], [ row.class_name, row.queue, row.active_job_id ]
    drain(fibers: 5)
    assert_equal [ "a!" ], LedgerEntry.pluck(:key)
  end

  test "set(wait:) schedules, set(priority:) and queue names are stored" do
    LedgerActiveJob.set(wait: 1.hour).perform_later("later")
    LedgerActiveJob.set(priority: -3, queue: "urgent").perform_later("now")
    assert_in_delta Time.now + 3600, Bobbin::JobRecord.find_by!(priority: 0).run_at, 5
    assert_equal "urgent", Bobbin::JobRecord.find_by!(priority: -3).queue
    drain(fibers: 5, queues: [ "urgent" ])
    assert_equal [ "now" ], LedgerEntry.pluck(:key)
  end

  test "perform_all_later enqueues many jobs in one INSERT" do
    inserts = 0
    subscriber = ActiveSupport::Notifications.subscribe("sql.active_record") { |*, p| inserts += 1 if p[:sql].start_with?("INSERT") }
    jobs = Array.new(50) { |i| LedgerActiveJob.new("k#{i}") }
    ActiveJob.perform_all_later(jobs)
    ActiveSupport::Notifications.unsubscribe(subscriber)
    assert_equal 1, inserts
    assert jobs.all?(&:successfully_enqueued?)
    drain(threads: 4)
    assert_equal 50, LedgerEntry.count
  end

  test "perform_all_later stores every job but one Bobbin refuses, which says why (successfully_enqueued? false, enqueue_error)" do
    limit = Bobbin.config.max_argument_bytes
    jobs = [ LedgerActiveJob.new("small"), LedgerActiveJob.new("big", suffix: "x" * (limit + 1)), LedgerActiveJob.new("also small") ]
    ActiveJob.perform_all_later(jobs)
    assert_equal 2, Bobbin::JobRecord.count
    assert_equal [ true, false, true ], jobs.map(&:successfully_enqueued?)
    assert_kind_of Bobbin::SerializationError, jobs[1].enqueue_error
    assert_match(/LedgerActiveJob: serialized job is \d+ bytes, over the #{limit}-byte limit/, jobs[1].enqueue_error.message)
    assert_nil jobs[1].provider_job_id
    assert_equal [ jobs[0].provider_job_id, jobs[2].provider_job_id ], Bobbin::JobRecord.order(:id).pluck(:id)
    drain(threads: 2)
    assert_equal [ "also small", "small" ], LedgerEntry.pluck(:key).sort
  end

  # Active Job enqueues each entry of the list (one by one for an adapter without enqueue_all), as Solid Queue and
  # Sidekiq do: the same job listed twice was stored once, and counted as two enqueued.
  test "perform_all_later with the same job listed twice stores and runs it twice, and counts two" do
    job = RowLedgerActiveJob.new("twice")
    counted = nil
    subscriber = ActiveSupport::Notifications.subscribe("enqueue_all.active_job") { |*, payload| counted = payload[:enqueued_count] }
    ActiveJob.perform_all_later([ job, job, RowLedgerActiveJob.new("once") ])
    ActiveSupport::Notifications.unsubscribe(subscriber)
    assert_equal [ job.job_id, job.job_id ], Bobbin::JobRecord.where(active_job_id: job.job_id).pluck(:active_job_id)
    assert_equal 3, Bobbin::JobRecord.count
    assert_equal 3, counted
    assert job.successfully_enqueued?
    assert_equal Bobbin::JobRecord.where(active_job_id: job.job_id).maximum(:id), job.provider_job_id
    ids = Bobbin::JobRecord.order(:id).pluck(:id)
    drain(threads: 2)
    assert_equal [ "twice #{ids[0]}", "twice #{ids[1]}", "once #{ids[2]}" ].sort, LedgerEntry.pluck(:key).sort
  end

  # Time.at raised FloatDomainError (NaN, ±Infinity) or TypeError from inside the adapter, naming neither the job nor the time.
  test "a time to run at that is NaN, infinite or not a number is an EnqueueError naming the job and the time, and nothing is stored" do
    adapter = ActiveJob::QueueAdapters::BobbinAdapter.new
    [ Float::NAN, Float::INFINITY, -Float::INFINITY, "soon", Complex(1, 1) ].each do |timestamp|
      job = LedgerActiveJob.new("bad time")
      error = assert_raises(Bobbin::EnqueueError) { adapter.enqueue_at(job, timestamp) }
      assert_match(/\ALedgerActiveJob \(job #{job.job_id}\): the time to run it must be a finite number of seconds since the epoch, got #{Regexp.escape(timestamp.inspect)} /,
                   error.message)
      assert_nil job.provider_job_id
    end
    assert_raises(Bobbin::EnqueueError) { LedgerActiveJob.set(wait_until: Float::NAN).perform_later("nan") }
    jobs = [ LedgerActiveJob.new("fine"), LedgerActiveJob.new("never").set(wait_until: Float::INFINITY) ]
    ActiveJob.perform_all_later(jobs)
    assert_equal [ true, false ], jobs.map(&:successfully_enqueued?)
    assert_match(/got Infinity \(Float\)/, jobs[1].enqueue_error.message)
    assert_equal [ jobs[0].provider_job_id ], Bobbin::JobRecord.pluck(:id)
  end

  test "retry_on re-enqueues through the adapter until the job succeeds" do
    RetryingActiveJob.perform_later("r")
    drain(fibers: 5)
    assert_equal [ "r" ], LedgerEntry.pluck(:key)
    assert_equal 3, Bobbin::JobRecord.where(class_name: "RetryingActiveJob", state: "succeeded").count
  end

  # Each retry is a row of its own, of one attempt: the last one's line said "failed after 1 attempt(s)" (a trial).
  test "a job whose retry_on attempts run out fails, and the log counts its runs as Active Job does" do
    ExhaustingActiveJob.perform_later
    log = bobbin_log { drain(fibers: 5) }
    assert_equal [ "succeeded", "failed" ], Bobbin::JobRecord.where(class_name: "ExhaustingActiveJob").order(:id).pluck(:state), "the retry is the row that fails"
    assert_match(/ExhaustingActiveJob \d+ failed after 2 execution\(s\) \(Active Job's count, its retries included\): ArgumentError: every time/, log)
    failed = Bobbin::JobRecord.find_by!(class_name: "ExhaustingActiveJob", state: "failed")
    page = Rack::MockRequest.new(Bobbin::Dashboard.new(environment: "development")).get("/jobs/#{failed.id}", "REMOTE_ADDR" => "127.0.0.1", "HTTP_HOST" => "localhost")
    assert_includes page.body, "1 of 1; Active Job execution 2 (each retry_on retry is a job of its own)", "the dashboard says so too"
  end

  test "discard_on drops the job without a failure" do
    DiscardingActiveJob.perform_later
    drain(fibers: 5)
    assert LedgerEntry.exists?(key: "discarding ran")
    assert_equal [ [ "succeeded", 1 ] ], Bobbin::JobRecord.where(class_name: "DiscardingActiveJob").pluck(:state, :attempts),
                 "Active Job discarded the error: the job ended, once, as done"
    assert_equal 0, Bobbin.counts["failed"]
  end

  test "an error Active Job does not handle marks the job failed" do
    UnhandledActiveJob.perform_later
    drain(fibers: 5)
    failed = Bobbin::JobRecord.find_by!(state: "failed")
    assert_equal [ "UnhandledActiveJob", "ArgumentError", "nobody handles this" ],
                 [ failed.class_name, failed.last_error_class, failed.last_error_message ]
  end

  # A row is what the dashboard, the CLI, limits and lanes go by; its Active Job payload names the class Active Job
  # instantiates. A row changed in the database made the worker instantiate a class that is no job (a trial: Tempfile),
  # or run an Active Job class's perform without its callbacks.
  test "a row runs only its own class: a payload naming another class, or an Active Job class without a payload, fails and instantiates nothing" do
    made = []
    canary = Class.new { define_method(:initialize) { |*| made << :canary } }
    guarded = Class.new(LedgerActiveJob) { before_perform { raise "guard refused" } }
    constants = { "TrialCanary" => canary, "GuardedActiveJob" => guarded }
    constants.each { |name, klass| Object.const_set(name, klass) }
    row = ->(class_name, arguments, active_job_id) do
      Bobbin::Client::Enqueuer.insert([ Bobbin::Client::Enqueuer.build(class_name: class_name, arguments: arguments, queue: "default", priority: 0,
                                                                       run_at: nil, max_attempts: 1, active_job_id: active_job_id) ]).first
    end
    payload = LedgerActiveJob.new("hijacked").serialize
    other_class = row.("LedgerActiveJob", payload.merge("job_class" => "TrialCanary").to_json, payload["job_id"])
    not_active_job = row.("TrialCanary", payload.merge("job_class" => "TrialCanary").to_json, payload["job_id"])
    no_payload = row.("GuardedActiveJob", [ "plain" ].to_json, nil)
    LedgerActiveJob.perform_later("fine")
    drain(fibers: 5)

    failed = Bobbin::JobRecord.where(id: [ other_class, not_active_job, no_payload ]).order(:id).pluck(:state, :last_error_class, :last_error_message)
    assert_equal [ "failed" ] * 3, failed.map(&:first)
    assert_equal [ "Bobbin::UnrunnableJob" ] * 3, failed.map(&:second)
    assert_match(/payload names job_class "TrialCanary", not the row's class LedgerActiveJob/, failed[0][2])
    assert_match(/TrialCanary is not a job class/, failed[1][2])
    assert_match(/GuardedActiveJob is an Active Job class, but this row has no Active Job payload/, failed[2][2])
    assert_empty made, "no instance of a class that is not the row's job"
    assert_equal [ "fine" ], LedgerEntry.pluck(:key), "the guarded job's perform did not run; the good job did"
  ensure
    constants&.each_key { |name| Object.send(:remove_const, name) if Object.const_defined?(name) }
  end

  test "enqueue after transaction commit: nothing on rollback, one job on commit" do
    ActiveRecord::Base.transaction do
      AfterCommitActiveJob.perform_later("rolled-back")
      assert_equal 0, Bobbin::JobRecord.count, "deferred until commit"
      raise ActiveRecord::Rollback
    end
    assert_equal 0, Bobbin::JobRecord.count
    ActiveRecord::Base.transaction { AfterCommitActiveJob.perform_later("committed") }
    assert_equal 1, Bobbin::JobRecord.count
  end

  # Rails 7.2's perform_all_later hands the adapter every job inside the app's transaction: jobs that defer to the
  # commit were stored at once and ran though the transaction rolled back (a trial, with a separate queue database).
  test "enqueue_all inside a transaction stores the jobs that defer only once it commits, none on rollback; the others at once" do
    adapter = ActiveJob::QueueAdapters::BobbinAdapter.new
    jobs = [ AfterCommitActiveJob.new("deferred"), LedgerActiveJob.new("at once") ]
    ActiveRecord::Base.transaction do
      assert_equal 2, adapter.enqueue_all(jobs)
      assert_equal [ "LedgerActiveJob" ], Bobbin::JobRecord.pluck(:class_name), "the deferring job waits for the commit"
      assert jobs.all?(&:successfully_enqueued?)
      raise ActiveRecord::Rollback
    end
    assert_equal 0, Bobbin::JobRecord.count
    committed = AfterCommitActiveJob.new("committed")
    ActiveRecord::Base.transaction { adapter.enqueue_all([ committed ]) }
    assert_equal [ committed.provider_job_id ], Bobbin::JobRecord.where(class_name: "AfterCommitActiveJob").pluck(:id)
    assert committed.successfully_enqueued?
  end

  # Rails 7.2 asks the adapter for a job class left at :default: in the primary database the enqueue is part of the
  # transaction, as the README says; it was deferred past the commit there too (a trial).
  test "the adapter defers to the commit only when Bobbin's tables live in a database of their own" do
    adapter = ActiveJob::QueueAdapters::BobbinAdapter.new
    assert_not adapter.enqueue_after_transaction_commit?
    Bobbin.config.connects_to = { database: { writing: :queue } }
    assert adapter.enqueue_after_transaction_commit?
  end

  test "non-serializable arguments raise Active Job's error at enqueue and store nothing" do
    assert_raises(ActiveJob::SerializationError) { LedgerActiveJob.perform_later(Object.new) }
    assert_equal 0, Bobbin::JobRecord.count
  end

  test "inside perform, provider_job_id is the id of the Bobbin row the job runs from" do
    id = ProviderIdActiveJob.perform_later("inside").provider_job_id
    drain(fibers: 2)
    assert_equal [ "inside provider_job_id=#{id}" ], LedgerEntry.pluck(:key)
  end

  test "a continuable job stopped mid-step by TERM is re-enqueued and the next worker resumes it from its checkpoint" do
    id = StepsActiveJob.perform_later("steps").provider_job_id
    first = spawn_bobbin("work", "--queues", "steps", "--fibers", "2", "--shutdown-timeout", "60", "--require", ACTIVE_JOBS)
    ensure_killed(first) do
      wait_for("step b to start in the first worker") { LedgerEntry.exists?(key: "steps b from 0 pid=#{first}") }
      Process.kill(:TERM, first)
      assert wait_exit(first, timeout: 90)&.success?, "the first worker stops at the job's next checkpoint"
    end
    rows = Bobbin::JobRecord.where(class_name: "StepsActiveJob").order(:id)
    assert_equal [ [ id, "succeeded" ], [ rows.last.id, "ready" ] ], rows.map { |row| [ row.id, row.state ] },
                 "the interrupted run finished by enqueuing its continuation, not by being released"

    LedgerEntry.create!(key: "steps release")
    second = spawn_bobbin("work", "--queues", "steps", "--fibers", "2", "--drain", "--require", ACTIVE_JOBS)
    ensure_killed(second) { assert wait_exit(second, timeout: 90)&.success? }
    runs = LedgerEntry.where("key LIKE ?", "steps %").where.not(key: "steps release").pluck(:key).map { |key| key.match(/\Asteps (.+) pid=(\d+)\z/).captures }
    assert_equal [ [ "a", first.to_s ], [ "b from 0", first.to_s ] ], runs.select { |_, pid| pid == first.to_s }.sort
    resumed = runs.reject { |_, pid| pid == first.to_s }.map(&:first).sort
    assert_equal 2, resumed.size, "the second worker runs step b (resumed) and step c only: #{runs.inspect}"
    assert_match(/\Ab from [1-9]\d*\z/, resumed.first, "step b resumes from the cursor it had advanced to")
    assert_equal "c", resumed.last
    assert_equal %w[succeeded succeeded], Bobbin::JobRecord.where(class_name: "StepsActiveJob").order(:id).pluck(:state)
  end

  # Worker#stop on a worker whose run had ended (a test's teardown, an app stopping the worker it ran in a thread), or
  # that never ran, left it listed as stopping for good: every continuable job of the process after it stopped at its
  # first checkpoint, perform_now too, and enqueued itself instead of running its steps (a review).
  test "a worker stopped after its run ended, or never run, leaves the process not stopping: continuable jobs run all their steps" do
    adapter = ActiveJob::QueueAdapters::BobbinAdapter.new
    ran = Bobbin::Worker.new(polling_interval: 0.05, threads: 1)
    ran.run_until_empty
    ran.stop
    Bobbin::Worker.new(threads: 1).stop
    assert_not adapter.stopping?

    TwoStepsActiveJob.perform_now("inline")
    TwoStepsActiveJob.perform_later("queued")
    drain(threads: 1)
    assert_equal [ "inline a", "inline b", "queued a", "queued b" ], LedgerEntry.order(:key).pluck(:key)
    assert_equal [ "succeeded" ], Bobbin::JobRecord.pluck(:state), "one run, not a run per step"
  end
end
