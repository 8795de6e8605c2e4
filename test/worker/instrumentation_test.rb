# frozen_string_literal: true

require "test_helper"

class InstrumentationTest < Bobbin::TestCase
  # Collects the payloads of every "*.bobbin" event published while the block runs, by event.
  def events
    seen = Hash.new { |hash, key| hash[key] = [] }
    subscriber = ActiveSupport::Notifications.subscribe(/\.bobbin\z/) { |event| seen[event.name.delete_suffix(".bobbin")] << event.payload }
    yield
    seen
  ensure
    ActiveSupport::Notifications.unsubscribe(subscriber)
  end

  # Runs the block with Bobbin's log subscriber writing to a debug-level log; returns what was logged.
  def logged
    bobbin_log do
      Bobbin::LogSubscriber.attach_to(:bobbin)
      yield
    ensure
      Bobbin::LogSubscriber.detach_from(:bobbin)
    end
  end

  test "a job's life publishes enqueue, start_process, claim, perform, retry, fail and stop_process with their payloads" do
    id = nil
    seen = events do
      id = FlakyJob.enqueue("k", 1)
      FlakyJob.enqueue("never", 99)
      drain(fibers: 2)
    end
    assert_equal [ [ 1, [ "default" ], [ "FlakyJob" ], [ id ] ] ], seen["enqueue"].first(1).map { |p| p.values_at(:count, :queues, :class_names, :ids) }
    assert_equal [ "worker" ], seen["start_process"].map { |p| p[:kind] }
    assert_equal seen["start_process"].map { |p| p[:process_id] }, seen["stop_process"].map { |p| p[:process_id] }
    assert_equal 6, seen["claim"].sum { |p| p[:count] }, "2 + 1 retry of the first + 3 retries of the second"
    assert seen["claim"].all? { |p| p[:duration_ms].is_a?(Float) && p[:duration_ms].positive? }, "the claim's own time: #{seen['claim']}"
    performs = seen["perform"].select { |p| p[:id] == id }
    assert_equal [ [ 1, "ready" ], [ 2, "succeeded" ] ], performs.map { |p| p.values_at(:attempts, :state) }
    assert_equal [ "ArgumentError" ], seen["retry"].select { |p| p[:id] == id }.map { |p| p[:error].class.name }
    assert_equal [ 4 ], seen["fail"].map { |p| p[:attempts] }
  end

  test "retry and discard from Ruby publish discard, leave running jobs alone, and the retried job runs" do
    failed = FlakyJob.enqueue("x", 99)
    drain(fibers: 1)
    running = SleepJob.enqueue(0, "running")
    Bobbin::JobRecord.where(id: running).update_all(state: "running")
    seen = events do
      refute Bobbin.discard(running), "a running job is its worker's"
      refute Bobbin.retry(running)
      assert Bobbin.discard(failed)
      assert Bobbin.retry(failed)
    end
    assert_equal [ [ [ failed ], 1, nil ] ], seen["discard"].map { |p| p.values_at(:ids, :count, :by) }
    assert_equal [ "ready", 0 ], Bobbin::JobRecord.where(id: failed).pick(:state, :attempts)
    drain(fibers: 1)
    assert_equal [ "failed", 4 ], Bobbin::JobRecord.where(id: failed).pick(:state, :attempts), "it ran its attempts again"
    assert_equal 8, Recorder.calls.count("x")
  end

  test "around_perform hooks wrap every job in order, see the job, and an error in a hook fails that job" do
    calls = []
    Bobbin.around_perform { |job, run| calls << "outer #{job.class_name}"; run.call; calls << "outer done" }
    Bobbin.around_perform(->(job, &run) { calls << "inner #{job.id}"; raise ArgumentError, "hook says no" if job.arguments.include?("veto"); run.call })
    id = LedgerJob.enqueue("ok")
    vetoed = LedgerJob.enqueue("veto")
    drain(fibers: 1)
    assert_equal [ "outer LedgerJob", "inner #{id}", "outer done" ], calls.first(3)
    assert_equal [ "ok" ], LedgerEntry.pluck(:key)
    assert_equal [ "failed", "hook says no" ], Bobbin::JobRecord.where(id: vetoed).pick(:state, :last_error_message)
  end

  test "a worker stopped with jobs in flight publishes release: its process id and how many jobs went back to ready" do
    ids = Bobbin.enqueue_all(Array.new(2) { |i| [ SleepJob, [ 60, "long-#{i}" ] ] })
    worker = Bobbin::Worker.new(fibers: 2, shutdown_timeout: 0, polling_interval: 0.05)
    seen = nil
    log = logged do
      seen = events do
        runner = Thread.new { worker.run }
        wait_for("2 jobs started") { Recorder.calls.size == 2 }
        worker.stop
        runner.join
      end
    end
    assert_equal [ { process_id: worker.process_id, count: 2, reason: "stopping" } ], seen["release"]
    assert_equal [ [ "ready", 0 ] ], Bobbin::JobRecord.where(id: ids).distinct.pluck(:state, :attempts)
    assert_equal [ nil, nil ], seen["perform"].map { |payload| payload[:state] }, "an interrupted job has no outcome"
    ids.each { |id| assert_match(/Bobbin Performed SleepJob #{id} from default in [\d.]+ms: interrupted by the shutdown \(\S+\)$/, log) }
    assert_match(/Bobbin Released 2 jobs back to ready/, log)
  end

  # Every release was published and logged as a stopping worker's: a live worker returning the jobs a lost claim left
  # running (or, made quiet, those it had claimed ahead) logged "Released 1 job back to ready (process 7 stopping)"
  # and went on, and an operator looked for a restart that never was (a review).
  test "release says why: a running worker returning a lost claim's jobs is not logged as stopping; a stopping one is" do
    Bobbin.config.set(heartbeat_interval: 0.5, process_alive_threshold: 3)
    gate = GatedJob.gate("release-reason")
    held = GatedJob.enqueue(gate, "held")
    worker = Bobbin::Worker.new(threads: 1, polling_interval: 0.1, shutdown_timeout: 0)
    runner = lost = nil
    log = nil
    seen = events do
      log = logged do
        runner = Thread.new { worker.run }
        wait_for("the gated job running") { GatedJob.started(gate) == 1 }
        lost = SleepJob.enqueue(0, "lost")
        other = Bobbin::Store.open(worker.selection)
        assert_equal [ lost ], other.claim(worker.process_id, 10).map(&:id), "a claim whose answer the worker never hears of"
        other.close
        wait_for("the lost claim returned to ready", timeout: 30) { query { Bobbin::JobRecord.find(lost).state } == "ready" }
        worker.stop
        runner.join
      end
    end
    assert_equal [ { process_id: worker.process_id, count: 1, reason: "lost" }, { process_id: worker.process_id, count: 1, reason: "stopping" } ],
                 seen["release"].first(2), "the lost claim's job, then the gated one the stop interrupted (#{held})"
    assert_match(/Bobbin Released 1 job back to ready \(process #{worker.process_id}: claimed but never started, a claim whose answer was lost\)$/, log)
    assert_match(/Bobbin Released 1 job back to ready \(process #{worker.process_id} stopping\)$/, log)
  ensure
    GatedJob.open_gate(gate) if gate
    runner&.join(30)
  end

  test "recovering a killed worker's job publishes recover: the process, why, how many went back or failed, the blamed job" do
    id = SleepJob.enqueue(60, "in-flight")
    pids = []
    ensure_killed(pids) do
      pid = spawn_bobbin("work", "--fibers", "2", "--polling-interval", "0.05")
      pids << pid
      process_id = wait_for("the job running") { Bobbin::JobRecord.where(id: id, state: "running").pick(:claimed_by) }
      Process.kill(:KILL, pid)
      status = wait_exit(pid)
      seen = events { assert_equal 1, Bobbin::Recovery.process_exited(pid, status, supervisor_id: nil) }
      assert_equal [ { process_id: process_id, reason: "process #{process_id} (pid #{pid}) exited (#{status})", ready: 1, failed: 0, blamed: [ id ] } ],
                   seen["recover"], "the job alone in flight is blamed; it has runs left, so it is ready again"
    end
    assert_equal [ "ready", "Bobbin::ProcessDied", 1 ], Bobbin::JobRecord.where(id: id).pick(:state, :last_error_class, :crashes)
  end

  test "a hook that is not callable is a configuration error" do
    assert_raises(Bobbin::ConfigurationError) { Bobbin::Configuration.new.around_perform(42) }
  end

  test "perform_start comes before the job runs; the log subscriber writes Rails-style lines for Bobbin's events" do
    seen = nil
    ran_before_start = []
    starts = ActiveSupport::Notifications.subscribe("perform_start.bobbin") { ran_before_start << LedgerEntry.exists?(key: "logged") }
    log = logged do
      seen = events do
        LedgerJob.enqueue("logged")
        drain(threads: 1)
        Bobbin.recurring("nightly", schedule: "every day at 3am", class: "LedgerJob", args: [ "n" ])
        Bobbin::RecurringRun.claim("nightly", Time.utc(2026, 11, 24, 3), Bobbin.config.recurring_tasks["nightly"].job_row)
        @discarded = LedgerJob.enqueue("to discard")
        Bobbin::Operator.discard(@discarded, by: "ann")
      end
    end
    assert_equal [ false ], ran_before_start, "perform_start is published before the job's body runs"
    assert_equal seen["perform"].first.slice(:id, :class_name, :queue, :attempts), seen["perform_start"].first
    assert_match(/Bobbin Enqueued 1 job \(LedgerJob\) to default \([\d.]+ms\) ids: \d+/, log)
    assert_match(/Bobbin Performing LedgerJob \d+ from default \(attempt 1\)/, log)
    claimed = log[/Bobbin Claimed 1 job \(([\d.]+)ms\) process: \d+/, 1]
    assert_equal seen["claim"].first[:duration_ms].round(1), claimed&.to_f, "the claim's time, not the publishing's (#{log})"
    assert_match(/Bobbin Performed LedgerJob \d+ from default in [\d.]+ms: succeeded/, log)
    assert_match(/Bobbin Enqueued recurring nightly tick 2026-11-24T03:00:00Z as job \d+/, log)
    assert_includes log, "Bobbin Discarded job #{@discarded} by ann"
  ensure
    ActiveSupport::Notifications.unsubscribe(starts)
  end

  test "an enqueue that fails is logged as failed by the log subscriber, and the caller gets the error" do
    connection = Bobbin::Record.connection
    connection.execute("ALTER TABLE bobbin_jobs RENAME TO bobbin_jobs_away")
    error = nil
    log = logged { error = assert_raises(Bobbin::ConfigurationError) { LedgerJob.enqueue("lost") } }
    assert_match(/tables are missing/, error.message)
    assert_match(/Bobbin Enqueue of 1 job \(LedgerJob\) to default \([\d.]+ms\) failed: ActiveRecord::StatementInvalid/, log)
    refute_match(/Could not log|NoMethodError/, log)
  ensure
    connection.execute("ALTER TABLE bobbin_jobs_away RENAME TO bobbin_jobs")
  end

  test "the log subscriber's lines show control characters in a job's class, its queue and who discarded it escaped, not raw" do
    log = logged do
      id = LedgerJob.enqueue("escaped")
      Bobbin::JobRecord.where(id: id).update_all(class_name: "Ledger\e[31mJob", queue: "q\e]0;pwned\a") # as an outside writer could
      drain(threads: 1)
      Bobbin::Operator.discard(LedgerJob.enqueue("x"), by: "ann\e[2J")
    end
    lines = log.lines.grep(/Bobbin (Performing|Performed|Discarded)/)
    assert_equal 3, lines.size, log
    assert lines.none? { |line| line.match?(/[\e\a]/) }, "raw escapes: #{lines.inspect}"
    assert_match(/Bobbin Performing Ledger\\e\[31mJob \d+ from q\\e\]0;pwned\\a \(attempt 1\)/, log)
    assert_match(/Bobbin Performed Ledger\\e\[31mJob \d+ from q\\e\]0;pwned\\a in [\d.]+ms: failed/, log)
    assert_includes log, "by ann\\e[2J"
  end

  test "a subscriber that raises is logged and reported; the enqueue, the claim and the job's outcome go on as without it" do
    reported = []
    Bobbin.config.on_thread_error = ->(error, context) { reported << [ error.message, context[:task] ] }
    events = %w[enqueue claim perform_start perform retry]
    subscribers = events.map { |event| ActiveSupport::Notifications.subscribe("#{event}.bobbin") { raise "subscriber of #{event} broke" } }
    ok = flaky = nil
    log = bobbin_log(level: Logger::WARN) do
      ok = LedgerJob.enqueue("ok")
      flaky = FlakyJob.enqueue("once", 1)
      drain_within(30, fibers: 2)
    end
    assert_kind_of Integer, ok, "the enqueue returned its job's id (it was stored: raising said it was not)"
    assert_equal 2, Bobbin::JobRecord.count
    assert_equal [ "succeeded", 1 ], Bobbin::JobRecord.where(id: ok).pick(:state, :attempts), "it ran and succeeded: #{log}"
    assert_equal [ "succeeded", 2 ], Bobbin::JobRecord.where(id: flaky).pick(:state, :attempts), "retried once, then succeeded"
    assert_equal %w[ok once], LedgerEntry.pluck(:key).sort, "each ran to its end once"
    events.each do |event|
      assert_includes log, "bobbin: a subscriber to #{event}.bobbin raised RuntimeError: subscriber of #{event} broke"
      assert_includes reported, [ "subscriber of #{event} broke", "bobbin: a subscriber to #{event}.bobbin" ]
    end
  ensure
    subscribers&.each { |subscriber| ActiveSupport::Notifications.unsubscribe(subscriber) }
  end

  test "a job that ends its own thread or fiber publishes perform with the state it is recorded in, not as one a shutdown interrupted" do
    # (Thread.exit in a fiber pool's job ends the pool's own thread: exit on the main thread, and here, a test's thread, the drain.)
    { threads: "thread_exit", fibers: "fiber_kill" }.each do |pool, how|
      exited = ExitJob.enqueue(how)
      killed = ExitJob.enqueue("fiber_kill")
      Bobbin::JobRecord.where(id: killed).update_all(max_attempts: 3) # a retry left
      seen = nil
      log = logged { seen = events { drain_within(30, pool => 1) } }
      performs = seen["perform"].to_h { |payload| [ payload[:id], payload.values_at(:state, :exception) ] }
      assert_equal({ exited => [ "failed", nil ], killed => [ "ready", nil ] }, performs, pool)
      assert_equal [ [ "failed" ], [ "ready" ] ], [ exited, killed ].map { |id| Bobbin::JobRecord.where(id: id).pluck(:state) }
      assert_match(/Bobbin Performed ExitJob #{exited} from default in [\d.]+ms: failed$/, log)
      assert_match(/Bobbin Performed ExitJob #{killed} from default in [\d.]+ms: ready$/, log)
      refute_match(/interrupted by the shutdown/, log)
    end
  end
end
