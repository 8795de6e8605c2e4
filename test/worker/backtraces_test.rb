# frozen_string_literal: true

require "test_helper"

# TTIN (Sidekiq's thread dump): a worker logs each running job with the backtrace of its own fiber or thread, and
# goes on. Real processes and signals; the jobs wait at a gate in test/support/jobs.rb, so the line they wait on
# must be in their section of the dump.
class BacktracesTest < Bobbin::TestCase
  GATE_LINE = /support\/jobs\.rb:\d+:in .*perform/

  teardown do
    FileUtils.rm_f(@log) if @log && passed?
    File.unlink(@config.path) if @config && File.exist?(@config.path)
  end

  # The lines of each job's section in the dumps of `log` (its title, then its frames), by job id.
  def job_sections(log)
    File.read(log).lines.slice_before { |line| !line.start_with?("    ") }
        .filter_map { |lines| [ lines.first[/\bjob (\d+) /, 1].to_i, lines ] if lines.first.match?(/\bjob \d+ GatedJob /) }.to_h
  end

  { "fibers" => /fibers-4, fiber$/, "threads" => /threads-4, thread bobbin-job-\d+$/ }.each do |mode, runner|
    test "TTIN with #{mode}: each running job's own backtrace is logged, and the jobs and the worker go on" do
      gate = GatedJob.gate("dump-#{mode}")
      # The second job's queue would write a line of its own and clear the screen, printed raw (as an outside writer
      # could name it: an enqueue refuses such a name).
      queues = [ "default", "default\n\e[2Jbobbin worker 99: stopped" ]
      ids = Bobbin.enqueue_all(Array.new(2) { |i| [ GatedJob, [ gate, "held-#{i}" ] ] })
      Bobbin::JobRecord.where(id: ids[1]).update_all(queue: queues[1])
      log = @log = "tmp/dump-#{mode}-#{Process.pid}.log"
      pids = []
      ensure_killed(pids) do
        pids << (pid = spawn_bobbin("work", "--#{mode}", "4", "--polling-interval", "0.05", log: log))
        wait_for("both jobs started") { GatedJob.started(gate) == 2 }
        Process.kill(Bobbin::Worker::Backtraces::SIGNAL, pid)
        wait_for("the dump", seen: -> { File.read(log) }) { job_sections(log).size == 2 }

        assert_match(/TTIN: 2 running jobs, \d+ other threads/, File.read(log))
        assert_no_match(/\e|^bobbin worker 99/, File.read(log))
        job_sections(log).each do |id, lines|
          assert_includes ids, id
          queue = Regexp.escape(Bobbin::Printable.printable(queues[ids.index(id)]))
          assert_match(/job #{id} GatedJob \(queue #{queue}, attempt 1\) on worker \d+ #{runner}/, lines.first.chomp)
          assert lines.drop(1).any? { |frame| frame.match?(GATE_LINE) }, "job #{id}'s frames show where it waits:\n#{lines.join}"
        end

        GatedJob.open_gate(gate)
        wait_for("both jobs done") { Bobbin.counts["succeeded"] == 2 }
        assert_equal [ pid ] * 2, LedgerEntry.pluck(:pid), "the worker that dumped ran them to the end"
        Process.kill(:TERM, pid)
        assert wait_exit(pid, timeout: 30)&.success?, "and stops on TERM as usual"
      end
    end
  end

  { "fork" => { "fibers" => 2, "processes" => 2 }, "async" => { "threads" => 2, "processes" => 2 } }.each do |mode, pool|
    test "TTIN to bobbin start (#{mode}): every worker logs its running jobs, and nothing stops" do
      @config = start_config(pool)
      gate = GatedJob.gate("dump-start-#{mode}")
      log = @log = "tmp/dump-start-#{mode}-#{Process.pid}.log"
      pids = []
      ensure_killed(pids) do
        pids << spawn_bobbin("start", *("--mode async" if mode == "async").to_s.split, "-c", @config.path, log: log)
        wait_for("two workers registered") { Bobbin::ProcessRecord.where(kind: "worker").count == 2 }
        ids = Bobbin.enqueue_all(Array.new(4) { |i| [ GatedJob, [ gate, "held-#{i}" ] ] })
        wait_for("four jobs started") { GatedJob.started(gate) == 4 }
        workers = Bobbin::ProcessRecord.where(kind: "worker").pluck(:id)
        Process.kill(Bobbin::Worker::Backtraces::SIGNAL, pids.first)
        wait_for("every job in a dump", seen: -> { File.read(log) }) { job_sections(log).keys.sort == ids.sort }

        dumped_by = job_sections(log).values.map { |lines| lines.first[/on worker (\d+) /, 1].to_i }
        assert_equal workers.sort, dumped_by.uniq.sort, "each worker dumped the jobs it runs"
        job_sections(log).each_value { |lines| assert lines.any? { |frame| frame.match?(GATE_LINE) }, lines.join }

        GatedJob.open_gate(gate)
        wait_for("the four jobs done") { Bobbin.counts["succeeded"] == 4 }
        assert_no_match(/exited/, File.read(log), "no worker stopped")
        Process.kill(:TERM, pids.first)
        assert wait_exit(pids.first, timeout: 30)&.success?, "the supervisor stops on TERM"
      end
    end
  end
end
