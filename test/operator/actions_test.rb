# frozen_string_literal: true

require_relative "operator_helper"

# Operator actions: guarded by state, recorded with who/when, safe beside running workers.
class OperatorActionsTest < Bobbin::TestCase
  include OperatorHelper

  test "bulk retry of 10,000 failed jobs while workers run: each runs once, running jobs are untouched", long: true do
    log = ENV["BOBBIN_TEST_LOG"] || File::NULL
    pids = []
    ensure_killed(pids) do
      2.times { pids << spawn_bobbin("work", "--fibers", "25", "--polling-interval", "0.05", log: log) }
      gate = GatedJob.gate("slow")
      slow = Array.new(4) { |i| GatedJob.enqueue(gate, "slow-#{i}") } # running until the gate opens below
      wait_for("the slow jobs to run") { Bobbin::JobRecord.where(id: slow, state: "running").count == 4 }
      running = Bobbin::JobRecord.where(id: slow).pluck(:id, :claimed_by, :attempts)

      failed = insert_jobs(10_000, class_name: "CrashSafeJob", arguments: ->(i) { JSON.generate([ 0, "f-#{i}" ]) }, **failed_attributes)
      # Two operators press "retry all" at once, over every job: each failed job is retried by one of them.
      totals = Array.new(2) { |n| Thread.new { Bobbin::Operator.retry_all({}, by: "ops-#{n}") } }.map(&:value)
      assert_equal 10_000, totals.sum, "each failed job retried once (#{totals.inspect})"
      assert_equal 0, Bobbin::Operator.discard_all({ queue: "default", class_name: "GatedJob" }, by: "ops"), "running jobs are not discarded"
      assert_equal running, Bobbin::JobRecord.where(id: slow).pluck(:id, :claimed_by, :attempts), "running jobs untouched"
      assert_equal [ "running" ], Bobbin::JobRecord.where(id: slow).distinct.pluck(:state)
      GatedJob.open_gate(gate)

      # By their outcomes: a worker records a job's success after the job has written its ledger line.
      wait_for("every retried job to finish", timeout: 180, interval: 0.5) { Bobbin::JobRecord.where(id: failed, state: "succeeded").count == 10_000 }
      assert_equal 10_000, LedgerEntry.where("key LIKE 'f-%'").count
      assert_equal 10_000, StartEntry.count, "no retried job started twice"
      assert_equal %w[ops-0 ops-1].select { |by| totals[by[-1].to_i].positive? }, Bobbin::JobRecord.where(id: failed).distinct.pluck(:operated_by).sort
      wait_for("the slow jobs to finish") { LedgerEntry.where("key LIKE 'slow-%'").count == 4 }
    end
  end

  test "retry and discard one job, by state, recording who and when" do
    failed = insert_jobs(1, **failed_attributes).first
    ready = insert_jobs(1).first
    running = insert_jobs(1, state: "running", claimed_by: 1, claimed_at: Time.now.utc).first
    succeeded = insert_jobs(1, state: "succeeded", finished_at: Time.now.utc).first

    refute Bobbin::Operator.retry(ready, by: "ann"), "a waiting job is not retried"
    refute Bobbin::Operator.retry(running, by: "ann")
    refute Bobbin::Operator.discard(running, by: "ann"), "a running job is left to its worker"
    refute Bobbin::Operator.discard(succeeded, by: "ann")
    assert Bobbin::Operator.retry(failed, by: "ann")
    job = Bobbin::JobRecord.find(failed)
    assert_equal [ "ready", 0, "retried", "ann" ], [ job.state, job.attempts, job.operation, job.operated_by ]
    assert_in_delta Time.now.utc, job.operated_at, 60
    assert Bobbin::Operator.discard(ready, by: "bob")
    assert_equal [ "discarded", "discarded", "bob" ], Bobbin::JobRecord.find(ready).then { |j| [ j.state, j.operation, j.operated_by ] }
    assert Bobbin::Operator.retry(ready, by: "bob"), "a discarded job can be retried"
  end

  # A job tried while no worker had its class is given each such attempt back (its max_attempts raised by one). Retried
  # by an operator once its class was there and it had failed for real, it kept that raised max_attempts: an Active Job
  # job, which Bobbin fails at once, was retried 3 times more, and a plain job of `retries: 0` too (a review).
  test "an operator's retry gives a job the attempts its class allows, not those its unknown-class tries added" do
    require_relative "../support/active_jobs"
    Object.const_set(:ArrivingActiveJob, Class.new(ActiveJob::Base) { def perform = raise(ArgumentError, "broken") })
    payload = ArrivingActiveJob.new.serialize.to_json
    Object.send(:remove_const, :ArrivingActiveJob)
    ids = [ [ "ArrivingPlainJob", "[]", nil ], [ "ArrivingActiveJob", payload, JSON.parse(payload)["job_id"] ] ].map do |name, arguments, active_job_id|
      Bobbin::Client::Enqueuer.insert([ Bobbin::Client::Enqueuer.build(class_name: name, arguments: arguments, queue: "default", priority: 0,
                                                                       run_at: nil, max_attempts: 1, active_job_id: active_job_id) ]).first
    end
    3.times do # three tries while no worker has the classes
      drain(threads: 1)
      Bobbin::JobRecord.where(id: ids).update_all(run_at: Time.now.utc)
    end
    Object.const_set(:ArrivingPlainJob, Class.new { include Bobbin::Job; bobbin_options retries: 0; def perform = raise(ArgumentError, "broken") })
    Object.const_set(:ArrivingActiveJob, Class.new(ActiveJob::Base) { def perform = raise(ArgumentError, "broken") })
    drain(threads: 1)
    assert_equal [ [ "failed", 4, "ArgumentError" ] ] * 2, ids.map { |id| Bobbin::JobRecord.where(id: id).pick(:state, :attempts, :last_error_class) }

    ids.each { |id| assert Bobbin::Operator.retry(id, by: "ann") }
    drain(threads: 1)
    assert_equal [ [ "failed", 1 ] ] * 2, ids.map { |id| Bobbin::JobRecord.where(id: id).pick(:state, :attempts) },
                 "each fails at its first failure, as its class says, not retried for the tries its class was unknown"
  ensure
    %i[ArrivingPlainJob ArrivingActiveJob].each { |name| Object.send(:remove_const, name) if Object.const_defined?(name, false) }
  end

  # SQLite's lock is not fair: workers writing outcomes back to back kept a waiting writer out past its busy timeout on a
  # loaded machine. A batch of a bulk action ran again then; one job's retry, discard or release failed (a dashboard 500).
  test "retry, discard and release of one job wait for SQLite's write lock held past the busy timeout, as a batch does", long: true do
    skip("SQLite's write lock") if postgres?
    ids = { retry: insert_jobs(1, **failed_attributes).first, discard: insert_jobs(1).first,
            release: insert_jobs(1, state: "running", claimed_by: 999_999, claimed_at: Time.now.utc).first }
    ids.each { |action, id| assert(while_sqlite_locked { Bobbin::Operator.public_send(action, id, by: "ops") }, action) }
    assert_equal %w[ready discarded ready], Bobbin::JobRecord.where(id: ids.values).order(:id).pluck(:state)
  end

  test "pausing and resuming a queue wait for SQLite's write lock held past the busy timeout" do
    skip("SQLite's write lock") if postgres?
    assert_equal 1, while_sqlite_locked { Bobbin::Operator.pause("mail") }
    assert_equal [ "mail" ], Bobbin::QueuePause.pluck(:queue)
    assert_equal 1, while_sqlite_locked { Bobbin::Operator.resume("mail") }
    assert_empty Bobbin::QueuePause.pluck(:queue)
  end

  # The README's Bobbin.pause and `bobbin pause` (which calls it) raised "database is locked" after the busy timeout where
  # Operator.pause (the dashboard's) waited (a review).
  # `pause("mail,web")` (a list, as --queues takes) or "mail " returned 1 and paused nothing: no job can be in such a
  # queue, an enqueue refuses its name (a review).
  test "a pause names a queue a job can be in; resume takes any name a pause was stored under" do
    [ "mail,web", "mail ", " mail", "mail\n", "\e[2Jclr" ].each do |name|
      assert_raises(ArgumentError, match: /\Ano job can be in a queue named #{Regexp.escape(Bobbin::Printable.printable(name.inspect))}: /) { Bobbin::Operator.pause(name) }
    end
    assert_empty Bobbin::QueuePause.pluck(:queue)
    Bobbin::QueuePause.insert_all([ { queue: "mail ", created_at: Time.now.utc } ]) # stored before the check
    assert_equal 1, Bobbin::Operator.resume("mail ")
  end

  test "Bobbin.pause and Bobbin.resume wait for SQLite's write lock as Operator's do" do
    skip("SQLite's write lock") if postgres?
    assert_equal 1, while_sqlite_locked { Bobbin.pause("mail") }
    assert_equal [ "mail" ], Bobbin::QueuePause.pluck(:queue)
    assert_equal 1, while_sqlite_locked { Bobbin.resume("mail") }
    assert_empty Bobbin::QueuePause.pluck(:queue)
  end

  # Runs the block while another process holds SQLite's write lock for a second, past a busy timeout made short here
  # (the loaded machine's wait past the timeout, in short); returns what the block returns.
  # Runs the block (a bulk action); once its batch has been read, and before its UPDATE, runs `sql` on another session.
  # Returns the block's value.
  def between_read_and_write(sql)
    other = Bobbin::Record.connection_db_config.new_connection
    done = false
    interpose = lambda do |*, payload|
      next if done || !payload[:sql].match?(/\ASELECT "bobbin_jobs"."id" FROM/)
      done = true
      other.execute(sql)
    end
    ActiveSupport::Notifications.subscribed(interpose, "sql.active_record") { yield }.tap { assert done, "the batch read was seen" }
  ensure
    other&.disconnect!
  end

  def while_sqlite_locked
    holder = "db = SQLite3::Database.new(ARGV[0]); db.execute('BEGIN IMMEDIATE'); puts('locked'); $stdout.flush; sleep(1); db.execute('COMMIT')"
    Bobbin::JobRecord.with_connection do |connection|
      connection.raw_connection.busy_handler_timeout = 100
      IO.popen([ *ruby, "-rsqlite3", "-e", holder, TestDatabase.sqlite_path ]) do |lock|
        assert_equal "locked\n", lock.gets
        yield
      end
    ensure
      connection.raw_connection.busy_handler_timeout = 20_000
    end
  end

  test "bulk discard takes only the filtered waiting and failed jobs" do
    mail_failed = insert_jobs(3, queue: "mail", **failed_attributes)
    mail_ready = insert_jobs(2, queue: "mail")
    insert_jobs(2, queue: "mail", state: "running", claimed_by: 1)
    other = insert_jobs(2, **failed_attributes)
    assert_equal 5, Bobbin::Operator.discard_all({ queue: "mail" }, by: "ops")
    assert_equal (mail_failed + mail_ready).sort, Bobbin::JobRecord.where(state: "discarded").pluck(:id).sort
    assert_equal [ "failed" ], Bobbin::JobRecord.where(id: other).distinct.pluck(:state)
  end

  test "release: a running job of a dead process goes back to its queue, one of a live process stays" do
    live = Bobbin::ProcessRecord.register(kind: "worker", name: "live")
    dead = Bobbin::ProcessRecord.register(kind: "worker", name: "dead")
    dead.update_columns(last_heartbeat_at: Time.now.utc - Bobbin.config.process_alive_threshold - 60)
    on_live = insert_jobs(1, state: "running", claimed_by: live.id, attempts: 1).first
    on_dead = insert_jobs(1, state: "running", claimed_by: dead.id, attempts: 1).first
    orphan = insert_jobs(1, state: "running", claimed_by: 999_999, attempts: 1).first
    killed = Bobbin::ProcessRecord.register(kind: "worker", name: "killed") # beat just now, but its pid is gone (kill -9)
    killed.update_columns(pid: dead_pid)
    on_killed = insert_jobs(1, state: "running", claimed_by: killed.id, attempts: 1).first

    refute Bobbin::Operator.release(on_live, by: "ops"), "its worker is alive: releasing it would run it twice"
    assert Bobbin::Operator.release(on_dead, by: "ops")
    assert Bobbin::Operator.release(orphan, by: "ops")
    assert Bobbin::Operator.release(on_killed, by: "ops"), "a worker of this host whose pid is gone"
    assert_equal [ "running", "ready", "ready", "ready" ], [ on_live, on_dead, orphan, on_killed ].map { |id| Bobbin::JobRecord.find(id).state }
    assert_equal [ 0, dead.id, "released" ], Bobbin::JobRecord.find(on_dead).then { |j| [ j.attempts, j.claimed_by, j.operation ] }
    refute Bobbin::Operator.release(on_dead, by: "ops"), "no longer running"
  end

  # A worker silent past the threshold may be alive (a stalled host): released by an operator, its job must not run
  # twice. Its next beat takes the job back, as after a recovery, and its outcome finishes the row.
  test "release of a job whose worker was only silent: the worker takes it back and the job runs once" do
    interval = Bobbin.config.heartbeat_interval
    Bobbin.config.heartbeat_interval = 0.2
    gate = GatedJob.gate("silent")
    id = GatedJob.enqueue(gate, "silent")
    worker = Bobbin::Worker.new(threads: 1, polling_interval: 0.05)
    thread = Thread.new { worker.run }
    wait_for("the job to start") { GatedJob.started(gate) == 1 }
    wait_for("a release while its worker looks silent") do
      Bobbin::ProcessRecord.where(id: worker.process_id).update_all(last_heartbeat_at: Time.now.utc - 3600)
      Bobbin::Operator.release(id, by: "ops")
    end
    wait_for("the worker to take its job back") { Bobbin::JobRecord.where(id: id).pick(:state) == "running" }
    GatedJob.open_gate(gate)
    wait_for("the job's outcome") { Bobbin::JobRecord.where(id: id).pick(:state) == "succeeded" }
    assert_equal [ "silent" ], LedgerEntry.pluck(:key), "it ran once"
  ensure
    worker&.stop
    thread&.join(30)
    Bobbin.config.heartbeat_interval = interval if interval
  end

  # Mission Control's "clear queue" is discard_all(state: "ready", queue:): a job that failed between the batch's read
  # and its UPDATE was discarded too, since failed jobs are discardable.
  test "a bulk action's UPDATE re-checks its filter: a waiting job that failed between the read and the write is left alone" do
    ready = insert_jobs(3, queue: "mail")
    discarded = between_read_and_write("UPDATE bobbin_jobs SET state = 'failed' WHERE id = #{ready.first}") do # the job fails
      Bobbin::Operator.discard_all({ state: "ready", queue: "mail" }, by: "ops")
    end
    assert_equal 2, discarded
    assert_equal %w[failed discarded discarded], ready.map { |id| Bobbin::JobRecord.where(id: id).pick(:state) }
  end

  # The discard event listed the batch's ids, read before the UPDATE: a job a worker claimed in between was named as
  # discarded (to an audit subscriber) while it ran on.
  test "the discard event names the jobs discarded, not one a worker claimed between the batch's read and its write" do
    ready = insert_jobs(3, queue: "mail")
    joined = insert_jobs(2, queue: "joined") # an adapter's relation, with a join: both tables have an id
    relation = Bobbin::JobRecord.where(queue: "joined").joins("LEFT JOIN bobbin_processes ON bobbin_processes.id = bobbin_jobs.claimed_by")
    events = []
    ActiveSupport::Notifications.subscribed(->(event) { events << event.payload.slice(:ids, :count, :by) }, "discard.bobbin") do
      claimed = "UPDATE bobbin_jobs SET state = 'running', claimed_by = 1 WHERE id = #{ready.first}" # a worker claims its first job
      assert_equal 2, between_read_and_write(claimed) { Bobbin::Operator.discard_all({ queue: "mail" }, by: "ops") }
      assert_equal 2, Bobbin::Operator.discard_all(relation, by: "ann")
    end
    assert_equal [ { ids: ready.drop(1), count: 2, by: "ops" }, { ids: joined, count: 2, by: "ann" } ], events
    assert_equal %w[running discarded discarded], ready.map { |id| Bobbin::JobRecord.where(id: id).pick(:state) }
    job = Bobbin::JobRecord.find(ready.last)
    assert_equal [ "discarded", "ops" ], [ job.operation, job.operated_by ]
    assert_in_delta Time.now.utc, job.finished_at, 60
    assert_in_delta Time.now.utc, job.operated_at, 60
  end

  # The discard's UPDATE … RETURNING went through a read, which the query cache does not count as a write: in a Rails
  # runner, the states read after a Mission Control discard_all were the cached ones from before it.
  test "a bulk discard under the query cache is seen by the reads after it" do
    ids = insert_jobs(2, **failed_attributes)
    Bobbin::JobRecord.cache do
      assert_equal %w[failed failed], Bobbin::JobRecord.where(id: ids).order(:id).pluck(:state)
      assert_equal 2, Bobbin::Operator.discard_all({ state: "failed" }, by: "ops")
      assert_equal %w[discarded discarded], Bobbin::JobRecord.where(id: ids).order(:id).pluck(:state)
    end
  end

  test "delete finished jobs older than a time, only finished ones; failed ones only when asked, as retention keeps them" do
    old = Time.now.utc - 86_400
    gone = insert_jobs(3, state: "succeeded", finished_at: old) + insert_jobs(1, state: "discarded", finished_at: old)
    failed = insert_jobs(2, **failed_attributes(old))
    kept = insert_jobs(2, state: "succeeded", finished_at: Time.now.utc) + insert_jobs(1)
    assert_equal 4, Bobbin::Operator.delete_finished(before: Time.now.utc - 3600)
    assert_equal (kept + failed).sort, Bobbin::JobRecord.pluck(:id).sort
    refute Bobbin::JobRecord.where(id: gone).exists?
    assert_equal 2, Bobbin::Operator.delete_finished(before: Time.now.utc - 3600, states: %w[failed])
    assert_equal kept.sort, Bobbin::JobRecord.pluck(:id).sort
    assert_raises(ArgumentError) { Bobbin::Operator.delete_finished(before: Time.now.utc, states: %w[running]) }
  end

  test "delete finished jobs refuses a bound that is not a time, and deletes nothing" do
    insert_jobs(2, state: "succeeded", finished_at: Time.now.utc - 86_400)
    [ nil, "yesterday", 3600 ].each do |before|
      error = assert_raises(ArgumentError) { Bobbin::Operator.delete_finished(before: before) }
      assert_includes error.message, "before: must be a Time"
    end
    assert_equal 2, Bobbin::JobRecord.count
  end
end
