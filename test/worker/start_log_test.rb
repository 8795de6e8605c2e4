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
end
