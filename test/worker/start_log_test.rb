# frozen_string_literal: true

require "test_helper"

# README's plain-Ruby worker, `Bobbin::Worker.new(...).start` in a script, with Bobbin's default logger (stdout).
class StartLogTest < Bobbin::TestCase
  # Under systemd or Docker stdout is a pipe or a file, which Ruby buffers: the worker's lines (started, stopping,
  # a job's failure) appeared only when the process exited (a trial). `bobbin start` set $stdout.sync; this did not.
  test "a worker started in a script logs as it goes when its output is a file, not when the process exits" do
    log = File.join(Dir.mktmpdir, "worker.log")
    script = <<~RUBY
      Bobbin.connect(ENV.fetch("DATABASE_URL"))
      Bobbin::Worker.new(queues: ["*"], fibers: 2, polling_interval: 0.05).start
    RUBY
    pid = Process.spawn({ "DATABASE_URL" => TestDatabase.url_with_pool }, *ruby, "-I", File.join(TestProcesses::ROOT, "lib"), "-r", "bobbin",
                        "-e", script, chdir: TestProcesses::ROOT, [ :out, :err ] => [ log, "w" ], pgroup: true)
    ensure_killed(pid) do
      wait_for("the worker's row") { Bobbin::ProcessRecord.where(kind: "worker").exists? }
      wait_for("its started line in the log while it runs", timeout: 10, seen: -> { File.read(log) }) { File.read(log).include?(") started: ") }
      Process.kill(:TERM, pid)
      assert wait_exit(pid, timeout: 30)&.success?, File.read(log)
    end
  end

  # A worker started on the main thread keeps its handlers in (SignalGuard); one an app starts on a thread of its own
  # traps once, and the app's server then traps its own stop: put back each second, Bobbin's would take it away.
  test "a worker started on a thread of its own leaves the app's own TERM handler, trapped after it, in place", long: true do
    dir = Dir.mktmpdir
    log = File.join(dir, "app.log")
    mark = File.join(dir, "app-stopped")
    script = <<~RUBY
      $stdout.sync = true
      Bobbin.connect(ENV.fetch("DATABASE_URL"))
      worker = Bobbin::Worker.new(queues: ["*"], fibers: 2, polling_interval: 0.05)
      thread = Thread.new { worker.start }
      sleep 0.05 until Bobbin::ProcessRecord.where(kind: "worker").exists?
      stop = Thread::Queue.new
      Signal.trap("TERM") { stop << true }
      puts "the app trapped TERM"
      stop.pop
      File.write(#{mark.inspect}, "the app's handler ran")
      worker.stop
      thread.join
    RUBY
    pid = Process.spawn({ "DATABASE_URL" => TestDatabase.url_with_pool }, *ruby, "-I", File.join(TestProcesses::ROOT, "lib"), "-r", "bobbin",
                        "-e", script, chdir: TestProcesses::ROOT, [ :out, :err ] => [ log, "w" ], pgroup: true)
    ensure_killed(pid) do
      wait_for("the app's trap", timeout: 10, seen: -> { File.read(log) }) { File.read(log).include?("the app trapped TERM") }
      sleep(Bobbin::Worker::Heartbeat::TICK * 2.5) # the worker's heartbeat ticks: a guard would have put Bobbin's back by now
      Process.kill(:TERM, pid)
      assert wait_exit(pid, timeout: 30)&.success?, File.read(log)
    end
    assert File.exist?(mark), "the app's handler got the TERM: #{File.read(log)}"
    refute_match(/handler was replaced/, File.read(log))
  end
end
