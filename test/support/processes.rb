# frozen_string_literal: true

require "rbconfig"
require "tempfile"

# Starts real `bobbin` processes for tests and waits on real conditions (never on a fixed sleep).
module TestProcesses
  ROOT = File.expand_path("../..", __dir__)
  # Required first by the Ruby processes the tests start (see the file).
  BOOT_CACHE = File.join(ROOT, "test/support/boot_cache.rb")

  # A config file for `bobbin start -c`: the one pool `pool` (polling each 50 ms) and `settings` (heartbeats each
  # 0.5 s unless they say otherwise). The caller deletes it.
  def start_config(pool, **settings)
    Tempfile.create([ "bobbin", ".yml" ]).tap do |file|
      settings = { heartbeat_interval: 0.5 }.merge(settings).transform_keys(&:to_s)
      file.write(settings.merge("workers" => [ pool.merge("polling_interval" => 0.05) ]).to_yaml)
      file.close
    end
  end

  # A pid that ran and is gone (reaped): a killed process's, as a row may still name it.
  def dead_pid = Process.spawn("true").tap { |pid| Process.wait(pid) }

  # True while process `pid` exists (a zombie too).
  def alive?(pid)
    Process.kill(0, pid)
    true
  rescue Errno::ESRCH
    false
  end
  module_function :alive?
  public :alive?

  # Spawns `exe/bobbin ARGS` against the test database, loading the test jobs; returns its pid.
  # `prefix` runs it through another command (e.g. `ip netns exec NAME`).
  def spawn_bobbin(*args, log: File::NULL, env: {}, prefix: [])
    env = { "DATABASE_URL" => TestDatabase.url_with_pool, "BOBBIN_TEST_DATABASE" => TestDatabase.url }.merge(env)
    command = [ *prefix, *ruby, File.join(ROOT, "exe/bobbin"), *args, "--require", File.join(ROOT, "test/support/worker_boot.rb") ]
    # stdout and stderr share one opening of the log: opened twice, each write at its own offset, stderr's lines
    # (a job's `abort`, libpq's notices) overwrote the start of the log, once cutting a character in two.
    Process.spawn(env, *command, chdir: ROOT, [ :out, :err ] => [ log, "w" ], pgroup: true)
  end

  # Spawns a Ruby process running `script` in a process group of its own, after it has connected Bobbin to the test
  # database (a pool of 25), loaded the test jobs and sent Bobbin's log to its output, which goes to `log`; returns its pid.
  def spawn_script(script, log:)
    preamble = <<~RUBY
      $stdout.sync = true
      Bobbin.config.logger = Logger.new($stdout)
      Bobbin.connect(ENV.fetch("DATABASE_URL"))
      require "./test/support/jobs"
    RUBY
    Process.spawn({ "DATABASE_URL" => TestDatabase.url_with_pool }, *ruby, "-I", File.join(ROOT, "lib"), "-r", "bobbin", "-e", preamble + script,
                  chdir: ROOT, [ :out, :err ] => [ log, "w" ], pgroup: true)
  end

  # Starts `bobbin *args` (shutdown_timeout 60 s) and, once `running` jobs run, sends it `first` and, when its log says
  # `begun`, `second`; asserts it exits cleanly well within that timeout; returns its log.
  def stop_twice(args, first, second, begun:, running:)
    pids = []
    log = File.join(Dir.mktmpdir, "bobbin.log")
    ensure_killed(pids) do
      pids << spawn_bobbin(*args, "--shutdown-timeout", "60", "--polling-interval", "0.05", log: log)
      wait_for("#{running} jobs running") { Bobbin.counts["running"] == running }
      Process.kill(first, pids.first)
      wait_for("the stop to begin") { File.read(log).include?(begun) }
      Process.kill(second, pids.first)
      assert wait_exit(pids.first, timeout: 30)&.success?, "well within its 60 s shutdown_timeout:\n#{File.read(log)}"
    end
    File.read(log)
  end

  # The Ruby that runs the processes the tests start, with Bootsnap's cache (boot_cache.rb).
  def ruby = [ RbConfig.ruby, "-r", BOOT_CACHE ]

  # Waits up to `timeout` seconds for the block to return truthy; fails the test otherwise. `seen`, if given, says
  # what the test saw instead (called only on a timeout).
  def wait_for(what, timeout: 30, interval: 0.05, seen: nil)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
    until (result = yield)
      flunk("timed out after #{timeout}s waiting for #{what}#{"; seen: #{seen.call}" if seen}") if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
      sleep(interval)
    end
    result
  end

  # Stops `target` (a pid, or -pgid for a whole host) with SIGSTOP, as a machine or process that froze. On SQLite one
  # stopped as it wrote keeps the file's write lock, and no other process can write until it goes on (a stressed run:
  # the other host's supervisor could not register, and crashed): it goes on and is stopped again until it holds none.
  def freeze(target)
    50.times do
      Process.kill(:STOP, target)
      return if TestDatabase.postgres? || !sqlite_write_locked?

      Process.kill(:CONT, target)
      sleep(0.02)
    end
    flunk("#{target} was stopped holding SQLite's write lock 50 times")
  end

  # True when SQLite's write lock stays taken for 0.2 s (a write of a live process is over by then).
  def sqlite_write_locked?
    database = SQLite3::Database.new(TestDatabase.sqlite_path)
    database.busy_timeout = 200
    database.execute("BEGIN IMMEDIATE")
    database.execute("ROLLBACK")
    false
  rescue SQLite3::BusyException
    true
  ensure
    database&.close
  end

  # Waits for `pid` to exit; returns its Process::Status, or nil after `timeout`.
  def wait_exit(pid, timeout: 30)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
    loop do
      _, status = Process.wait2(pid, Process::WNOHANG)
      return status if status
      return nil if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline

      sleep(0.05)
    end
  end

  # Kills any process the block leaves behind, with the workers it forked (spawn_bobbin gives each its own
  # process group), so a failed test leaves no worker behind to claim the next test's jobs.
  def ensure_killed(*pids)
    yield
  ensure
    pids.flatten.each do |pid|
      kill_group(pid)
      Process.kill(:KILL, pid)
      Process.wait(pid)
    rescue Errno::ESRCH, Errno::ECHILD
      nil
    end
  end

  def kill_group(pid)
    Process.kill(:KILL, -pid)
  rescue Errno::ESRCH, Errno::EPERM
    nil
  end
end
