# frozen_string_literal: true

require_relative "cli_helper"
require "tempfile"

# Settings that cannot work are refused by every command, whether they come from flags or config/bobbin.yml,
# and a supervisor refuses pools its workers could not boot before it forks any.
class SettingsTest < Bobbin::TestCase
  include CLIHelper

  teardown { @files&.each { |path| File.delete(path) } }

  # A file with `text` that is removed after the test; returns its path.
  def write_file(text, extension)
    file = Tempfile.create([ "bobbin", extension ])
    file.write(text)
    file.close
    (@files ||= []) << file.path
    file.path
  end

  test "--polling-interval below 0.01 s and a negative --shutdown-timeout are refused, naming the flag", long: true do
    once_per_run
    [ %w[start --threads 1 --polling-interval 0], %w[start --threads 1 --polling-interval -1], %w[work --polling-interval 0.001],
      %w[doctor --threads 1 --polling-interval 0] ].each do |args|
      assert_config_exit(run_bobbin(*args), /\Abobbin: --polling-interval: must be a number of seconds ≥ 0\.01, got /)
    end
    [ %w[start --threads 1 --shutdown-timeout -3], %w[work --shutdown-timeout -3] ].each do |args|
      assert_config_exit(run_bobbin(*args), /\Abobbin: --shutdown-timeout: must be a number of seconds ≥ 0, got -3\.0/)
    end
  end

  test "doctor refuses settings from config/bobbin.yml that cannot work instead of saying OK", long: true do
    once_per_run
    { "heartbeat_interval: 0" => /production\.heartbeat_interval: must be a number of seconds ≥ 0\.1, got 0/,
      "polling_interval: 0" => /production\.polling_interval: must be a number of seconds ≥ 0\.01, got 0/,
      "retention: 0" => /production\.retention: must be a number of seconds > 0, got 0/,
      "process_alive_threshold: 15" => /process_alive_threshold: must be more than 2 × heartbeat_interval \(2 × 10 = 20 s\), got 15: a process is presumed dead/ }
      .each do |setting, pattern|
        path = write_file("production:\n  #{setting}\n  workers: [{ threads: 1 }]\n", ".yml")
        assert_config_exit(run_bobbin("doctor", "-c", path, env: { "BOBBIN_ENV" => "production" }), pattern)
      end
  end

  test "start refuses a thread pool larger than the Active Record pool at once, without forking a worker" do
    result = run_bobbin("start", "--threads", "50", env: { "DATABASE_URL" => TestDatabase.url_with_pool(5) })
    assert_config_exit(result, /has 5 connections but a threads pool of 50 needs 50; set pool: 50/)
    assert_equal 0, Bobbin::ProcessRecord.count, "no supervisor or worker registered"
  end

  test "start refuses a fiber pool without fiber isolation in fork mode too" do
    once_per_run
    jobs = write_file("ActiveSupport::IsolatedExecutionState.isolation_level = :thread\n", ".rb")
    [ %w[fork], %w[async] ].each do |(mode)|
      result = run_bobbin("start", "--fibers", "10", "--mode", mode, "-r", jobs)
      assert_config_exit(result, /a fiber pool \(fibers: 10\) needs Active Support's isolation level :fiber, but it is :thread/)
    end
    assert_equal 0, Bobbin::ProcessRecord.count
  end

  test "the supervisor checks every pool, in either mode, before starting" do
    pools = [ { "fibers" => 10, "processes" => 3 }, { "threads" => 20, "processes" => 2 } ].map.with_index { |h, i| Bobbin::Pool.parse(h, "workers[#{i}]") }
    Bobbin::ConnectionBudget.check_pools!(pools, :fork)
    error = assert_raises(Bobbin::ConfigurationError) { Bobbin::ConnectionBudget.check_pools!(pools, :async) }
    assert_match(/5 pools in one process and its supervisor's clock and heartbeat needs 51/, error.message)
    big = Bobbin::Pool.parse({ "threads" => 26 }, "workers[0]")
    assert_raises(Bobbin::ConfigurationError) { Bobbin::ConnectionBudget.check_pools!([ pools.first, big ], :fork) }

    both = write_file("production:\n  workers: [{ fibers: 10, processes: 3 }, { threads: 20, processes: 2 }]\n", ".yml")
    assert_config_exit(run_bobbin("start", "--mode", "async", "-c", both, env: { "BOBBIN_ENV" => "production" }, timeout: 30),
                       /5 pools in one process and its supervisor's clock and heartbeat needs 51/)
  end

  test "pool flags without --fibers or --threads change the configured pool instead of being ignored" do
    status, out, err = run_bobbin("doctor", "-q", "critical,mail", "--processes", "3")
    assert status.success?, err
    assert_match(/workers\[0\] fibers: 100 × 3 processes, queues critical,mail /, out, "the default pool, on the given queues")
    one = write_file("production:\n  workers: [{ threads: 3, queues: [a] }]\n", ".yml")
    status, out, err = run_bobbin("doctor", "-c", one, "--queues", "b", env: { "BOBBIN_ENV" => "production" })
    assert status.success?, err
    assert_match(/workers\[0\] threads: 3 × 1 process, queues b /, out, "the file's pool, on the given queue")
    two = write_file("production:\n  workers: [{ threads: 3 }, { fibers: 5 }]\n", ".yml")
    assert_config_exit(run_bobbin("start", "-c", two, "-q", "b", env: { "BOBBIN_ENV" => "production" }),
                       /--queues: the configuration has 2 pools; give --fibers N or --threads N to run one pool from the flags instead/)
  end
end
