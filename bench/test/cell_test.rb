# frozen_string_literal: true

require_relative "test_helper"
require_relative "../lib/cell"
require_relative "../lib/servers"

# A cell's verdict comes from the ledger: these run a stand-in system in real worker processes and check that
# what it did wrong shows up in the cell's numbers, never as a clean result.
class CellTest < Minitest::Test
  STAND_IN = { name: "stand_in", script: File.expand_path("systems/stand_in", __dir__), mode: "fibers", database: nil, pool: nil }.freeze

  def setup
    @dir = Dir.mktmpdir("bench-cell")
    @ledger = Ledger::Server.new(File.join(@dir, "ledger.sock"))
  end

  def teardown
    @ledger.close
    FileUtils.rm_rf(@dir)
  end

  def test_a_clean_run_counts_every_job_once
    cell = run_cell(jobs: 40)

    assert_equal [ 40, 0, 0, false ], cell.values_at("completed", "missing", "duplicates", "timed_out")
    assert_operator cell["jobs_per_second"], :>, 0
    refute Report.bad?(cell)
  end

  def test_a_lost_job_and_a_repeated_job_are_both_reported
    cell = run_cell(jobs: 40, fault: "lose_and_repeat", timeout: 2)

    assert_equal [ 39, 1, 1, true ], cell.values_at("completed", "missing", "duplicates", "timed_out")
    assert Report.bad?(cell)
  end

  def test_a_worker_that_dies_is_an_error_carrying_its_last_log_line
    cell = run_cell(jobs: 10, fault: "die")

    assert_match(/stand_in worker exited early: .*lost its database connection/, cell["error"])
    assert Report.bad?(cell)
  end

  def test_a_worker_that_runs_nothing_ends_as_timed_out_with_every_job_missing
    cell = run_cell(jobs: 10, fault: "stall", timeout: 1)

    assert_equal [ 0, 10, true ], cell.values_at("completed", "missing", "timed_out")
    assert Report.bad?(cell)
  end

  def test_open_loop_cells_report_enqueue_to_start_percentiles
    cell = run_cell(jobs: 20, rate: 100)

    assert_equal 20, cell["completed"]
    assert_equal %w[p50 p90 p99], cell["latency_ms"].keys
    assert_operator cell["latency_ms"]["p50"], :>=, 0
    assert_operator cell["latency_ms"]["p99"], :>=, cell["latency_ms"]["p50"]
    assert_equal %w[p50 p90 p99], cell["returned_ms"].keys, "also from each enqueue call's return"
    assert_operator cell["returned_ms"]["p50"], :<=, cell["latency_ms"]["p50"], "a call returns after it began"
  end

  def test_one_at_a_time_enqueue_is_timed_and_leaves_no_jobs_behind
    cell = Cell.new(STAND_IN, "noop", jobs: 30, concurrency: 0, env: stand_in_env, ledger: @ledger, round: 1).enqueue_one

    assert_nil cell["error"]
    assert_operator cell["enqueue_one_per_second"], :>, 0
    assert_equal "", File.read(File.join(@dir, "queue"))
  end

  # The real thing, end to end: Bobbin's fiber worker against PostgreSQL, in a database of its own so a
  # benchmark running alongside is not disturbed.
  def test_bobbin_on_postgresql_runs_each_job_exactly_once
    system = { name: "bobbin-selftest", script: "bobbin", mode: "fibers", database: "bench_selftest", pool: 5 }
    Servers.check_databases!([ system ])
    ENV["BENCH_PG_PORT"] = Servers.port
    env = Servers.env(system, 5, @ledger.path, "http://127.0.0.1:0")
    cell = Cell.new(system, "noop", jobs: 300, concurrency: 20, env: env, ledger: @ledger, round: 1).run(timeout: 60)

    assert_nil cell["error"]
    assert_equal [ 300, 0, 0, false ], cell.values_at("completed", "missing", "duplicates", "timed_out")
    assert_includes 1..5, cell["peak_connections"]

    one = Cell.new(system, "noop", jobs: 50, concurrency: 0, env: env, ledger: @ledger, round: 1).enqueue_one
    assert_nil one["error"]
    assert_operator one["enqueue_one_per_second"], :>, 0
  end

  private
    def run_cell(jobs:, fault: nil, timeout: 30, rate: nil)
      workload = rate ? "latency" : "noop"
      Cell.new(STAND_IN, workload, jobs: jobs, concurrency: 10, env: stand_in_env(fault), ledger: @ledger, round: 1, rate: rate).run(timeout: timeout)
    end

    def stand_in_env(fault = nil)
      { "BENCH_LEDGER" => @ledger.path, "STAND_IN_QUEUE" => File.join(@dir, "queue"), "STAND_IN_FAULT" => fault,
        "BUNDLE_GEMFILE" => File.expand_path("../Gemfile", __dir__) }
    end
end
