# frozen_string_literal: true

require "test_helper"

# A worker an app runs itself (`run`, `run_until_empty`: a script, a console, a test) leaves signals to its caller, so
# Ctrl-C raises Interrupt into the thread running its loop, and a Timeout raises its own exception there. Such an
# exception stops the worker at once, as a stop's timeout does, before it goes on to the caller: the running jobs are
# interrupted and go back to ready with their attempt, none failed or charged, and the row goes. A fiber pool's jobs
# were failed with Async::Cancel (async cancels its tasks on Interrupt) — for good, with no retries left — and a thread
# pool's were killed with their rows left running under a deregistered process.
class CallerInterruptTest < Bobbin::TestCase
  %i[fibers threads].each do |mode|
    test "Ctrl-C into run_until_empty with #{mode}: the running jobs go back to ready, none failed, and Interrupt reaches the caller" do
      ids = Array.new(2) { |i| CrashSafeJob.enqueue(60, "interrupted-#{i}") }
      log = File.join(Dir.mktmpdir, "interrupted.log")
      script = <<~RUBY
        begin
          Bobbin::Worker.new(#{mode}: 2, polling_interval: 0.05).run_until_empty
        rescue Interrupt
          puts "Interrupt reached the caller"
        end
      RUBY
      pid = spawn_script(script, log: log)
      ensure_killed(pid) do
        wait_for("both jobs to start") { StartEntry.count == 2 }
        Process.kill(:INT, pid)
        status = wait_exit(pid, timeout: Bobbin::Worker::STOP_GRACE + 30)
        assert status&.success?, "the script ended by itself (#{status.inspect}):\n#{File.read(log)}"
      end
      output = File.read(log)
      assert_includes output, "Interrupt reached the caller"
      assert_match(/interrupting 2 running jobs/, output)
      assert_no_match(/failed attempt|Async::Cancel|ThreadKilled/, output)
      assert_equal [ [ "ready", 0, nil ] ] * 2, Bobbin::JobRecord.where(id: ids).order(:id).pluck(:state, :attempts, :last_error_class),
                   "handed back with their attempt, as at a stop:\n#{output}"
      assert_empty Bobbin::ProcessRecord.where(kind: "worker"), "its row removed"
      assert_equal 0, LedgerEntry.count
    end
  end
end
