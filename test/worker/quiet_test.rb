# frozen_string_literal: true

require "test_helper"

# TSTP (Sidekiq's quiet): before a deploy, a worker stops taking jobs, lets its running ones finish and waits for
# TERM, so the stop interrupts nothing. Real processes and signals; "nothing started" is shown by a job enqueued
# after the signal that a quiet worker with free slots, polling every 50 ms, leaves to a worker started later.
class QuietTest < Bobbin::TestCase
  QUIETED = "quiet: claiming no more jobs"

  teardown do
    FileUtils.rm_f(@log) if @log && passed?
    File.unlink(@config.path) if @config && File.exist?(@config.path)
  end

  %w[threads fibers].each do |mode|
    test "TSTP with #{mode}: the running jobs finish, no job starts after it, TERM then stops the worker" do
      gate = GatedJob.gate("quiet-#{mode}")
      Bobbin.enqueue_all(Array.new(2) { |i| [ GatedJob, [ gate, "held-#{i}" ] ] })
      log = @log = "tmp/quiet-#{mode}-#{Process.pid}.log"
      pids = []
      ensure_killed(pids) do
        pids << spawn_bobbin("work", "--#{mode}", "4", "--polling-interval", "0.05", log: log)
        wait_for("both jobs started") { GatedJob.started(gate) == 2 }
        Process.kill(Bobbin::Worker::QUIET_SIGNAL, pids.first)
        wait_for("the worker quiet") { File.read(log).include?(QUIETED) }

        SleepJob.enqueue(0, "after-quiet")
        GatedJob.open_gate(gate)
        wait_for("the running jobs finished") { Bobbin.counts["succeeded"] == 2 }
        pids << spawn_bobbin("work", "--threads", "1", "--polling-interval", "0.05")
        # Its outcome, not only its ledger line: the job writes that before its worker records it succeeded, and the
        # second worker is killed once the quiet one has stopped.
        wait_for("the job enqueued after TSTP done") { Bobbin.counts["succeeded"] == 3 }

        Process.kill(:TERM, pids.first)
        assert wait_exit(pids.first, timeout: 30)&.success?, "the quiet worker stops on TERM"
      end
      assert_equal [ pids.first ] * 2, LedgerEntry.where(key: %w[held-0 held-1]).pluck(:pid), "the running jobs finished on the quiet worker"
      assert_equal [ pids.last ], LedgerEntry.where(key: "after-quiet").pluck(:pid), "the quiet worker, 2 slots free, started nothing"
      assert_equal [ "succeeded" ], Bobbin::JobRecord.distinct.pluck(:state)
    end
  end

  test "TSTP to bobbin start: every worker goes quiet, the process rows say so, and a worker that dies is not restarted", long: true do
    @config = start_config({ "fibers" => 2, "processes" => 2 })
    gate = GatedJob.gate("quiet-supervisor")
    log = @log = "tmp/quiet-supervisor-#{Process.pid}.log"
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("start", "-c", @config.path, log: log)
      wait_for("two workers registered") { Bobbin::ProcessRecord.where(kind: "worker").count == 2 }
      Process.kill(Bobbin::Worker::QUIET_SIGNAL, pids.first)
      wait_for("both workers quiet") { File.read(log).scan(QUIETED).size == 2 }
      wait_for("their process rows say quiet") { Bobbin::Operator.processes.select { |p| p.kind == "worker" }.all?(&:quiet?) }

      Bobbin.enqueue_all([ [ GatedJob, [ gate, "after-quiet" ] ] ])
      worker = Bobbin::ProcessRecord.where(kind: "worker").first
      Process.kill(:KILL, worker.pid)
      wait_for("the supervisor saw it exit") { File.read(log).include?("exited") }
      supervisor = Bobbin::ProcessRecord.find_by(kind: "supervisor")
      beat = supervisor.last_heartbeat_at
      # A worker that died within QUICK_DEATH of its start would be restarted 2 s later: wait past that, by the
      # supervisor's own heartbeats (it beats each 0.5 s from the loop that restarts workers).
      wait_for("the supervisor's loop 3 s on", timeout: 60) { (supervisor.reload.last_heartbeat_at - beat) >= 3 }
      assert_equal 2, File.read(log).scan(/bobbin worker \d+ \(pid \d+\) started/).size, "no worker started again while quiet"
      assert_equal "ready", Bobbin::JobRecord.find_by(class_name: "GatedJob").state, "nobody claimed the job enqueued after TSTP"

      Process.kill(:TERM, pids.first)
      assert wait_exit(pids.first, timeout: 30)&.success?, "the supervisor stops on TERM"
    end
    assert_match(/TSTP, workers quiet/, File.read(log))
  end

  test "TSTP: the worker's process row says quiet at once, not a heartbeat_interval later" do
    @config = Tempfile.create([ "bobbin", ".yml" ]).tap do |file|
      file.write({ "heartbeat_interval" => 60, "process_alive_threshold" => 180, "workers" => [ { "fibers" => 2 } ] }.to_yaml)
      file.close
    end
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("start", "-c", @config.path)
      wait_for("the worker registered") { Bobbin::ProcessRecord.where(kind: "worker").count == 1 }
      Process.kill(Bobbin::Worker::QUIET_SIGNAL, pids.first)
      wait_for("its process row says quiet, well before the next heartbeat (60 s)", timeout: 20) do
        Bobbin::Operator.processes.select { |p| p.kind == "worker" }.all?(&:quiet?)
      end
      Process.kill(:TERM, pids.first)
      assert wait_exit(pids.first, timeout: 30)&.success?
    end
  end

  test "TSTP to bobbin start while a worker is still booting (forked, its trap not set yet): it goes quiet once it runs", long: true do
    @config = start_config({ "threads" => 2, "processes" => 1 })
    log = @log = "tmp/quiet-booting-#{Process.pid}.log"
    mark = File.expand_path("../../tmp/forked-#{Process.pid}", __dir__)
    FileUtils.rm_f(mark)
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("start", "-c", @config.path, log: log, env: { "BOBBIN_TEST_SLOW_FORK" => "1.5", "BOBBIN_TEST_FORK_MARK" => mark })
      wait_for("the worker forked") { File.exist?(mark) }
      Process.kill(Bobbin::Worker::QUIET_SIGNAL, pids.first)
      wait_for("the supervisor quiet") { File.read(log).include?("workers quiet") }
      id = SleepJob.enqueue(0, "after-quiet")

      wait_for("the worker registered") { Bobbin::ProcessRecord.exists?(kind: "worker") }
      wait_for("the worker quiet", seen: -> { File.read(log) }) { File.read(log).include?(QUIETED) }
      assert_equal "ready", Bobbin::JobRecord.find(id).state, "the worker claimed nothing"
      Process.kill(:TERM, pids.first)
      assert wait_exit(pids.first, timeout: 30)&.success?, "the supervisor stops on TERM"
    end
  ensure
    FileUtils.rm_f(mark)
  end

  test "TSTP to bobbin start --mode async: its worker threads go quiet" do
    @config = start_config({ "threads" => 2, "processes" => 1 })
    log = @log = "tmp/quiet-async-#{Process.pid}.log"
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("start", "--mode", "async", "-c", @config.path, log: log)
      wait_for("the worker registered") { Bobbin::ProcessRecord.exists?(kind: "worker") }
      Process.kill(Bobbin::Worker::QUIET_SIGNAL, pids.first)
      wait_for("the worker quiet") { File.read(log).include?(QUIETED) }

      id = SleepJob.enqueue(0, "after-quiet")
      supervisor = Bobbin::ProcessRecord.find_by(kind: "supervisor")
      beat = supervisor.last_heartbeat_at
      wait_for("the supervisor 1 s on (the worker polls each 50 ms)") { (supervisor.reload.last_heartbeat_at - beat) >= 1 }
      assert_equal "ready", Bobbin::JobRecord.find(id).state, "the quiet worker claimed nothing"

      Process.kill(:TERM, pids.first)
      assert wait_exit(pids.first, timeout: 30)&.success?, "the supervisor stops on TERM"
    end
  end

  { "start" => [ "start", "--fibers", "2" ], "work" => [ "work", "--fibers", "2" ] }.each do |command, args|
    test "TSTP to bobbin #{command} while it boots (before its traps) makes it quiet, not suspended: TERM then stops it" do
      log = @log = "tmp/quiet-boot-#{command}-#{Process.pid}.log"
      mark = File.expand_path("../../tmp/booting-#{Process.pid}", __dir__)
      FileUtils.rm_f(mark)
      pids = []
      ensure_killed(pids) do
        pids << spawn_bobbin(*args, "--polling-interval", "0.05", log: log, env: { "BOBBIN_TEST_SLOW_BOOT" => "1.5", "BOBBIN_TEST_BOOT_MARK" => mark })
        wait_for("it booting") { File.exist?(mark) }
        Process.kill(Bobbin::Worker::QUIET_SIGNAL, pids.first)
        Process.kill(Bobbin::Worker::Backtraces::SIGNAL, pids.first)
        wait_for("it quiet once booted", seen: -> { "state #{File.read("/proc/#{pids.first}/stat")[/\) (\S)/, 1]}: #{File.read(log)}" }) do
          File.read(log).match?(command == "start" ? /TSTP, workers quiet/ : /#{QUIETED}/)
        end
        id = SleepJob.enqueue(0, "after-quiet")
        Process.kill(:TERM, pids.first)
        assert wait_exit(pids.first, timeout: 30)&.success?, "it stops on TERM:\n#{File.read(log)}"
        assert_equal "ready", Bobbin::JobRecord.find(id).state, "nothing was claimed while quiet"
      end
    ensure
      FileUtils.rm_f(mark)
    end
  end
end
