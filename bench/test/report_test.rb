# frozen_string_literal: true

require_relative "test_helper"

# The report's arithmetic: medians over good rounds only, bad rounds counted and shown, ratios Bobbin ÷ peer.
class ReportTest < Minitest::Test
  FACTS = { "cores" => 2, "cpu" => "test", "memory_gb" => 4, "kernel" => "6", "ruby" => "ruby 3.4", "postgresql" => "15",
            "max_connections" => "100", "shared_buffers" => "128MB", "synchronous_commit" => "on", "redis" => "7", "gems" => {} }.freeze

  def test_a_bad_round_is_left_out_of_the_median_and_counted
    report = report_of(sleep_cells("bobbin-fibers", [ 1_900, 1_950, 1_000 ], missing_in_last: 2) + sleep_cells("async_job", [ 1_000, 1_000, 900 ]))
    bobbin = report.summary.dig("sleep", "bobbin-fibers")

    assert_equal [ 1_950, 1_900, 1_950, 1, 3, 2 ], bobbin.values_at("median", "min", "max", "bad_rounds", "rounds", "missing")
  end

  def test_results_show_ratios_bad_rounds_and_targets
    text = results_of(sleep_cells("bobbin-fibers", [ 1_900, 1_950, 1_000 ], missing_in_last: 2) + sleep_cells("async_job", [ 1_000, 1_000, 900 ]))

    assert_includes text, "| sleep | 1.95× |"
    assert_match(/\| sleep \| bobbin-fibers \| 100 \| 5 \| 1950 \(1900–1950\) \| 98 % \| .* \| 1\/3 /, text)
    assert_includes text, "| sleep at C=100 (jobs/s) | >= 1800 | 1950 | met |"
    assert_includes text, "| noop, one worker process (jobs/s) | >= 3100 | — | not run |"
  end

  def test_a_stress_cell_that_lost_jobs_is_marked_incomplete_and_bobbin_cells_are_a_target
    lost = stress_cell("solid_queue-threads", missing: 1_200)
    text = results_of(sleep_cells("bobbin-fibers", [ 1_950 ]) + [ lost, stress_cell("bobbin-fibers"), stress_cell("bobbin-threads", missing: 3) ])

    assert_includes text, "| solid_queue-threads | 6 | 100 | 102 | **incomplete** | 1200 | 0 |"
    assert_includes text, "| stress matrix: every Bobbin cell completes, 0 failed jobs | 2/2 | 1/2 | missed |"
  end

  def test_being_behind_async_job_on_an_io_workload_is_a_missed_target
    text = results_of(sleep_cells("bobbin-fibers", [ 1_900 ]) + sleep_cells("async_job", [ 1_950 ]))

    assert_includes text, "| I/O workloads: at least Async::Job on Redis (sleep) | ≥ 1× each | behind on sleep | missed |"
  end

  def test_one_at_a_time_enqueue_is_tabled_beside_bulk
    one = [ 2_400, 2_600, 2_500 ].each_with_index.map do |rate, i|
      { "system" => "bobbin-fibers", "workload" => "noop", "jobs" => 2_000, "enqueue_one_per_second" => rate, "round" => i + 1, "enqueue" => true }
    end
    noop = sleep_cells("bobbin-fibers", [ 10_000 ]).map { |c| c.merge("workload" => "noop", "enqueue_per_second" => 60_000) }
    cells = noop + one + [ one.first.merge("error" => "RuntimeError: boom", "round" => 4) ]
    text = results_of(cells)

    assert_equal [ "noop" ], report_of(cells).summary.keys
    assert_includes text, "| bobbin-fibers | 60000 | 2500 (2400–2600) | 1/4 RuntimeError: boom |"
    assert_includes text, "| enqueue one at a time, `Job.enqueue` (jobs/s) | reported | 2500 | — |"
  end

  def test_a_run_given_with_parts_contributes_only_those
    Dir.mktmpdir do |dir|
      path = File.join(dir, "2026-01-01-0000-full.json")
      File.write(path, JSON.generate("cells" => [ open_loop_cell("latency", 1.2), open_loop_cell("scheduled", 3.1), *sleep_cells("bobbin-fibers", [ 100 ]) ]))

      assert_equal %w[latency scheduled sleep], Report.load_run(path)["cells"].map { |c| c["workload"] }
      assert_equal %w[latency scheduled], Report.load_run("#{path}:latency+scheduled")["cells"].map { |c| c["workload"] }
      assert_equal "2026-01-01-0000-full", Report.load_run("#{path}:idle")["name"]
    end
  end

  def test_open_loop_rows_say_what_they_measure_so_scheduled_lateness_is_not_read_as_an_arrival_rate
    text = results_of([ open_loop_cell("latency", 1.2, returned: 0.5), open_loop_cell("scheduled", 3.1) ])

    assert_includes text, "| bobbin-fibers | 200 jobs/s arriving: enqueue → start | 1.2 | 1.2 | 1.2 | 0.5 / 0.5 | 0/1 |"
    assert_includes text, "| bobbin-fibers | jobs scheduled 2 s ahead (100/s): start − run_at | 3.1 | 3.1 | 3.1 | — / — | 0/1 |"
    assert_includes text, "| pickup at 200 jobs/s arriving, from its commit (the enqueue call's return): p50 ≤ 1 ms, p99 ≤ 5 ms | ≤ 1 / ≤ 5 | 0.5 / 0.5 | met |"
    assert_includes text, "| pickup at 200 jobs/s arriving, from the enqueue call's start: p50 ≤ 1 ms, p99 ≤ 5 ms | ≤ 1 / ≤ 5 | 1.2 / 1.2 | missed |"
    assert_includes text, "| a job scheduled 2 s ahead starts within 5 ms of its run_at (p99) | ≤ 5 ms | 3.1 | met |"
    refute_includes text, "100 jobs/s arriving"
  end

  def test_the_nondurable_variant_runs_only_where_its_enqueue_shows_and_gets_its_own_pickup_rows
    variant = Plan::SYSTEMS.find { |s| s[:name] == Plan::NONDURABLE_OPEN_LOOP }

    assert_includes Plan.workers(Plan::SYSTEMS, "latency_2k"), variant
    refute_includes Plan.workers(Plan::SYSTEMS, "noop"), variant
    assert_includes Plan.workers(Plan::SYSTEMS, "noop"), Plan::SYSTEMS.first
    refute_includes Plan.stress_cells.map(&:first), variant
    refute_includes Plan.sweep_cells(Plan::SYSTEMS, [ 100 ]).map(&:first), variant

    text = results_of([ open_loop_cell("latency", 1.4, returned: 0.6), open_loop_cell("latency", 0.9, returned: 0.5).merge("system" => variant[:name]) ])

    assert_includes text, "| pickup at 200 jobs/s arriving, from the enqueue call's start: p50 ≤ 1 ms, p99 ≤ 5 ms | ≤ 1 / ≤ 5 | 1.4 / 1.4 | missed |"
    assert_includes text, "| pickup at 200 jobs/s arriving, `durable_enqueue = false`, from the enqueue call's start: p50 ≤ 1 ms, p99 ≤ 5 ms | ≤ 1 / ≤ 5 | 0.9 / 0.9 | met |"
    assert_includes text, "| bobbin-fibers-nondurable | 200 jobs/s arriving: enqueue → start | 0.9 | 0.9 | 0.9 | 0.5 / 0.5 | 0/1 |"
  end

  def test_the_header_says_which_run_each_part_comes_from
    one = { "system" => "bobbin-fibers", "workload" => "noop", "jobs" => 500, "enqueue_one_per_second" => 1_600, "round" => 1, "enqueue" => true, "run" => "quick-run" }
    cells = sleep_cells("bobbin-fibers", [ 1_950 ]).map { |c| c.merge("run" => "full-run") } + [ one ]
    runs = [ { "name" => "full-run", "options" => { "rounds" => 3 } }, { "name" => "quick-run", "options" => { "quick" => true } } ]
    report = Report.new(cells, runs: runs, server_check: {}, facts: FACTS)
    text = Results.new(report.summary, facts: FACTS, runs: runs, server_check: { "concurrent_requests" => 2, "seconds" => 1.0 },
                       enqueue: report.enqueue, origins: report.origins).to_s

    assert_equal({ enqueue: "quick-run" }, report.origins)
    assert_match(/^- Run `full-run` \(`bin\/bench`\): sleep, 3 measured rounds after a warm-up round .*\.$/, text)
    assert_match(/^- Run `quick-run` \(`bin\/bench --quick`\): one-at-a-time enqueue, 1 round of reduced job counts\.$/, text)
  end

  def test_the_header_counts_the_stress_matrix_and_sweep_as_one_round_per_cell
    enqueue = (1..2).map { |round| { "system" => "bobbin-fibers", "workload" => "noop", "jobs" => 2_000, "enqueue_one_per_second" => 1_600, "round" => round, "enqueue" => true } }
    sweep = sleep_cells("bobbin-fibers", [ 1_950 ]).map { |c| c.merge("sweep" => true, "concurrency" => 100, "round" => 1) }
    cells = (enqueue + sweep).map { |c| c.merge("run" => "parts-run") }
    runs = [ { "name" => "parts-run", "options" => { "rounds" => 2 } } ]
    report = Report.new(cells, runs: runs, server_check: {}, facts: FACTS)
    text = Results.new(report.summary, facts: FACTS, runs: runs, server_check: { "concurrent_requests" => 2, "seconds" => 1.0 },
                       sweep: report.sweep, enqueue: report.enqueue, origins: report.origins).to_s

    assert_includes text, "- Run `parts-run` (`bin/bench`): throughput-vs-concurrency sweep, one round per cell; one-at-a-time enqueue, 2 rounds.\n"
  end

  def test_the_active_job_table_compares_systems_of_one_run
    main = (sleep_cells("bobbin-fibers", [ 1_950 ]) + sleep_cells("sidekiq-aj", [ 1_000 ])).map { |c| c.merge("run" => "main-run") }
    producers = { "system" => "bobbin-fibers-aj", "workload" => "noop", "producers_cell" => true, "jobs_per_second" => 9 }
    one = { "system" => Plan::NONDURABLE, "workload" => "noop", "jobs" => 2_000, "enqueue_one_per_second" => 1_800, "round" => 1, "enqueue" => true }
    aj = Report.active_job_cells(sleep_cells("bobbin-fibers-aj", [ 1_800 ]) + sleep_cells("sidekiq-aj", [ 900 ]) + [ producers, one ])
               .map { |c| c.merge("run" => "aj-run") }
    runs = [ { "name" => "main-run", "options" => { "rounds" => 3 } }, { "name" => "aj-run", "options" => { "rounds" => 3 } } ]
    report = Report.new(main, runs: runs, server_check: {}, facts: FACTS, active_job: aj)
    text = Results.new(report.summary, facts: FACTS, runs: runs, server_check: { "concurrent_requests" => 2, "seconds" => 1.0 },
                       enqueue: report.enqueue, active_job: report.active_job).to_s

    assert_equal 3, aj.size
    assert_includes text, "| sleep | 1800 | 900 (2.0×) |"
    assert_includes text, "| perform_later, one at a time, `durable_enqueue = false` | 1800 | — |"
    assert_includes text, "- Run `aj-run` (`bin/bench`): the Through Active Job table (sleep, one-at-a-time perform_later), 3 measured rounds"
    assert_equal 1_000, report.summary.dig("sleep", "sidekiq-aj", "median")
  end

  def test_a_later_run_adds_the_peers_a_table_lacks_compared_with_its_own_bobbin
    first = { "name" => "first-run", "options" => { "rounds" => 3 },
              "cells" => sleep_cells("bobbin-fibers", [ 1_900 ]) + sleep_cells("sidekiq", [ 950 ]) + [ stress_cell("bobbin-fibers") ] }
    later = { "name" => "later-run", "options" => { "rounds" => 3 },
              "cells" => sleep_cells("bobbin-fibers", [ 1_500 ]) + sleep_cells("sidekiq", [ 100 ]) + sleep_cells("river", [ 300 ]) +
                         sleep_cells("sidekiq-aj", [ 10 ]) + [ stress_cell("river", missing: 5), stress_cell("bobbin-fibers") ] }
    cells = Report.take([ first, later ])
    runs = [ first, later ].map { |run| run.slice("name", "options") }
    report = Report.new(cells, runs: runs, server_check: {}, facts: FACTS)
    text = Results.new(report.summary, facts: FACTS, runs: runs, server_check: { "concurrent_requests" => 2, "seconds" => 1.0 },
                       matrix: cells.select { |c| c["matrix"] && !c["reference"] }, origins: report.origins,
                       references: report.references, added: report.added).to_s

    assert_equal 950, report.summary.dig("sleep", "sidekiq", "median"), "a system the first run has keeps its numbers"
    assert_equal 300, report.summary.dig("sleep", "river", "median")
    assert_nil report.summary.dig("sleep", "sidekiq-aj"), "Active Job systems have a table of their own"
    assert_equal 1_900, report.summary.dig("sleep", "bobbin-fibers", "median"), "the later run's Bobbin is only a reference"
    assert_equal({ "later-run" => { systems: [ "river" ], parts: [ "sleep", :matrix ] } }, report.added)
    assert_equal({ matrix: "first-run" }, report.origins)
    assert_includes text, "| sleep | 2.0× | 5.0× † |", "river's ratio is the later run's Bobbin (1500) ÷ its 300"
    assert_includes text, "† river: run `later-run`, added after the rest of the table was measured; ratios against it use Bobbin fibers of that same run (jobs/s sleep 1500)."
    assert_match(/\| sleep \| river † \| 100 \|/, text)
    assert_includes text, "| river † | 6 | 100 | 102 | **incomplete** | 5 |"
    assert_match(/^- Run `later-run` \(`bin\/bench`\): river added to sleep, stress matrix \(3 measured rounds; marked †\), beside Bobbin fibers of the same run\.$/, text)
    older = Report.take([ later, first.merge("cells" => first["cells"] + sleep_cells("good_job", [ 90 ])) ])
    assert_empty older.select { |c| c["run"] == "first-run" }, "a run older than the table's adds nothing (run names sort by start time)"
  end

  def test_steady_cells_run_at_least_ten_times_the_concurrency_and_at_most_the_cap
    spec = Plan::WORKLOADS.fetch("sleep")

    assert_equal 1_000, Plan.steady_jobs(spec, 100, 10)
    assert_equal 12_000, Plan.steady_jobs(spec, 100, 2_000)
    assert_equal Plan::MAX_JOBS, Plan.steady_jobs(spec, 100, 1_000_000)
    assert_equal spec[:jobs], Plan.steady_jobs(spec, 100, nil)
  end

  def test_thread_peers_get_threads_plus_five_capped_and_bobbin_threads_exactly_its_threads
    by_name = Plan::SYSTEMS.to_h { |s| [ s[:name], s ] }

    assert_equal [ 100, 50 ], Plan.sizing(by_name.fetch("good_job"), "sleep")
    assert_equal [ 100, 100 ], Plan.sizing(by_name.fetch("bobbin-threads"), "sleep")
    assert_equal [ 50, 50 ], Plan.sizing(by_name.fetch("bobbin-threads"), "burst")
    assert_equal [ 1_500, 5 ], Plan.sizing(by_name.fetch("bobbin-fibers"), "burst")
  end

  private
    def sleep_cells(system, rates, missing_in_last: 0)
      rates.each_with_index.map do |rate, i|
        missing = i == rates.size - 1 ? missing_in_last : 0
        { "system" => system, "workload" => "sleep", "jobs" => 2_000, "concurrency" => 100, "pool" => 5, "processes" => 1,
          "completed" => 2_000 - missing, "missing" => missing, "duplicates" => 0, "timed_out" => missing.positive?,
          "span_seconds" => 2_000.0 / rate, "jobs_per_second" => rate, "enqueue_per_second" => 50_000, "peak_rss_mb" => 80,
          "peak_connections" => 3, "cpu_seconds" => 1.0, "round" => i + 1, "warmup" => false }
      end
    end

    def open_loop_cell(workload, ms, returned: nil)
      { "system" => "bobbin-fibers", "workload" => workload, "jobs" => 1_000, "concurrency" => 100, "pool" => 5, "processes" => 1,
        "completed" => 1_000, "missing" => 0, "duplicates" => 0, "jobs_per_second" => Plan::WORKLOADS.dig(workload, :rate),
        "latency_ms" => { "p50" => ms, "p90" => ms, "p99" => ms, "max" => ms }, "round" => 1, "warmup" => false,
        "returned_ms" => returned && { "p50" => returned, "p90" => returned, "p99" => returned } }.compact
    end

    def stress_cell(system, missing: 0)
      { "system" => system, "workload" => "sleep", "processes" => 6, "concurrency" => 100, "pool" => 102, "jobs" => 4_000,
        "missing" => missing, "duplicates" => 0, "timed_out" => missing.positive?, "error" => nil, "matrix" => true }
    end

    def report_of(cells) = Report.new(cells, runs: [ { "name" => "test", "options" => { rounds: 3, quick: false } } ], server_check: {}, facts: FACTS)

    def results_of(cells)
      report = report_of(cells)
      Results.new(report.summary, facts: FACTS, runs: [ { "name" => "test", "options" => { "rounds" => 3 } } ],
                  server_check: { "concurrent_requests" => 2, "seconds" => 1.0 }, matrix: cells.select { |c| c["matrix"] },
                  enqueue: report.enqueue).to_s
    end
end
