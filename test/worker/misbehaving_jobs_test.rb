# frozen_string_literal: true

require "test_helper"

# A job can call exit, abort, raise Interrupt or Async::Stop, ignore its interrupt, or kill its process:
# it fails (or is recovered) alone; the pool keeps every slot, and the jobs beside it keep their attempts.
class MisbehavingJobsTest < Bobbin::TestCase
  teardown { FileUtils.rm_f(@log) if @log && passed? }

  def state_of(id) = Bobbin::JobRecord.find(id).then { |job| [ job.state, job.last_error_class ] }

  %w[fibers threads].each do |mode|
    test "exit, abort, Interrupt, Thread.exit and a job's own stop exception fail that job; a #{mode} pool of one keeps running" do
      ids = %w[exit abort interrupt stop shutdown thread_exit thread_kill].to_h { |how| [ how, ExitJob.enqueue(how) ] }
      LedgerJob.enqueue("after")
      pids = []
      ensure_killed(pids) do
        pids << spawn_bobbin("work", "--#{mode}", "1", "--drain", "--polling-interval", "0.05")
        assert wait_exit(pids.first, timeout: 60)&.success?, "the worker drains everything and exits cleanly"
      end
      assert_equal [ "failed", "SystemExit" ], state_of(ids["exit"])
      assert_equal [ "failed", "SystemExit" ], state_of(ids["abort"])
      assert_equal [ "failed", "Interrupt" ], state_of(ids["interrupt"])
      assert_equal [ "failed", "Async::Cancel" ], state_of(ids["stop"])
      assert_equal [ "failed", "Bobbin::Worker::Shutdown" ], state_of(ids["shutdown"])
      # A fiber pool's loop runs on the process's main thread, where Thread.exit is exit; a pool thread ends.
      ended = mode == "fibers" ? "SystemExit" : "Bobbin::ThreadKilled"
      assert_equal [ [ "failed", ended ] ] * 2, [ state_of(ids["thread_exit"]), state_of(ids["thread_kill"]) ]
      assert LedgerEntry.exists?(key: "after"), "the job after them ran on the same single slot"
    end

    test "a #{mode} job that ignores its interrupt is not handed back while it runs, and the process still exits", long: true do
      id = StubbornJob.enqueue("stubborn")
      log = @log = "tmp/stubborn-#{mode}-#{Process.pid}.log"
      pids = []
      seen = []
      ensure_killed(pids) do
        pids << spawn_bobbin("work", "--#{mode}", "2", "--shutdown-timeout", "0.5", "--polling-interval", "0.05", log: log)
        wait_for("the stubborn job to start") { StartEntry.exists?(key: "stubborn") }
        Process.kill(:TERM, pids.first)
        termed = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        status = nil
        until (status = wait_exit(pids.first, timeout: 0.05)) || seen.size > 600
          seen << [ Bobbin::JobRecord.find(id).state, Process.clock_gettime(Process::CLOCK_MONOTONIC) - termed ]
        end
        assert status, "the process exits within shutdown_timeout + the stop grace (#{Bobbin::Worker::STOP_GRACE}s)"
        ready_at = seen.find { |state, _| state == "ready" }&.last
        if mode == "threads"
          assert status.success?
          assert_operator ready_at || Float::INFINITY, :>=, 0.5 + Bobbin::Worker::STOP_GRACE,
                          "ready only once its thread was killed, after the timeout and the grace"
        else
          assert_equal Bobbin::Worker::EXIT_STUCK, status.exitstatus
          assert_nil ready_at, "a fiber cannot be killed for certain: never ready while its process was alive"
        end
      end
      Bobbin::Recovery.prune
      assert_equal "ready", Bobbin::JobRecord.find(id).state, "once its process is gone it is recovered"
      assert_match(/did not stop within|handed back to run again/, File.read(log))
    end

    test "a #{mode} job that forks gets its child's status; the child never touches the worker's own sessions" do
      log = @log = "tmp/forking-#{mode}-#{Process.pid}.log"
      keys = Array.new(3) { |i| [ "block-#{i}", "bare-#{i}" ] }.flatten + [ "raising-0" ]
      keys.each { |key| ForkingJob.enqueue(key[/\A[a-z]+/], key) }
      pids = []
      ensure_killed(pids) do
        pids << spawn_bobbin("work", "--#{mode}", "2", "--drain", "--polling-interval", "0.05", log: log)
        assert wait_exit(pids.first, timeout: 60)&.success?, "the worker drains everything and exits cleanly"
      end
      assert_equal keys.map { |key| "#{key}:#{key.start_with?('raising') ? 1 : 0}" }.sort, LedgerEntry.pluck(:key).sort,
                   "every child exited with status 0, but the one whose code raised: 1"
      assert_equal [ "succeeded" ], Bobbin::JobRecord.distinct.pluck(:state)
      output = File.read(log)
      assert_equal 4, output.scan(/a process forked by ForkingJob \d+ \(pid \d+\) returned into the worker; it exits/).size
      refute_match(/unavailable|notifications lost|closed the connection/, output, "no fork cost the worker a session")
    end
  end

  %w[fibers threads].each do |mode|
    test "an app's subscriber to retry.bobbin that raises leaves that job to its retry, and a #{mode} pool of one goes on" do
      subscriber = ActiveSupport::Notifications.subscribe("retry.bobbin") { raise "the app's subscriber broke" }
      id = FlakyJob.enqueue("flaky-#{mode}", 1)
      LedgerJob.enqueue("after-#{mode}")
      log = bobbin_log { drain_within(mode.to_sym => 1) }
      assert_equal [ "succeeded", 2 ], Bobbin::JobRecord.where(id: id).pick(:state, :attempts), "retried, as without the subscriber"
      assert LedgerEntry.exists?(key: "after-#{mode}"), "the job after it ran on the same single slot"
      assert_match(/a subscriber to retry.bobbin raised RuntimeError: the app's subscriber broke/, log)
    ensure
      ActiveSupport::Notifications.unsubscribe(subscriber)
    end
  end

  %w[fibers threads].each do |mode|
    # Before subscribers' errors were kept from Bobbin, the job stayed running with no outcome and its slot was gone.
    test "an app's subscriber to fail.bobbin that raises on a job that ended its own #{mode == 'fibers' ? 'fiber' : 'thread'}: the job fails as without it; a #{mode} pool of one goes on" do
      subscriber = ActiveSupport::Notifications.subscribe("fail.bobbin") { raise "the app's subscriber broke" }
      id = ExitJob.enqueue(mode == "fibers" ? "fiber_kill" : "thread_kill")
      LedgerJob.enqueue("after-#{mode}")
      log = bobbin_log { drain_within(30, mode.to_sym => 1) }
      assert_equal [ "failed", "Bobbin::ThreadKilled" ], state_of(id)
      assert LedgerEntry.exists?(key: "after-#{mode}"), "the job after it ran on the same single slot"
      assert_match(/a subscriber to fail\.bobbin raised RuntimeError: the app's subscriber broke/, log)
    ensure
      ActiveSupport::Notifications.unsubscribe(subscriber)
    end
  end

  test "a backoff a delay cannot be worked out from is refused where it is declared" do
    [ "fast", nil, -5, Float::INFINITY ].each do |backoff|
      error = assert_raises(Bobbin::ConfigurationError) { Class.new(FlakyJob) { bobbin_options backoff: backoff } }
      assert_match(/backoff must be a finite number of seconds ≥ 0 .*got #{Regexp.escape(backoff.inspect)}/, error.message)
    end
    assert_equal 0.5, Class.new(FlakyJob) { bobbin_options backoff: 0.5 }.bobbin_options[:backoff]
  end

  # It stayed running with no outcome, and its slot's loop ended with it: a pool of one claimed the next job and never
  # ran it, while heartbeating (a review). In a thread, the thread ends: joining it aborts Ruby 3.4 ([BUG] thread_join).
  %w[fibers threads].each do |mode|
    test "a job that kills its own fiber fails alone, and a #{mode} pool of one goes on" do
      ids = Array.new(2) { ExitJob.enqueue("fiber_kill") }
      LedgerJob.enqueue("after-fiber-kill-#{mode}")
      # To a pipe, as `bobbin work`'s stdout often is: a killed fiber that logs through the fiber scheduler waits, and its
      # kill ends it there, before its outcome was handed on (a trial: the row stayed running). A file never waits.
      reader, writer = IO.pipe
      drained = Thread.new { reader.read }
      logger = Bobbin.config.logger
      Bobbin.config.logger = Logger.new(writer)
      begin
        drain_within(mode.to_sym => 1)
      ensure
        Bobbin.config.logger = logger
        writer.close
      end
      assert_match(/ExitJob #{ids.first} failed after 1 attempt/, drained.value)
      assert_equal [ [ "failed", "Bobbin::ThreadKilled" ] ] * 2, ids.map { |id| state_of(id) }
      assert_match(/ended its own thread or fiber/, Bobbin::JobRecord.find(ids.first).last_error_message)
      assert LedgerEntry.exists?(key: "after-fiber-kill-#{mode}"), "the job after them ran on the same single slot"
      assert_equal [ "failed", "succeeded" ], Bobbin::JobRecord.distinct.order(:state).pluck(:state), "nothing left running or claimed"
    end
  end

  # The loop runs until every task has ended: the worker logged "stopped" and never exited (a review). A job's outcome
  # waits for the tasks it started, so one whose task never ends runs until a stop interrupts it, and goes back to ready.
  test "a fiber job that leaves an Async task of its own running does not keep its worker from exiting" do
    id = ChildTaskJob.enqueue
    after = LedgerJob.enqueue("after")
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("work", "--fibers", "2", "--polling-interval", "0.05", "--shutdown-timeout", "1")
      wait_for("the job beside it to run") { Bobbin::JobRecord.where(id: after, state: "succeeded").exists? }
      assert_equal [ "running", nil ], state_of(id), "the job runs while its task does"
      Process.kill(:TERM, pids.first)
      assert wait_exit(pids.first, timeout: 15)&.success?, "the worker exits cleanly on TERM"
    end
    assert_equal 0, Bobbin::ProcessRecord.count, "its row is gone"
    assert_equal "ready", state_of(id).first, "interrupted, it runs again"
    Bobbin::JobRecord.delete_all
    ChildTaskJob.enqueue(true)
    drain_within(15, fibers: 1)
    assert_equal [ "succeeded" ], Bobbin::JobRecord.distinct.pluck(:state), "a transient task is not waited for, and a drain returns"
  end

  test "a thread-lane job that ends its thread fails alone; the lane keeps its thread" do
    ids = %w[thread_exit thread_kill thread_exit].map { |how| LaneExitJob.enqueue(how) }
    LedgerJob.enqueue("after")
    drain_within(fibers: 2, thread_lane: 1)
    assert_equal [ [ "failed", "Bobbin::ThreadKilled" ] ] * 3, ids.map { |id| state_of(id) }
    assert_match(/\ALaneExitJob \d+ ended its own thread or fiber \(Thread.exit, Thread#kill or Fiber#kill\)\z/, Bobbin::JobRecord.find(ids.first).last_error_message)
    assert LedgerEntry.exists?(key: "after")
  end

  # Each thread that took a dead one's place held it (the block it ran closed over the dead thread), so a long-running
  # threads pool kept every thread a job had ended, with its stack and its Active Record lease: RSS grew ~2 KB a job,
  # for good (a soak of 12,000 such jobs: 57 → 118 MB).
  test "threads that jobs ended are let go: a threads pool that replaced 40 of them holds on to none" do
    worker = Bobbin::Worker.new(threads: 1, polling_interval: 0.05)
    ids = Array.new(40) { ExitJob.enqueue("thread_exit") }
    runner = Thread.new { worker.run }
    wait_for("the jobs to fail", timeout: 60) { Bobbin::JobRecord.where(id: ids, state: "failed").count == ids.size }
    3.times { GC.start }
    dead = ObjectSpace.each_object(Thread).count { |thread| thread.name == "bobbin-job-0" && !thread.alive? }
    assert_operator dead, :<, 10, "dead pool threads still held after 40 were replaced"
  ensure
    worker&.stop(timeout: 0)
    runner&.join(30)
  end

  # Leaves a watchdog thread behind that raises into the thread the job ran on once the job is over and that thread
  # waits for its next one, then records KEY-raised.
  class WatchdogJob
    include Bobbin::Job
    bobbin_options retries: 0

    def perform(key)
      pool_thread = Thread.current
      Thread.new do
        sleep(0.01) until LedgerEntry.exists?(key: key) && pool_thread.stop? && pool_thread.backtrace.to_a.first.to_s.include?("Queue#pop")
        pool_thread.raise(RuntimeError, "deadline passed")
        LedgerEntry.create!(key: "#{key}-raised", pid: Process.pid)
      end
      LedgerEntry.create!(key: key, pid: Process.pid)
    end
  end

  # The thread ended, never replaced: a pool of one claimed the next job and left it running for good while it heartbeat
  # on, and the worker's stop raised the watchdog's error (a review).
  test "an exception a job's leftover thread raises into its idle pool thread is logged; a threads pool of one goes on" do
    worker = Bobbin::Worker.new(threads: 1, polling_interval: 0.05)
    runner = nil
    log = bobbin_log do
      runner = Thread.new { worker.run }
      WatchdogJob.enqueue("watched")
      wait_for("the watchdog to raise into the idle pool thread") { LedgerEntry.exists?(key: "watched-raised") }
      after = LedgerJob.enqueue("after")
      wait_for("the job after it to run on the same thread") { Bobbin::JobRecord.find(after).state == "succeeded" }
      worker.stop(timeout: 10)
      assert runner.join(30), "the worker stopped"
      assert_nil runner.value, "its stop raised nothing"
    end
    assert_match(/bobbin: bobbin-job-0 got RuntimeError \(deadline passed\) while it waited for a job/, log)
    assert_equal [ "succeeded" ], Bobbin::JobRecord.distinct.pluck(:state)
  ensure
    worker&.stop(timeout: 0)
    runner&.join(30) rescue nil # before the fix, its join raised the watchdog's error
  end

  test "a job that kills its process is isolated and failed; the 40 jobs beside it keep their attempts and finish", long: true do
    poison = PoisonJob.enqueue("poison")
    Bobbin.enqueue_all(Array.new(40) { |i| [ ChaosJob, [ 0.5, "innocent-#{i}" ] ] })
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("start", "--fibers", "20", "--processes", "2", "--polling-interval", "0.05")
      wait_for("the poison job to fail and the others to finish", timeout: 120, interval: 0.2) do
        Bobbin::JobRecord.find(poison).state == "failed" && LedgerEntry.count == 40
      end
      Process.kill(:TERM, pids.first)
      assert wait_exit(pids.first, timeout: 30)&.success?
    end
    assert_equal [ "failed", "Bobbin::ProcessDied" ], state_of(poison)
    innocents = Bobbin::JobRecord.where(class_name: "ChaosJob")
    assert_equal [ "succeeded" ], innocents.distinct.pluck(:state)
    assert_equal [ 1 ], innocents.distinct.pluck(:attempts), "no innocent job burnt an attempt on the poison job's crashes"
  end

  # A trial: handed back as at a stop, the jobs in flight never counted the crash, and the job and the 50 beside it
  # crashed the worker at each restart, for good, none of them ever run. Counted, the blame finds the job (above).
  # (A thread pool's claim loop runs on the thread the error is raised into: it stops as when it fails, its jobs given
  # shutdown_timeout, and they go back counting the crash too. A long job that did it was handed back and run again, for
  # good, every shutdown_timeout.)
  %w[fibers threads].each do |pool|
    test "#{pool}: an error a job's thread raises into the worker's loop (Thread.abort_on_exception) is a crash the jobs in flight count" do
      innocents = Array.new(2) { |i| CrashSafeJob.enqueue(30, "beside-#{i}") }
      poison = AbortingThreadJob.enqueue(2)
      log = "tmp/aborting-thread-#{Process.pid}.log"
      pids = []
      ensure_killed(pids) do
        pids << spawn_bobbin("work", "--#{pool}", "5", "--polling-interval", "0.05", "--shutdown-timeout", "1", log: log)
        status = wait_exit(pids.first, timeout: 60)
        refute status.nil? || status.success?, "the worker crashed (#{status.inspect}): #{File.read(log)}"
      end
      assert_match(/crashed \(RuntimeError: boom from the job's thread\) while this job was running|worker \d+ \(pid \d+\) crashed \(RuntimeError: boom from the job's thread\)/, File.read(log))
      assert_equal [ [ "ready", 0, 1 ] ] * 3, Bobbin::JobRecord.where(id: [ poison, *innocents ]).pluck(:state, :attempts, :crashes), File.read(log)
      refute Bobbin::ProcessRecord.exists?, "the worker deregistered"
    ensure
      FileUtils.rm_f(log)
    end
  end

  test "more fibers than the machine can map fail at boot with the limit, not a silent hang" do
    limit = File.read("/proc/sys/vm/max_map_count").to_i
    error = assert_raises(Bobbin::ConfigurationError) { Bobbin::Worker.new(fibers: limit) }
    assert_match(/vm.max_map_count is #{limit}/, error.message)
    near = (limit - File.foreach("/proc/self/maps").count) / Bobbin::Worker::FiberExecutor::MAPPINGS_PER_FIBER - 100
    assert_raises(Bobbin::ConfigurationError, "just under the raw limit, where creating fibers hangs") { Bobbin::Worker.new(fibers: near) }
  end

  test "a fiber job that stops yielding while the claim loop waits inside a claim still cannot block TERM", long: true do
    skip_unless_postgres # SQLite's calls never yield to the loop
    go = File.expand_path("tmp/spin-late-go-#{Process.pid}") # the job spins once this exists: after the claim has parked
    id = SpinJob.enqueue("spin-late", go)
    log = @log = "tmp/spin-late-#{Process.pid}.log"
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("work", "--fibers", "2", "--shutdown-timeout", "0.5", log: log)
      wait_for("the job to start") { StartEntry.exists?(key: "spin-late") }
      Bobbin::JobRecord.transaction do
        # The claim statement reads bobbin_pauses: it waits on this lock, its fiber parked holding the claimer's store,
        # when the job (asleep until then) takes the loop for good.
        Bobbin::JobRecord.connection.execute("LOCK TABLE bobbin_pauses IN ACCESS EXCLUSIVE MODE")
        Thread.new { NoopJob.enqueue("wakes the claim loop") }.join # committed, so its announcement goes out
        # A backend that waits for the lock, other than the listener reading the paused queues as it connects. Told
        # by pg_locks, not by pg_stat_activity's query: a prepared claim waits already at Bind, where PostgreSQL
        # still shows the session's previous statement (the pacer's look for due jobs, when it was the last one).
        waiting = <<~SQL
          SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
          WHERE NOT l.granted AND l.relation = 'bobbin_pauses'::regclass AND a.query NOT LIKE 'SELECT queue FROM bobbin_pauses%'
        SQL
        wait_for("the claim to wait on the lock") { Bobbin::JobRecord.connection.select_value(waiting).positive? }
        FileUtils.touch(go)
        sleep(0.5) # the job, polling for the file every 10 ms while the claim's fiber waits, spins now
        Process.kill(:TERM, pids.first)
        status = wait_exit(pids.first, timeout: 0.5 + Bobbin::Worker::STOP_GRACE + Bobbin::Worker::STOP_OVERDUE + 15)
        assert status, "the process exits although its claim loop is parked inside a claim"
        assert_equal Bobbin::Worker::EXIT_STUCK, status.exitstatus
      end
    end
    Bobbin::Recovery.prune
    assert_equal "ready", Bobbin::JobRecord.find(id).state, "once its process is gone it is recovered"
  ensure
    FileUtils.rm_f(go) if go
  end

  # The log had no "stopping on TERM" line (the stop logs on the loop the job holds), then said the job "did not stop
  # within 5s of their interrupt", though no interrupt could reach it: it is said from the heartbeat thread, naming the job.
  test "a fiber job that never yields cannot block TERM: the process exits with its stop overdue, the log says why, and the job is recovered", long: true do
    id = SpinJob.enqueue("spin")
    log = @log = "tmp/spin-#{Process.pid}.log"
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("work", "--fibers", "2", "--shutdown-timeout", "0.5", "--polling-interval", "0.05", log: log)
      wait_for("the spinning job to start") { StartEntry.exists?(key: "spin") }
      Process.kill(:TERM, pids.first)
      status = wait_exit(pids.first, timeout: 0.5 + Bobbin::Worker::STOP_GRACE + Bobbin::Worker::STOP_OVERDUE + 15)
      assert status, "the process exits although its event loop never runs again"
      assert_equal Bobbin::Worker::EXIT_STUCK, status.exitstatus
      assert_equal "running", Bobbin::JobRecord.find(id).state, "not handed back while it still ran"
    end
    Bobbin::Recovery.prune
    assert_equal "ready", Bobbin::JobRecord.find(id).state, "once its process is gone it is recovered"
    text = File.read(log)
    assert_match(/bobbin worker \d+ stopping on TERM: SpinJob #{id} \(for [\d.]+s\) holds the event loop, where the stop runs; it waits for the job to let go/, text)
    assert_match(/jobs #{id} were never interrupted: SpinJob #{id} \(for [\d.]+s\) held the event loop from the stop \(TERM\) on, so neither the stop nor an interrupt could run there; exiting so they can be recovered/, text)
    refute_match(/of their interrupt/, text)
  end

  # Off the process's main thread (async mode's worker threads, a worker an app runs in a thread of its own) a fiber job's
  # Thread.exit ends the thread running the pool's loop, and nothing of the worker's after the job's fiber ran: its
  # heartbeat went on for a worker that ran nothing, its row, pruned as dead, registered again beside its replacement.
  test "a fiber job's Thread.exit on a worker thread stops that worker: its outcomes are written and its row goes, for good" do
    Bobbin.config.set(heartbeat_interval: 0.2, process_alive_threshold: 30)
    other = CrashSafeJob.enqueue(30, "beside")
    worker = Bobbin::Worker.new(fibers: 2, polling_interval: 0.05)
    thread = Thread.new { worker.run }
    wait_for("the other job to start") { StartEntry.exists?(key: "beside") }
    id = ExitJob.enqueue("thread_exit")
    assert thread.join(30), "the worker's thread ended with the job's Thread.exit"
    wait_for("the worker's row to go") { !Bobbin::ProcessRecord.exists?(id: worker.process_id) }
    sleep(1) # five heartbeat intervals: a heartbeat still going would register the row again
    assert_not Bobbin::ProcessRecord.exists?(id: worker.process_id), "no heartbeat goes on for the ended worker"
    assert_equal [ "failed", "Bobbin::ThreadKilled" ], state_of(id)
    # The job beside it was cancelled as the thread's event loop closed (a thread kill cannot be kept to one fiber): it
    # did nothing wrong, and goes back to ready with its attempt given back, as at a shutdown. It was recorded failed with
    # Async::Cancel, for good with no retries left.
    assert_equal [ "ready", nil, 0, 0 ], Bobbin::JobRecord.find(other).then { |job| [ job.state, job.last_error_class, job.attempts, job.crashes ] }
  ensure
    thread&.kill
  end

  # An exception raised into a fiber pool's thread from outside (a job's watchdog thread) ends its loop past the claim
  # loop's rescue: the heartbeat then finished for it, blaming a job's Thread.exit, after the crash was logged as such.
  test "a worker thread ended by an exception raised into it is not said to be a job's Thread.exit" do
    Bobbin.config.set(heartbeat_interval: 0.2, process_alive_threshold: 30)
    other = CrashSafeJob.enqueue(30, "beside-raised")
    worker = Bobbin::Worker.new(fibers: 2, polling_interval: 0.05)
    log = bobbin_log do |so_far|
      thread = Thread.new { worker.run }
      thread.report_on_exception = false
      wait_for("the other job to start") { StartEntry.exists?(key: "beside-raised") }
      WatchdogRaisingJob.enqueue("RuntimeError")
      assert_raises(RuntimeError) { thread.join(30) }
      wait_for("the heartbeat to finish for the ended loop") { so_far.call.include?("the thread running its loop ended") }
      # Inside the log's block: CI 159 (a busy machine) timed out here, and what the worker said meanwhile was lost.
      wait_for("the worker's row to go", timeout: 60, seen: so_far) { !Bobbin::ProcessRecord.exists?(id: worker.process_id) }
    ensure
      thread&.kill
    end
    assert_match(/bobbin worker #{worker.process_id}: the thread running its loop ended by RuntimeError: the watchdog's RuntimeError; stopping, the jobs it ran go back to ready/, log)
    refute_match(/Thread\.exit/, log)
    assert_equal [ "ready", 0 ], Bobbin::JobRecord.where(id: other).pick(:state, :attempts), "the job beside it went back, its attempt given back: #{Bobbin::JobRecord.where(id: other).pick(:last_error_class, :last_error_message, :crashes)}"
  end

  # Ends its thread once the worker's claim loop waits on the lock the test holds on bobbin_jobs: its statement in flight.
  class ExitMidClaimJob
    include Bobbin::Job
    bobbin_options retries: 0

    WAITING = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND application_name = '#{TestDatabase.application_name}' " \
              "AND (query LIKE '#{TestDatabase::CLAIM_QUERY}' OR query LIKE '#{TestDatabase::NEXT_DUE_QUERY}')"

    def perform(key)
      StartEntry.create!(key: key)
      sleep(0.02) until ActiveRecord::Base.connection.select_value(WAITING).positive?
      LedgerEntry.create!(key: key, pid: Process.pid)
      Thread.exit
    end
  end

  # The worker's end, run on the dying thread, released its jobs on the claimer's session, where the cut-short claim
  # was still in flight: "another command is already in progress", and the row stayed for good (the project's CI).
  test "PostgreSQL: a fiber job's Thread.exit as its worker's claim waits on a lock: the worker's row still goes" do
    skip_unless_postgres
    Bobbin.config.set(heartbeat_interval: 20, process_alive_threshold: 60) # lock_wait 5 s: the claim waits out the test's lock
    worker = Bobbin::Worker.new(fibers: 2, polling_interval: 0.05, notified_polling_interval: 0.05)
    thread = Thread.new { worker.run }
    id = ExitMidClaimJob.enqueue("mid-claim")
    wait_for("the job to start") { StartEntry.exists?(key: "mid-claim") }
    holder = PG.connect(TestDatabase.url)
    holder.exec("BEGIN; LOCK TABLE bobbin_jobs IN ACCESS EXCLUSIVE MODE")
    wait_for("the job to see the claim wait") { LedgerEntry.exists?(key: "mid-claim") }
    holder.exec("COMMIT")
    assert thread.join(30), "the worker's thread ended with the job's Thread.exit"
    wait_for("the worker's row to go") { !Bobbin::ProcessRecord.exists?(id: worker.process_id) }
    assert_equal [ "failed", "Bobbin::ThreadKilled" ], state_of(id)
  ensure
    holder&.close
    thread&.kill
  end

  test "bobbin start: a job that ignores its interrupt is back in the queue as its worker exits, not only at the next start", long: true do
    id = StubbornJob.enqueue("stubborn-supervised")
    LedgerJob.enqueue("beside")
    log = @log = "tmp/stubborn-supervised-#{Process.pid}.log"
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("start", "--fibers", "2", "--shutdown-timeout", "0.5", "--polling-interval", "0.05", log: log)
      wait_for("the stubborn job to start") { StartEntry.exists?(key: "stubborn-supervised") && LedgerEntry.exists?(key: "beside") }
      Process.kill(:TERM, pids.first)
      status = wait_exit(pids.first, timeout: 0.5 + Bobbin::Supervisor::KILL_GRACE + 20)
      assert status&.success?, "the supervisor exits cleanly:\n#{File.read(log)}"
    end
    assert_equal [ "ready", 1, "Bobbin::ProcessDied" ], Bobbin::JobRecord.find(id).then { |job| [ job.state, job.crashes, job.last_error_class ] },
                 "its supervisor returned it as the worker exited:\n#{File.read(log)}"
    assert_match(/exited \(pid \d+ exit #{Bobbin::Worker::EXIT_STUCK}\)/, Bobbin::JobRecord.find(id).last_error_message)
    assert_equal 0, Bobbin::ProcessRecord.count, "no row left behind"
  end

  test "bobbin start --mode async: a fiber job that ignores its interrupt does not keep the process from exiting", long: true do
    id = StubbornJob.enqueue("stubborn-async")
    log = @log = "tmp/stubborn-async-#{Process.pid}.log"
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("start", "--mode", "async", "--fibers", "2", "--shutdown-timeout", "0.5", "--polling-interval", "0.05", log: log)
      wait_for("the stubborn job to start") { StartEntry.exists?(key: "stubborn-async") }
      Process.kill(:TERM, pids.first)
      status = wait_exit(pids.first, timeout: 0.5 + Bobbin::Supervisor::KILL_GRACE + 20)
      assert status, "the process exits after shutdown_timeout + the kill grace:\n#{File.read(log)}"
      assert_equal Bobbin::Worker::EXIT_STUCK, status.exitstatus
    end
    assert_equal [ "ready", 1, "Bobbin::ProcessDied" ], Bobbin::JobRecord.find(id).then { |job| [ job.state, job.crashes, job.last_error_class ] },
                 "its job went back as the process left (the crash counts against it)"
    assert_equal 0, Bobbin::ProcessRecord.count, "no row left behind"
    assert_match(/worker fibers-2#0 did not stop within shutdown_timeout \+ \d+s; exiting without them/, File.read(log))
  end
end
