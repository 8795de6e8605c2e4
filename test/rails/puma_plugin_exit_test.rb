# frozen_string_literal: true

require "test_helper"
require_relative "generated_app"
require_relative "puma_beside"
require "socket"
require "net/http"

# The Puma plugin stopped Puma by sending it TERM when Bobbin's supervisor died, and Puma then died by that signal:
# systemd's Restart=on-failure takes a death by TERM for a clean stop and did not restart the unit, and the worker
# the supervisor left was still running after Puma had gone (a trial). Puma now stops gracefully, waits for that
# worker, and exits 1; a TERM to Puma still exits 0.
class RailsPumaPluginExitTest < Bobbin::TestCase
  include PumaBeside

  def app = GeneratedApp.installed

  setup do
    File.write(app.path("app/jobs/slow_job.rb"), <<~RUBY)
      # Writes tmp/NAME-started with its process's pid, sleeps, then writes tmp/NAME-finished.
      class SlowJob < ApplicationJob
        def perform(name, seconds)
          File.write(Rails.root.join("tmp", "\#{name}-started"), Process.pid.to_s)
          sleep(seconds)
          File.write(Rails.root.join("tmp", "\#{name}-finished"), "done")
        end
      end
    RUBY
    File.write(app.path("tmp/puma-single.rb"), "bind \"tcp://127.0.0.1:0\"\nplugin :bobbin\n")
    File.write(app.path("tmp/puma-cluster-exit.rb"), "workers 2\npreload_app! false\nbind \"tcp://127.0.0.1:0\"\nplugin :bobbin\n")
  end

  { "single" => "tmp/puma-single.rb", "clustered" => "tmp/puma-cluster-exit.rb" }.each do |mode, config|
    test "#{mode} Puma: when Bobbin's supervisor is killed, Puma stops gracefully once the worker it left has, and exits 1", long: true do
      skip("the plugin does the same on either database; SQLite's suite runs it") if postgres?
      name = "slow-#{mode}"
      app.run!("bin/rails", "runner", "SlowJob.perform_later(#{name.inspect}, 3)")
      log = app.path("log/puma-exit-#{mode}.log")
      pid, supervisor = start_puma(config, log)
      ensure_killed(pid) do
        worker = job_started(name)
        Process.kill(:KILL, supervisor)
        status = wait_puma_exit(pid, log, "its supervisor's death") or skip(PUMA_OWN_HANG)
        assert_not status.signaled?, "Puma exited, not by a signal: #{status.inspect}\n#{File.read(log)}"
        assert_equal 1, status.exitstatus, File.read(log)
        assert_match(/Bobbin's supervisor \(pid #{supervisor}\) exited; stopping Puma/, File.read(log))
        assert_raises(Errno::ESRCH, "no Bobbin worker outlives Puma") { Process.kill(0, worker) }
        assert_equal "done", app.read("tmp/#{name}-finished"), "the running job finished: the worker stopped gracefully"
      end
    end
  end

  # Bobbin's supervisor and workers, forked from Puma, held its listening socket: while they finished their jobs after
  # Puma was killed, Puma started again failed with EADDRINUSE and requests hung in the listen queue.
  test "Puma killed while Bobbin finishes a job: its port is free at once for the Puma started again", long: true do
    skip("the plugin does the same on either database; SQLite's suite runs it") if postgres?
    name = "slow-port"
    app.run!("bin/rails", "runner", "SlowJob.perform_later(#{name.inspect}, 5)")
    log = app.path("log/puma-port.log")
    pid, = start_puma("tmp/puma-single.rb", log)
    worker = nil
    ensure_killed(pid) do
      port = wait_for("Puma's port") { File.read(log)[%r{Listening on http://127\.0\.0\.1:(\d+)}, 1] }.to_i
      worker = job_started(name)
      assert_port_free_once_killed(pid, port, worker)
    end
  ensure
    wait_for("Bobbin's worker to finish its job and exit", timeout: 60) { gone?(worker) } if worker&.positive?
  end

  # After a hot restart Puma's listening sockets are the ones its exec handed over, which a process it starts inherits
  # unless it closes them: the same port test, on the Bobbin a hot restart started.
  test "Puma killed after a hot restart while Bobbin finishes a job: its port is free at once for the Puma started again", long: true do
    skip("the plugin does the same on either database; SQLite's suite runs it") if postgres?
    name = "slow-port-hot"
    log = app.path("log/puma-port-hot.log")
    pid, first = start_puma("tmp/puma-single.rb", log)
    worker = nil
    ensure_killed(pid) do
      port = wait_for("Puma's port") { File.read(log)[%r{Listening on http://127\.0\.0\.1:(\d+)}, 1] }.to_i
      Process.kill(:USR2, pid)
      second = supervisor_after_hot_restart(log)
      assert gone?(first)
      app.run!("bin/rails", "runner", "SlowJob.perform_later(#{name.inspect}, 5)")
      worker = job_started(name)
      assert_not_equal second, worker
      assert_port_free_once_killed(pid, port, worker)
    end
  ensure
    wait_for("Bobbin's worker to finish its job and exit", timeout: 60) { gone?(worker) } if worker&.positive?
  end

  # Sends Puma (`pid`) TERM and asserts Bobbin's `supervisor` stops with it.
  def assert_stops_with_puma(pid, log, supervisor)
    Process.kill(:TERM, pid)
    wait_puma_exit(pid, log, "TERM")
    assert ended?(supervisor)
  end

  # Kills Puma (`pid`) while Bobbin's `worker` finishes a job, and asserts Puma's `port` can be bound again at once.
  def assert_port_free_once_killed(pid, port, worker)
    Process.kill(:KILL, pid)
    wait_exit(pid, timeout: 10) or flunk("Puma did not die")
    begin
      TCPServer.new("127.0.0.1", port).close
    rescue Errno::EADDRINUSE
      flunk("port #{port} still in use after Puma died: Bobbin's processes keep Puma's listening socket")
    end
    assert_not gone?(worker), "Bobbin's worker was still finishing its job"
  end

  test "config/puma.rb naming the plugin twice starts one supervisor, which stops with Puma", long: true do
    skip("the plugin does the same on either database; SQLite's suite runs it") if postgres?
    File.write(app.path("tmp/puma-twice.rb"), "bind \"tcp://127.0.0.1:0\"\nplugin :bobbin\nplugin :bobbin if ENV[\"BOBBIN_IN_PUMA\"]\n")
    log = app.path("log/puma-twice.log")
    pid, supervisor = start_puma("tmp/puma-twice.rb", log, env: { "BOBBIN_IN_PUMA" => "1" })
    ensure_killed(pid) do
      sleep(3) # a second supervisor starts as quickly as the first
      assert_equal [ supervisor ], supervisors(log), File.read(log)
      assert_stops_with_puma(pid, log, supervisor)
    end
  end

  # The plugin waited for Bobbin's running jobs inside the phased restart, in Puma's master loop: past worker_timeout,
  # the master then killed every worker it had as timed out, the requests they served with them.
  test "a phased restart while Bobbin finishes a job keeps Puma's workers: Bobbin starts again once it has stopped", long: true do
    skip("the plugin does the same on either database; SQLite's suite runs it") if postgres?
    name = "slow-phased"
    pid, first, log = puma_beside_slow_job(name, 12, "workers 2\npreload_app! false\nworker_timeout 6\n")
    ensure_killed(pid) do
      job_started(name)
      Process.kill(:USR1, pid)
      second = wait_for("Bobbin started again after the phased restart", timeout: 120) { supervisors(log)[1] }
      assert_equal "done", app.read("tmp/#{name}-finished"), "the job finished before the old supervisor exited"
      assert gone?(first)
      assert_match(/Worker 0 \(PID: \d+\) booted .*phase: 1/, File.read(log))
      assert_no_match(/Terminating timed out worker/, File.read(log))
      Process.kill(:TERM, pid)
      wait_puma_exit(pid, log, "TERM")
      wait_for("Bobbin to stop with Puma") { ended?(second) }
    end
  end

  # A refork (fork_worker: after its request count, here URG) fired the restart hook as a phased restart, and Bobbin
  # was stopped and started again, its jobs drained, every 1,000 requests (a review).
  test "a refork of Puma's workers (fork_worker) leaves Bobbin running: its job finishes, and no second supervisor starts", long: true do
    skip("the plugin does the same on either database; SQLite's suite runs it") if postgres?
    name = "slow-refork"
    pid, first, log = puma_beside_slow_job(name, 6, "workers 2\nfork_worker 0\n")
    ensure_killed(pid) do
      job_started(name)
      Process.kill(:URG, pid)
      wait_for("the refork", timeout: 60) { File.read(log).match?(/Worker 1 \(PID: \d+\) booted .*phase: 1/) }
      wait_for("the job to finish", timeout: 30) { app.read("tmp/#{name}-finished") == "done" rescue nil }
      assert_equal [ first ], supervisors(log)
      assert_not gone?(first)
      assert_no_match(/Stopping Bobbin/, File.read(log))
      Process.kill(:TERM, pid)
      wait_puma_exit(pid, log, "TERM")
      wait_for("Bobbin to stop with Puma") { ended?(first) }
    end
  end

  # Puma's workers exit when its master dies, on EOF of a pipe the master alone writes to; Bobbin's supervisor, forked
  # from the master, held it too, and a killed master's workers went on serving until Bobbin had finished its jobs.
  test "clustered Puma whose master is killed while Bobbin finishes a job: Puma's workers exit at once, as without the plugin", long: true do
    skip("the plugin does the same on either database; SQLite's suite runs it") if postgres?
    name = "slow-master"
    app.run!("bin/rails", "runner", "SlowJob.perform_later(#{name.inspect}, 8)")
    log = app.path("log/puma-master-killed.log")
    pid, = start_puma("tmp/puma-cluster-exit.rb", log)
    worker = nil
    ensure_killed(pid) do
      pumas = wait_for("Puma's two workers") { File.read(log).scan(/Worker \d \(PID: (\d+)\) booted/).flatten.map(&:to_i).then { |pids| pids if pids.size == 2 } }
      worker = job_started(name)
      Process.kill(:KILL, pid)
      wait_exit(pid, timeout: 10) or flunk("Puma did not die")
      wait_for("Puma's workers to see their master died", timeout: 5, seen: -> { pumas.reject { |puma| gone?(puma) } }) { pumas.all? { |puma| gone?(puma) } }
      assert_not gone?(worker), "Bobbin's worker was still finishing its job"
    ensure
      pumas&.each { |puma| Process.kill(:KILL, puma) unless gone?(puma) }
    end
  ensure
    wait_for("Bobbin's worker to finish its job and exit", timeout: 60) { gone?(worker) } if worker&.positive?
  end

  # The plugin forked Bobbin's supervisor from Puma: a request inside an SQLite call at that moment (its write waiting
  # on another process's lock) held its connection's mutex, and the child hung for ever in the sqlite3 gem's after-fork
  # close of that connection, before running any of Bobbin's code; Puma then served on without any jobs running.
  test "SQLite: Bobbin starts beside a Puma that boots while a request waits on another process's write lock", long: true do
    skip("the sqlite3 gem's after-fork close; PostgreSQL's driver has none") if postgres?
    File.write(app.path("app/controllers/sqlite_writes_controller.rb"), <<~RUBY)
      # Writes to the app's database.
      class SqliteWritesController < ActionController::Base
        def create
          ActiveRecord::Base.connection.execute("CREATE TABLE IF NOT EXISTS plugin_fork_probes (id INTEGER)")
          render plain: "written"
        end
      end
    RUBY
    routes = app.read("config/routes.rb")
    File.write(app.path("config/routes.rb"), routes.sub(/draw do\n/, "\\0  get \"sqlite_write\" => \"sqlite_writes#create\"\n")) unless routes.include?("sqlite_write")
    # Puma's own after_booted hooks run before the plugin's: this one holds the plugin back until the request has started
    # (Rails logs it) and reached its write.
    probe = "/sqlite_write?probe=#{SecureRandom.hex(4)}"
    File.write(app.path("tmp/puma-sqlite-boot.rb"), <<~RUBY)
      bind "tcp://127.0.0.1:0"
      after_booted { sleep(0.05) until File.exist?("log/development.log") && File.read("log/development.log").include?(#{probe.inspect}); sleep(1) }
      plugin :bobbin
    RUBY
    log = app.path("log/puma-sqlite-boot.log")
    holder = SQLite3::Database.new(app.path("storage/development.sqlite3"))
    holder.execute("BEGIN IMMEDIATE")
    pid = app.spawn("bundle", "exec", "puma", "-C", app.path("tmp/puma-sqlite-boot.rb"), log: log)
    ensure_killed(pid) do
      port = wait_for("Puma's port", timeout: 90) { File.read(log)[%r{Listening on http://127\.0\.0\.1:(\d+)}, 1] }.to_i
      request = Thread.new { Net::HTTP.get_response(URI("http://127.0.0.1:#{port}#{probe}")) }
      wait_for("the plugin to start Bobbin", timeout: 30, seen: -> { File.read(log) }) { children(pid).any? }
      holder.execute("ROLLBACK")
      assert_equal "written", request.value.body
      supervisor = wait_for("Bobbin's supervisor to start", timeout: 60, seen: -> { File.read(log) }) { supervisors(log).first }
      assert_stops_with_puma(pid, log, supervisor)
    end
  ensure
    holder&.close
  end

  # The processes whose parent is `pid`.
  def children(pid)
    Dir.glob("/proc/[0-9]*/stat").filter_map do |stat|
      File.read(stat)[/\) \S (\d+)/, 1].to_i == pid && File.basename(File.dirname(stat)).to_i
    rescue Errno::ENOENT, Errno::ESRCH
      nil
    end
  end

  # Waits for SlowJob `name` to start; returns the pid of the worker running it.
  # A SlowJob `name` of `seconds` enqueued, then Puma with `settings` and the plugin: [Puma's pid, the supervisor's, the log].
  def puma_beside_slow_job(name, seconds, settings)
    File.write(app.path("tmp/puma-#{name}.rb"), "#{settings}bind \"tcp://127.0.0.1:0\"\nplugin :bobbin\n")
    app.run!("bin/rails", "runner", "SlowJob.perform_later(#{name.inspect}, #{seconds})")
    log = app.path("log/puma-#{name}.log")
    [ *start_puma("tmp/puma-#{name}.rb", log), log ]
  end

  def job_started(name)
    wait_for("the job to start", timeout: 90) { File.exist?(app.path("tmp/#{name}-started")) && app.read("tmp/#{name}-started").presence }.to_i
  end

  def gone?(pid)
    Process.kill(0, pid)
    false
  rescue Errno::ESRCH
    true
  end

  # Gone, or exited and not yet reaped: Bobbin's supervisor is Puma's child, and a Puma that hung in its own stop
  # (puma_own_hang?) never waits for it.
  def ended?(pid)
    gone?(pid) || File.read("/proc/#{pid}/stat")[/\) (\S)/, 1] == "Z"
  rescue Errno::ENOENT, Errno::ESRCH
    true
  end

  # Puma's own TERM ends it by that signal (raise_exception_on_sigterm, its default), which systemd counts as a clean
  # stop; without it, with status 0. The plugin changes neither.
  { "true" => ->(status) { status.signaled? && status.termsig == 15 }, "false" => ->(status) { status.exited? && status.exitstatus.zero? } }.each do |raise_on_term, clean|
    test "a TERM to Puma with the plugin ends it as Puma ends without it (raise_exception_on_sigterm #{raise_on_term})", long: true do
      skip("the plugin does the same on either database; SQLite's suite runs it") if postgres?
      File.write(app.path("tmp/puma-term.rb"), "bind \"tcp://127.0.0.1:0\"\nraise_exception_on_sigterm #{raise_on_term}\nplugin :bobbin\n")
      log = app.path("log/puma-exit-term.log")
      pid, supervisor = start_puma("tmp/puma-term.rb", log)
      ensure_killed(pid) do
        Process.kill(:TERM, pid)
        status = wait_puma_exit(pid, log, "TERM")
        assert ended?(supervisor)
        skip(PUMA_OWN_HANG) unless status
        assert clean.call(status), "#{status.inspect}\n#{File.read(log)}"
      end
    end
  end

  # Bobbin runs in a process group of its own (so the workers a dead supervisor leaves can be found): a terminal's
  # Ctrl-C reaches Puma only, and the plugin passes it on.
  test "an INT to Puma (Ctrl-C) reaches Bobbin, and Puma exits 0", long: true do
    skip("the plugin does the same on either database; SQLite's suite runs it") if postgres?
    log = app.path("log/puma-exit-int.log")
    pid, supervisor = start_puma("tmp/puma-single.rb", log)
    ensure_killed(pid) do
      Process.kill(:INT, pid)
      status = wait_puma_exit(pid, log, "INT")
      assert_match(/Stopping Bobbin \(pid #{supervisor}\) beside Puma.*bobbin supervisor: INT, stopping workers gracefully/m, File.read(log))
      assert ended?(supervisor)
      skip(PUMA_OWN_HANG) unless status
      assert status.success?, "#{status.inspect}\n#{File.read(log)}"
    end
  end
end
