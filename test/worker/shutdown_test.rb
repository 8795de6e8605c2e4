# frozen_string_literal: true

require "test_helper"

class ShutdownTest < Bobbin::TestCase
  %w[fibers threads].each do |mode|
    test "TERM with #{mode} in flight: short jobs finish, long ones return to ready, the process exits in time", long: true do
      Bobbin.enqueue_all(Array.new(4) { |i| [ CrashSafeJob, [ 60, "long-#{i}" ] ] } + Array.new(4) { |i| [ CrashSafeJob, [ 0.5, "short-#{i}" ] ] })
      pids = []
      log = File.join(Dir.mktmpdir, "work.log")
      ensure_killed(pids) do
        pids << spawn_bobbin("work", "--#{mode}", "8", "--shutdown-timeout", "2", "--polling-interval", "0.05", log: log)
        # Started, not only claimed: a TERM between the claim and the start hands a job back unrun.
        wait_for("8 jobs started") { StartEntry.count == 8 }
        started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        Process.kill(:TERM, pids.first)
        status = wait_exit(pids.first, timeout: 15)
        elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
        assert status&.success?, "the worker exits cleanly (#{status.inspect})"
        assert_operator elapsed, :<, 10, "exits soon after the 2 s shutdown timeout"
      end
      assert_equal (0..3).map { |i| "short-#{i}" }, LedgerEntry.order(:key).pluck(:key)
      long = Bobbin::JobRecord.where(state: "ready")
      assert_equal 4, long.count
      assert_equal [ 0 ], long.distinct.pluck(:attempts), "an attempt cut short by shutdown is given back"
      assert_equal 0, Bobbin.counts["running"]
      assert_match(/bobbin worker \d+ stopping on TERM: waiting up to 2s \(shutdown_timeout\) for 8 running jobs\n/, File.read(log), "the log says why it stops")
      named = File.read(log)[/interrupting 4 running jobs \((.*)\); they go back to their queue and run again from the start/, 1]
      assert_equal long.order(:id).pluck(:id).map { |id| "CrashSafeJob #{id}" }.sort, named.to_s.split(", ").sort, "the log names the jobs cut short"
    end
  end

  # A closed terminal or a dropped ssh session: Ruby's default HUP ended the worker at once ("crashed: SignalException:
  # SIGHUP"), its running job left to recovery without shutdown_timeout (a review).
  test "HUP is a graceful stop: the running job finishes within the shutdown timeout and the worker exits cleanly" do
    id = CrashSafeJob.enqueue(2, "long")
    pids = []
    log = File.join(Dir.mktmpdir, "work.log")
    ensure_killed(pids) do
      pids << spawn_bobbin("work", "--threads", "2", "--shutdown-timeout", "60", "--polling-interval", "0.05", log: log)
      wait_for("the job to start") { StartEntry.count == 1 }
      Process.kill(:HUP, pids.first)
      assert wait_exit(pids.first, timeout: 60)&.success?, File.read(log)
    end
    assert_equal [ "succeeded", 1 ], Bobbin::JobRecord.where(id: id).pick(:state, :attempts), File.read(log)
    assert_match(/bobbin worker \d+ stopping on HUP: waiting up to 60s \(shutdown_timeout\) for 1 running job/, File.read(log))
  end

  test "QUIT stops at once and still returns unfinished jobs to ready" do
    Bobbin.enqueue_all(Array.new(3) { |i| [ SleepJob, [ 60, "long-#{i}" ] ] })
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("work", "--fibers", "5", "--shutdown-timeout", "30", "--polling-interval", "0.05")
      wait_for("3 jobs running") { Bobbin.counts["running"] == 3 }
      Process.kill(:QUIT, pids.first)
      assert wait_exit(pids.first, timeout: 10)&.success?
    end
    assert_equal 3, Bobbin.counts["ready"]
  end

  # An operator who sent TERM and will not wait out a long shutdown_timeout sends QUIT, or presses Ctrl-C again: both
  # were ignored, the stop waiting its whole timeout all the same.
  [ %i[TERM QUIT], %i[INT INT] ].each do |first, second|
    test "#{second} while a #{first} waits for long jobs stops at once, returning them to ready" do
      Bobbin.enqueue_all(Array.new(3) { |i| [ SleepJob, [ 60, "long-#{i}" ] ] })
      log = stop_twice(%w[work --fibers 5], first, second, begun: "stopping on #{first}", running: 3)
      assert_equal 3, Bobbin.counts["ready"]
      assert_match(/INT again, interrupting the running jobs now/, log) if second == :INT
    end
  end

  # Counted from the TERM, a QUIT more than 7 s into its wait found the stop overdue at once: the worker exited 3 within a
  # second, saying the job had not stopped within 5 s of its interrupt, its cleanup cut short (a review).
  test "QUIT long into a TERM's wait still gives the jobs their 5 s to unwind, and their attempt back", long: true do
    path = File.join(Dir.mktmpdir, "unwound")
    id = SlowUnwindJob.enqueue(path, 2)
    pids = []
    log = File.join(Dir.mktmpdir, "work.log")
    ensure_killed(pids) do
      pids << spawn_bobbin("work", "--threads", "1", "--shutdown-timeout", "60", "--polling-interval", "0.05", log: log)
      wait_for("the job running") { Bobbin.counts["running"] == 1 }
      Process.kill(:TERM, pids.first)
      wait_for("the stop to begin") { File.read(log).include?("stopping on TERM") }
      sleep(Bobbin::Worker::STOP_GRACE + Bobbin::Worker::STOP_OVERDUE + 1)
      Process.kill(:QUIT, pids.first)
      status = wait_exit(pids.first, timeout: 30)
      assert status&.success?, "exits cleanly once the job unwound (#{status.inspect}):\n#{File.read(log)}"
    end
    assert_equal "unwound", File.read(path), "the job's ensure ran to its end"
    assert_equal [ "ready", 0 ], Bobbin::JobRecord.where(id: id).pick(:state, :attempts)
    refute_match(/did not stop within/, File.read(log))
  end

  %w[fibers threads].each do |mode|
    test "QUIT with #{mode} mid-transaction: jobs go back only once stopped, whole transactions, no connection reused", long: true do
      Bobbin.enqueue_all(Array.new(8) { |i| [ TransactionLoopJob, [ "job-#{i}", 1_500 ] ] })
      log = @log = "tmp/quit-#{mode}-#{Process.pid}.log"
      pids = []
      ensure_killed(pids) do
        pids << spawn_bobbin("work", "--#{mode}", "4", "--polling-interval", "0.05", log: log)
        wait_for("the first worker's 4 jobs writing") { LedgerEntry.distinct.count(:pid) == 1 && LedgerEntry.count >= 200 }
        pids << spawn_bobbin("work", "--#{mode}", "8", "--polling-interval", "0.01", log: @second_log = "tmp/quit-#{mode}-second-#{Process.pid}.log")
        wait_for("the second worker writing") { LedgerEntry.distinct.count(:pid) == 2 }
        Process.kill(:QUIT, pids.first)
        assert wait_exit(pids.first, timeout: 5 + Bobbin::Worker::STOP_GRACE)&.success?
        seen = -> { "jobs #{Bobbin.counts.reject { |_, n| n.zero? }}; the second worker's log ends: #{File.read(@second_log).lines.last(5).join}" }
        wait_for("every job finished", timeout: 120, seen: seen) { Bobbin.counts.values_at("ready", "scheduled", "running").sum.zero? }
      end
      failed = Bobbin::JobRecord.where.not(state: "succeeded").pluck(:arguments, :state, :last_error_class, :last_error_message)
      assert_empty failed, "every job succeeded"
      rows = LedgerEntry.order(:id).pluck(:key, :id)
      executions = rows.group_by { |key, _| key.split("/").values_at(0, 2) }.transform_values { |list| list.map(&:last) }
      by_job = executions.group_by { |(job, _), _| job }
      assert_operator by_job.count { |_, runs| runs.size > 1 }, :>=, 1, "the stopped worker's jobs ran again on the other"
      by_job.each do |job, runs|
        next if runs.size < 2

        first, second = runs.map(&:last).sort_by(&:min)
        assert_operator first.max, :<, second.min, "#{job} was handed back while it still wrote (#{runs.size} runs)"
      end
      unwound = StartEntry.pluck(:key).grep(%r{/unwound/})
      assert_operator unwound.size, :>=, 1, "the stopped worker's jobs were stopped midway"
      assert_empty unwound.grep_v(%r{/held\z}), "a job was handed back before it had stopped"
      halves = rows.map(&:first).group_by { |key| key.delete_suffix("/a").delete_suffix("/b") }.reject { |_, pair| pair.size == 2 }
      assert_empty halves, "every transaction committed whole or not at all"
      refute_match(/already a transaction in progress|another command is already in progress/, File.read(log))
    end
  end

  teardown { FileUtils.rm_f([ @log, @second_log ].compact) if passed? }

  # An embedded worker (Worker#run) removed its row as it returned, its job still running on a thread its kill could
  # not end: the job named no live process, and the next recovery anywhere ran it again beside the first run.
  test "an embedded worker whose job outlives its kill keeps its row beating: the job is not run again while it runs", long: true do
    gate = File.join(Dir.mktmpdir, "gate")
    id = DeafJob.enqueue("deaf", gate)
    worker = outlived_stop("deaf", gate)
    Bobbin::Recovery.prune # as another process's housekeeping does
    assert_equal [ "running", worker.process_id ], Bobbin::JobRecord.where(id: id).pick(:state, :claimed_by), "still claimed by its worker"
    assert Bobbin::ProcessRecord.exists?(worker.process_id), "the worker's row stays while the job runs"
    FileUtils.touch(gate)
    wait_for("the worker's row to go once the job's thread ended") { !Bobbin::ProcessRecord.exists?(worker.process_id) }
    assert_equal "ready", Bobbin::JobRecord.find(id).state, "handed back, as a killed thread's job is"
    Bobbin::Worker.new(threads: 1).run_until_empty
    assert_equal 2, StartEntry.where(key: "deaf").count, "run again once, after its first run ended"
  ensure
    FileUtils.touch(gate) if gate # the deaf thread ends, or it would hold this process's exit
  end

  # Its stop's deadline (no new session past it) stayed on the session its row beats on, after the stop: a session
  # lost then was never opened again, the row went silent while the job ran, and recovery would run it a second time.
  test "PostgreSQL: the row beating for a job that outlived its kill beats on after its session is lost", long: true do
    skip_unless_postgres
    Bobbin.config.set(heartbeat_interval: 0.5)
    gate = File.join(Dir.mktmpdir, "gate")
    DeafJob.enqueue("deaf-reconnect", gate)
    worker = outlived_stop("deaf-reconnect", gate)
    sleep(1) # past the stop's deadline
    ours = ActiveRecord::Base.connection_pool.connections.map { |connection| connection.raw_connection.backend_pid }
    query { Bobbin::Record.connection.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND NOT pid = ANY(ARRAY[#{ours.join(', ')}])") }
    lost_at = query { Bobbin::ProcessRecord.now }
    assert wait_for("a beat on a new session", timeout: 20) { query { Bobbin::ProcessRecord.find(worker.process_id).last_heartbeat_at } > lost_at }
    FileUtils.touch(gate)
    assert wait_for("the worker's row to go once the job's thread ended") { !Bobbin::ProcessRecord.exists?(worker.process_id) }
  ensure
    FileUtils.touch(gate) if gate
  end

  # A fiber pool a process runs itself (Worker#run: an app's own process, bin/demo) whose job rescues every exception,
  # its interrupt included: the loop ran that job's fiber for ever, so `run` never returned after its stop, and its
  # row, no longer beating, left the job to be run again beside the first. Its fiber is ended as a thread pool's
  # thread is, and the job goes back to ready.
  test "an embedded fiber pool stops though its job rescues its interrupt: run returns and the job goes back to ready", long: true do
    id = StubbornJob.enqueue("stubborn")
    log = File.join(Dir.mktmpdir, "embedded.log")
    script = <<~RUBY
      worker = Bobbin::Worker.new(fibers: 2, shutdown_timeout: 1, polling_interval: 0.05)
      trap("TERM") { worker.stop }
      worker.run
      puts "run returned"
    RUBY
    pid = spawn_script(script, log: log)
    ensure_killed(pid) do
      wait_for("the job to start") { StartEntry.exists?(key: "stubborn") }
      Process.kill(:TERM, pid)
      status = wait_exit(pid, timeout: 1 + Bobbin::Worker::STOP_GRACE + 30)
      assert status&.success?, "the process ended by itself (#{status.inspect}):\n#{File.read(log)}"
    end
    assert_includes File.read(log), "run returned"
    assert_equal [ "ready", 0 ], Bobbin::JobRecord.where(id: id).pick(:state, :attempts), "handed back, its attempt given back, as a killed thread's job is"
    assert_empty Bobbin::ProcessRecord.where(kind: "worker"), "its row removed"
  end

  # A script that starts a thread pool in a thread (Worker#run) and ends without stopping it: Ruby kills the pool's
  # threads at exit, and each started its replacement (a ThreadError backtrace per thread, "can't alloc thread"), its
  # killed jobs were blamed ("failed … Bobbin::ThreadKilled"), and the worker said "could not deregister: can't alloc thread".
  test "an embedded thread pool its process exits under says so in one line, and blames no job for the exit" do
    ids = Array.new(2) { |i| CrashSafeJob.enqueue(60, "exit-#{i}") }
    log = File.join(Dir.mktmpdir, "embedded.log")
    script = <<~RUBY
      # Ruby kills every thread at once: which unwinds first, the pool's threads or the claim loop (which closes their
      # line, and no thread is replaced after), is up to its scheduling. The loop waits here for the pool's to end.
      Bobbin::Worker::ThreadExecutor.prepend(Module.new do
        def run(&body)
          super do
            body.call
          ensure
            200.times { break if @threads.none?(&:alive?); sleep(0.01) }
          end
        end
      end)
      # Nor is which of the claim loop and the heartbeat ends first: the heartbeat outlives the loop here (a stressed
      # run), whose finish must not be left to a heartbeat that is being killed too.
      Bobbin::Worker::Heartbeat.prepend(Module.new do
        def run
          super
        ensure
          Thread.handle_interrupt(Object => :never) { sleep(0.5) }
        end
      end)
      worker = Bobbin::Worker.new(threads: 3, polling_interval: 0.05)
      Thread.new { worker.run }
      sleep(0.05) until StartEntry.count == 2
    RUBY
    pid = spawn_script(script, log: log)
    ensure_killed(pid) do
      status = wait_exit(pid, timeout: 60)
      assert status&.success?, "the script ended (#{status.inspect}):\n#{File.read(log)}"
    end
    output = File.read(log)
    assert_no_match(/ThreadError|can't alloc thread|ThreadKilled/, output)
    assert_match(/the process exited while it ran .* left for recovery/, output)
    assert_equal [ nil, nil ], Bobbin::JobRecord.where(id: ids).order(:id).pluck(:last_error_class), "no job blamed for the process's exit"
    assert_empty Bobbin::JobRecord.where(id: ids, state: "failed")
  end

  private
    # An embedded worker of one thread, stopped while its DeafJob `key` (open once `gate` exists) runs past its kill.
    def outlived_stop(key, gate)
      worker = Bobbin::Worker.new(threads: 1, shutdown_timeout: 0, polling_interval: 0.05)
      runner = Thread.new { worker.run }
      wait_for("the job to start") { StartEntry.exists?(key: key) }
      worker.stop
      runner.join
      worker
    end
end
