# frozen_string_literal: true

require "test_helper"
require "support/active_jobs"

class RecurringSchedulerTest < Bobbin::TestCase
  def every_second = Bobbin::Recurring::Task.parse("every_second", { schedule: "every second", class: "TickJob", args: [ "s" ] }, "t")

  def ticks = Bobbin::RecurringRun.where(task_key: "every_second").order(:run_at).pluck(:run_at, :job_id)

  teardown { FileUtils.rm_f(@logs) if @logs && passed? }

  test "two schedulers racing over 3 s enqueue each tick exactly once, with its job" do
    schedulers = Array.new(2) { Bobbin::Recurring::Scheduler.new([ every_second ]) }
    deadline = Time.now + 3
    threads = schedulers.map { |scheduler| Thread.new { (scheduler.pass; sleep(0.05)) while Time.now < deadline } }
    threads.each(&:join)
    runs = ticks
    assert_operator runs.size, :>=, 2
    assert_equal runs.size, runs.map(&:first).uniq.size
    assert runs.each_cons(2).all? { |(a, _), (b, _)| b - a == 1 }, "consecutive seconds, none missed: #{runs.map(&:first)}"
    assert_equal runs.map(&:last).sort, Bobbin::JobRecord.where(class_name: "TickJob").order(:id).pluck(:id)
  end

  # A test that drains with run_until_empty ran the app's recurring tasks too, and now and then ended with a tick's job
  # left behind for the next test (a trial); Solid Queue's scheduler is a process of its own.
  test "a worker draining (run_until_empty) keeps house but enqueues no recurring task; a running one does" do
    Bobbin.config.recurring("every_second", schedule: "every second", class: "TickJob", args: [ "s" ])
    SleepJob.enqueue(2.5) # the drain lasts two ticks or more
    drain(threads: 1)
    assert_empty ticks, "no tick while draining"
    assert_equal 0, Bobbin::JobRecord.where(class_name: "TickJob").count

    worker = Bobbin::Worker.new(threads: 1, polling_interval: 0.05)
    thread = Thread.new { worker.run }
    wait_for("a tick of the running worker") { ticks.any? }
    worker.stop
    thread.join
  end

  test "after downtime a scheduler enqueues the latest missed tick once and skips the older ones" do
    Bobbin::RecurringTask.sync([ every_second ], Time.now.utc - 60) # configured before it
    Bobbin::RecurringRun.create!(task_key: "every_second", run_at: Time.now.utc.floor - 30, created_at: Time.now.utc)
    Bobbin::Recurring::Scheduler.new([ every_second ]).pass
    assert_equal 2, ticks.size
    assert_operator Time.now - ticks.last.first, :<, 2, "the latest missed tick, not the oldest"
    assert_equal 1, Bobbin::JobRecord.where(class_name: "TickJob").count
  end

  # 300 tasks on one tick were 5–13 s late on a busy disk: each tick was its own transaction, a durable commit each
  # (a trial). A pass is now one transaction however many tasks tick, and a tick another scheduler took is left to it.
  test "a pass enqueues the ticks of every task in one transaction; ticks another scheduler took are left to it" do
    now = Time.now.floor
    tasks = Array.new(40) { |i| Bobbin::Recurring::Task.parse("many_#{i}", { schedule: "every second", class: "TickJob", args: [ i ] }, "t") }
    scheduler = Bobbin::Recurring::Scheduler.new(tasks)
    scheduler.pass(now)
    other = Bobbin::Recurring::Scheduler.new(tasks.first(3))
    other.pass(now)
    other.pass(now + 1)
    assert_equal 3, Bobbin::RecurringRun.count, "another scheduler took the next tick of three tasks"
    statements = []
    ActiveSupport::Notifications.subscribed(->(*, payload) { statements << payload[:sql] unless payload[:name] == "SCHEMA" }, "sql.active_record") do
      scheduler.pass(now + 1)
    end
    assert_operator statements.size, :<=, 8, statements.join("\n")
    assert_equal 1, statements.grep(/\A\s*(BEGIN|begin transaction)/i).size, statements.join("\n")
    runs = Bobbin::RecurringRun.where(run_at: now + 1).pluck(:task_key, :job_id).to_h
    assert_equal tasks.map(&:key).sort, runs.keys.sort
    jobs = Bobbin::JobRecord.where(id: runs.values).pluck(:id, :arguments).to_h
    assert_equal 40, jobs.size, "every run has its own job"
    assert_equal tasks.each_index.to_a, runs.sort_by { |key, _| key.delete_prefix("many_").to_i }.map { |_, id| JSON.parse(jobs[id]).first }
  end

  # A scheduler that cannot reach the database misses ticks as a stopped one does: after an 80 s outage a task of
  # every 5 s ran 15 times at once, and "enqueuing only the latest" was logged every second of it for ticks never
  # written (a trial).
  test "after passes the database failed, a scheduler enqueues the latest missed tick once, and says so only then" do
    now = Time.now.floor
    rename = ->(from, to) { Bobbin::Record.with_connection { |c| c.execute("ALTER TABLE #{from} RENAME TO #{to}") } }
    log = bobbin_log do
      scheduler = Bobbin::Recurring::Scheduler.new([ every_second ])
      scheduler.pass(now)
      # A database that went away fails the claim's statement. Renaming the table fails it only while Active Record
      # knows the table's unique index: were the table cached as missing (an earlier test renamed it), insert_all
      # would refuse before any statement (ArgumentError, a task's error). So it learns the table afresh first.
      Bobbin::RecurringRun.reset_column_information
      Bobbin::Record.with_connection { |c| c.schema_cache.indexes("bobbin_recurring_runs") }
      rename.("bobbin_recurring_runs", "bobbin_recurring_runs_away")
      begin
        [ 5, 10 ].each { |later| assert_raises(ActiveRecord::StatementInvalid) { scheduler.pass(now + later) } }
      ensure
        rename.("bobbin_recurring_runs_away", "bobbin_recurring_runs")
        Bobbin::RecurringRun.reset_column_information # what Active Record learned while the table was away
      end
      assert_empty ticks, "nothing was written while the table was away"
      Bobbin.logger.info("-- the database is back")
      scheduler.pass(now + 20)
      scheduler.pass(now + 22)
    end
    assert_equal [ now + 20, now + 21, now + 22 ], ticks.map(&:first), "the latest missed tick, then every tick again"
    before, after = log.split("-- the database is back")
    assert_no_match(/missed ticks/, before)
    assert_equal 1, after.scan(/every_second missed ticks since #{Regexp.escape(now.utc.iso8601)} .*enqueued only the latest \(#{Regexp.escape((now + 20).utc.iso8601)}\)/).size, log
  end

  # A scheduler cut off from the database said every tick since was missed, "enqueued only the latest", when the others
  # had enqueued them all, the latest among them (a trial, one host cut off for 90 s among four).
  test "a scheduler back from a failure does not call ticks missed that another scheduler enqueued" do
    now = Time.now.floor
    rename = ->(from, to) { Bobbin::Record.with_connection { |c| c.execute("ALTER TABLE #{from} RENAME TO #{to}") } }
    log = bobbin_log do
      cut_off, other = Array.new(2) { Bobbin::Recurring::Scheduler.new([ every_second ]) }
      [ cut_off, other ].each { |scheduler| scheduler.pass(now) }
      Bobbin::RecurringRun.reset_column_information
      Bobbin::Record.with_connection { |c| c.schema_cache.indexes("bobbin_recurring_runs") }
      rename.("bobbin_recurring_runs", "bobbin_recurring_runs_away")
      begin
        assert_raises(ActiveRecord::StatementInvalid) { cut_off.pass(now + 5) }
      ensure
        rename.("bobbin_recurring_runs_away", "bobbin_recurring_runs")
        Bobbin::RecurringRun.reset_column_information
      end
      (1..20).each { |second| other.pass(now + second) }
      cut_off.pass(now + 20)
    end
    assert_equal (1..20).map { |second| now + second }, ticks.map(&:first)
    assert_no_match(/missed ticks/, log)
  end

  # Active Job refuses an Integer hash key; the task's own check (JSON) does not.
  def unserializable = Bobbin::Recurring::Task.parse("bad_args", { schedule: "every second", class: "ProviderIdActiveJob", args: [ { 1 => "x" } ] }, "t")

  test "a task that cannot be enqueued is logged with its key and skipped; the tasks after it still tick" do
    now = Time.now.floor
    unloadable = Bobbin::Recurring::Task.parse("unloadable", { schedule: "every second", class: "UnloadableTickJob" }, "t")
    log = Dir.mktmpdir do |dir|
      File.write(File.join(dir, "unloadable_tick_job.rb"), "require 'bobbin_no_such_gem'\n") # its file requires a missing gem
      Object.autoload(:UnloadableTickJob, File.join(dir, "unloadable_tick_job.rb"))
      bobbin_log do
        scheduler = Bobbin::Recurring::Scheduler.new([ unserializable, unloadable, every_second ])
        scheduler.pass(now) && scheduler.pass(now + 3)
      end
    end
    assert_equal [ now + 1, now + 2, now + 3 ], ticks.map(&:first)
    assert_match(/bobbin recurring: task bad_args: ActiveJob::SerializationError/, log)
    assert_match(/bobbin recurring: recurring task unloadable: job class UnloadableTickJob could not be loaded \(LoadError: cannot load such file -- bobbin_no_such_gem\)/, log)
    assert_equal 0, Bobbin::RecurringRun.where(task_key: %w[bad_args unloadable]).count
  ensure
    Object.send(:remove_const, :UnloadableTickJob) if Object.const_defined?(:UnloadableTickJob, false)
  end

  test "a task whose job raises an Active Record error as it is built is logged with its key and skipped; the others tick" do
    now = Time.now.floor
    gone = Bobbin::Recurring::Task.parse("gone_account", { schedule: "every second", class: "GoneAccountTickJob" }, "t")
    log = bobbin_log do
      scheduler = Bobbin::Recurring::Scheduler.new([ gone, every_second ])
      scheduler.pass(now) && scheduler.pass(now + 2)
    end
    assert_equal [ now + 1, now + 2 ], ticks.map(&:first)
    assert_match(/bobbin recurring: task gone_account: ActiveRecord::RecordNotFound: Couldn't find Account/, log)
    assert_equal 0, Bobbin::RecurringRun.where(task_key: "gone_account").count
  end

  # A task's args are stored as JSON with the task (bobbin_recurring_tasks): args JSON cannot write (NaN from Ruby, or
  # `.nan` in recurring.yml) failed that sync, of every task, at every pass, so no task ticked (a review).
  test "a task whose args JSON cannot write is refused, logged with its key; the other tasks are stored and still tick" do
    now = Time.now.floor
    nan = Bobbin::Recurring::Task.parse("nan_args", { schedule: "every second", class: "TickJob", args: [ Float::NAN ] }, "t")
    infinite = Bobbin::Recurring::Task.parse("infinite_args", { schedule: "every second", class: "KeywordActiveJob", args: [ 1, { "status" => Float::INFINITY } ] }, "t")
    log = bobbin_log do
      scheduler = Bobbin::Recurring::Scheduler.new([ nan, infinite, every_second ])
      scheduler.pass(now) && scheduler.pass(now + 3)
    end
    assert_equal [ now + 1, now + 2, now + 3 ], ticks.map(&:first)
    assert_equal [ "every_second" ], Bobbin::RecurringTask.pluck(:key)
    assert_match(/bobbin recurring: recurring task nan_args: args cannot be written as JSON \(NaN not allowed in JSON\); it is not scheduled/, log)
    assert_match(/bobbin recurring: recurring task infinite_args: args cannot be written as JSON \(Infinity not allowed in JSON\); it is not scheduled/, log)
    assert_equal 1, log.scan("nan_args").size, "said once, not at every pass"
    assert_equal 0, Bobbin::RecurringRun.where(task_key: %w[nan_args infinite_args]).count
  end

  # The clock that runs the recurring tasks also lets blocked jobs through once their key has room (here a holder
  # that ended without its outcome promoting the next, as when its duration runs out). The pass fails here on every
  # tick: its tasks' table is missing (a schema that does not match).
  test "recurring.yml args port from Solid Queue: hash keys are symbols, and a last Hash is the job's keyword arguments" do
    yml = { "schedule" => "every second", "class" => "KeywordActiveJob", "args" => [ 42, { "status" => "done", "tags" => { "a" => 1 } } ] }
    scheduler = Bobbin::Recurring::Scheduler.new([ Bobbin::Recurring::Task.parse("keywords", yml, "t") ])
    now = Time.now.floor
    scheduler.pass(now) && scheduler.pass(now + 3)
    drain(threads: 1)
    assert_equal [ [ "succeeded", nil ] ], Bobbin::JobRecord.where(class_name: "KeywordActiveJob").distinct.pluck(:state, :last_error_message)
    assert_equal [ "42 done [:a]" ], LedgerEntry.pluck(:key).map { |key| key.delete_suffix(key[/ \S+\z/]) }.uniq
  end

  # Active Job's set(queue:) gives the queue the app's queue_name_prefix, as Solid Queue's recurring tasks do; a tick's job
  # went to the bare "reports", where no worker of the app's prefixed queues (myapp_*) ever took it (a review).
  test "an Active Job task's queue takes the app's queue_name_prefix, as perform_later's set(queue:) does" do
    ActiveJob::Base.queue_name_prefix = "myapp"
    task = Bobbin::Recurring::Task.parse("prefixed", { schedule: "every second", class: "ProviderIdActiveJob", args: [ "tick" ], queue: "reports", priority: 5 }, "t")
    scheduler, now = Bobbin::Recurring::Scheduler.new([ task ]), Time.now.floor
    scheduler.pass(now) && scheduler.pass(now + 1)
    assert_equal [ [ "myapp_reports", 5 ] ], Bobbin::JobRecord.where(class_name: "ProviderIdActiveJob").pluck(:queue, :priority)
    assert_equal "myapp_reports", ProviderIdActiveJob.set(queue: "reports").perform_later("later").queue_name
    drain(threads: 1, queues: [ "myapp_reports" ])
    assert_equal [ "succeeded" ], Bobbin::JobRecord.where(class_name: "ProviderIdActiveJob").distinct.pluck(:state)
  ensure
    ActiveJob::Base.queue_name_prefix = nil
  end

  test "the clock lets blocked jobs through while the recurring pass keeps failing" do
    ConcurrencyCounter.create_table
    3.times { |i| LimitedJob.enqueue("clock", i) }
    Bobbin::JobRecord.where(concurrency_key: "LimitedJob/clock", state: "ready").limit(1).update_all(state: "succeeded")
    rename = ->(from, to) { Bobbin::Record.with_connection { |c| c.execute("ALTER TABLE #{from} RENAME TO #{to}") } }
    rename.("bobbin_recurring_tasks", "bobbin_recurring_tasks_away")
    clock = nil
    log = bobbin_log do |so_far|
      clock = Bobbin::Maintenance::Clock.start("test", scheduler: Bobbin::Recurring::Scheduler.new([ every_second ]))
      wait_for("the blocked job let through", timeout: 10, seen: so_far) do
        Bobbin::JobRecord.where(concurrency_key: "LimitedJob/clock", state: "blocked").none?
      end
    ensure
      clock&.stop
    end
    assert_match(/bobbin test: clock.*bobbin_recurring_tasks/, log)
  ensure
    rename&.("bobbin_recurring_tasks_away", "bobbin_recurring_tasks")
  end

  def nightly(schedule) = Bobbin::Recurring::Task.parse("nightly", { schedule: schedule, class: "TickJob", args: [ "n" ] }, "t")

  def nightly_runs = Bobbin::RecurringRun.where(task_key: "nightly").order(:run_at).pluck(:run_at)

  # A daily task moved from 3:00 to 4:00 and deployed at 10:00 ran again at once: its 4:00 tick counted as missed since
  # its 3:00 run, though no scheduler was down; a task taken out and put back later ran at once too (a review).
  test "a task whose schedule changed, or that came back to the configuration, starts at its next tick; downtime after is caught up" do
    day = Time.utc(2026, 12, 1)
    scheduler = Bobbin::Recurring::Scheduler.new([ nightly("0 3 * * *") ])
    scheduler.pass(day + 3 * 3600 - 1) && scheduler.pass(day + 3 * 3600)
    assert_equal [ day + 3 * 3600 ], nightly_runs

    Bobbin::Recurring::Scheduler.new([ nightly("0 4 * * *") ]).pass(day + 10 * 3600) # the deploy
    Bobbin::Recurring::Scheduler.new([ nightly("0 4 * * *") ]).pass(day + 10 * 3600 + 5) # its second host
    assert_equal [ day + 3 * 3600 ], nightly_runs, "nothing at the deploy"
    Bobbin::Recurring::Scheduler.new([ nightly("0 4 * * *") ]).pass(day + 28 * 3600 + 60) # after downtime over its next tick
    assert_equal [ day + 3 * 3600, day + 28 * 3600 ], nightly_runs, "the tick missed after it, caught up"

    Bobbin::Recurring::Scheduler.new([ every_second ]).pass(day + 29 * 3600) # taken out (its runs are kept)
    Bobbin::Recurring::Scheduler.new([ nightly("0 4 * * *") ]).pass(day + 60 * 3600) # and back
    assert_equal [ day + 3 * 3600, day + 28 * 3600 ], nightly_runs, "nothing when it came back"
  end

  test "a task that never ran starts at its next tick: nothing is caught up on the first pass" do
    Bobbin::Recurring::Scheduler.new([ every_second ]).pass
    assert_equal 0, Bobbin::JobRecord.count
  end

  test "a scheduler left with no tasks removes the stored ones on its first pass, and queries nothing after" do
    Bobbin::Recurring::Scheduler.new([ every_second ]).pass
    assert_equal [ "every_second" ], Bobbin::RecurringTask.pluck(:key)
    scheduler = Bobbin::Recurring::Scheduler.new([])
    assert_nil scheduler.pass
    assert_empty Bobbin::RecurringTask.all, "the last task taken out of the configuration is no longer listed"
    sent = []
    ActiveSupport::Notifications.subscribed(->(*, payload) { sent << payload[:sql] }, "sql.active_record") { 3.times { scheduler.pass } }
    assert_empty sent
  end

  test "RecurringTask lists the configured tasks with last and next run; a command task's job runs the command" do
    Bobbin.recurring("every_second", schedule: "every second", class: "TickJob", args: [ "s" ], description: "ticks")
    Bobbin.recurring("purge", schedule: "*/5 * * * * *", command: "LedgerEntry.create!(key: 'purged', pid: Process.pid)")
    scheduler = Bobbin::Recurring::Scheduler.new
    scheduler.pass
    wait_for("a tick", timeout: 10) { scheduler.pass && Bobbin::RecurringRun.exists?(task_key: "every_second") }
    listed = Bobbin::RecurringTask.order(:key).map { |t| [ t.key, t.schedule, t.description ] }
    assert_equal [ [ "every_second", "every second", "ticks" ], [ "purge", "*/5 * * * * *", nil ] ], listed
    task = Bobbin::RecurringTask.find_by(key: "every_second")
    assert_equal ticks.last.first, task.last_run_at
    assert_equal ticks.last.last, task.last_job.id
    assert_operator task.next_run_at, :>, Time.now

    Bobbin::RecurringRun.claim("purge", Time.now.utc.floor, Bobbin.config.recurring_tasks["purge"].job_row)
    drain(threads: 2)
    assert LedgerEntry.exists?(key: "purged")
  end

  # A deploy that changes recurring.yml runs old and new supervisors side by side: each sync deleted the rows the
  # other upserted, so on PostgreSQL each waited for a row the other held, and one failed "deadlock detected" (a
  # trial). Here both syncs start while a third session holds rows they both delete, so they meet there.
  test "two schedulers syncing different task lists at once both finish; the table lists one of them" do
    task = ->(key) { Bobbin::Recurring::Task.parse(key, { schedule: "every hour", class: "TickJob" }, "t") }
    Bobbin::RecurringTask.sync(%w[a b c].map(&task))
    held, release = Thread::Queue.new, Thread::Queue.new
    holder = Thread.new do
      Bobbin::Record.connection_pool.with_connection do |connection|
        connection.transaction do
          connection.execute("UPDATE bobbin_recurring_tasks SET updated_at = updated_at WHERE key IN ('a', 'c')")
          held << true
          release.pop
        end
      end
    end
    held.pop
    lists = [ %w[a b], %w[b c] ]
    syncs = lists.map do |keys|
      Thread.new do
        Thread.current.report_on_exception = false
        Bobbin::Record.connection_pool.with_connection { Bobbin::RecurringTask.sync(keys.map(&task)) }
      end
    end
    waiting = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
    if postgres?
      wait_for("both syncs waiting for a lock") { Bobbin::Record.connection.select_value(waiting) >= 2 }
    else
      sleep(0.2) # SQLite: both wait for the write lock
    end
    release << true
    holder.join
    errors = syncs.map do |sync|
      flunk("a sync still waits after 30 s") unless sync.join(30)
      nil
    rescue ActiveRecord::ActiveRecordError => error
      error
    end
    assert_equal [ nil, nil ], errors
    assert_includes lists, Bobbin::RecurringTask.order(:key).pluck(:key)
  end

  test "two supervisors on one database enqueue every tick of an every-second task exactly once", long: true do
    seconds = Integer(ENV.fetch("BOBBIN_RECURRING_SECONDS", 12))
    boot = File.join(TestProcesses::ROOT, "test/support/recurring_boot.rb")
    logs = @logs = Array.new(2) { |index| "tmp/recurring-two-#{Process.pid}-#{index}.log" }
    pids = logs.map { |log| spawn_bobbin("start", "--threads", "2", "--queues", "ticks", "--polling-interval", "0.1", "--require", boot, log: log) }
    # A CI run once saw no tick in 60 s, with nothing to tell why: the supervisors' logs say it next time.
    seen = lambda do
      ([ "this test's connection in a transaction (it would not see new rows): #{Bobbin::Record.connection.transaction_open?}" ] +
        logs.map { |log| "#{log}:\n#{File.read(log).lines.last(30).join}" }).join("\n")
    end
    ensure_killed(pids) do
      wait_for("the first tick", timeout: 60, seen: seen) { Bobbin::RecurringRun.exists? }
      first = Bobbin::RecurringRun.minimum(:run_at)
      wait_for("#{seconds} s of ticks", timeout: seconds + 60, interval: 0.5, seen: seen) { ticks.last&.first.to_i >= first.to_i + seconds }
      pids.each { |pid| Process.kill(:TERM, pid) }
      pids.each { |pid| wait_exit(pid, timeout: 60) }
    end
    runs = ticks
    times = runs.map { |run_at, _| run_at.to_i }
    assert_equal (times.first..times.last).to_a, times, "one run per second, none missed, none twice"
    assert_equal runs.size, Bobbin::JobRecord.where(class_name: "TickJob").count, "one job per tick"
    assert_equal runs.map(&:last).sort, Bobbin::JobRecord.where(class_name: "TickJob").order(:id).pluck(:id)
  end
end

# Its queue is an account's, looked up as the job is made (the Rails guide's queue_as block): the account is gone.
class GoneAccountTickJob < ActiveJob::Base
  queue_as { raise ActiveRecord::RecordNotFound, "Couldn't find Account with 'id'=gone" }

  def perform = nil
end
