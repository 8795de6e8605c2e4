# frozen_string_literal: true

require_relative "work"

# What the benchmark runs: the systems (each in its documented production mode, with the pool it gets) and
# the workloads (concurrency, job count for full and quick runs, and the per-job latency of I/O workloads).
module Plan
  # The Redis systems' jobs reach PostgreSQL (bench_app) only in the workloads that use the app's tables.
  SYSTEMS = [
    { name: "bobbin-fibers", script: "bobbin", mode: "fibers", database: "bench_bobbin", pool: 5 },
    { name: "bobbin-threads", script: "bobbin", mode: "threads", database: "bench_bobbin", pool: :exact },
    { name: "solid_queue-fibers", script: "solid_queue", mode: "fibers", database: "bench_solid_queue", pool: 10 },
    { name: "solid_queue-threads", script: "solid_queue", mode: "threads", database: "bench_solid_queue", pool: :threads },
    { name: "good_job", script: "good_job", mode: "threads", database: "bench_good_job", pool: :threads },
    { name: "sidekiq", script: "sidekiq", mode: "threads", database: "bench_app", pool: :threads },
    { name: "sidekiq-fiber", script: "sidekiq", mode: "fibers", database: "bench_app", pool: :threads },
    { name: "async_job", script: "async_job", mode: "fibers", database: "bench_app", pool: 5 },
    { name: "river", script: "river", mode: "threads", database: "bench_river", pool: :threads },
    # The Active Job mode: the systems with their own API measured again through perform_later / perform_all_later
    # and their Active Job adapter, in the Rails app of bench/app (Solid Queue and GoodJob are always measured so).
    { name: "bobbin-fibers-aj", script: "bobbin_active_job", mode: "fibers", database: "bench_bobbin", pool: 5, active_job: true },
    { name: "sidekiq-aj", script: "sidekiq_active_job", mode: "threads", database: "bench_app", pool: :threads, active_job: true },
    { name: "async_job-aj", script: "async_job_active_job", mode: "fibers", database: "bench_app", pool: 5, active_job: true },
    # perform_later with Bobbin.config.durable_enqueue = false (a lone enqueue commits without waiting for the WAL flush,
    # as Redis's default appendfsync everysec does): only one-at-a-time enqueue differs, so it runs only there.
    { name: "bobbin-fibers-aj-nondurable", script: "bobbin_active_job", mode: "fibers", database: "bench_bobbin", pool: 5, active_job: true,
      env: { "BENCH_DURABLE_ENQUEUE" => "0" }, enqueue_only: true },
    # Bobbin's own API with durable_enqueue = false: what the enqueue's WAL flush costs pickup, measured beside the
    # durable default in the open-loop cells (and one-at-a-time enqueue), where alone it differs.
    { name: "bobbin-fibers-nondurable", script: "bobbin", mode: "fibers", database: "bench_bobbin", pool: 5,
      env: { "BENCH_DURABLE_ENQUEUE" => "0" }, open_loop_only: true }
  ].freeze

  # The systems compared in the "through Active Job" table: the Active Job mode's, and the peers that only have it.
  ACTIVE_JOB = %w[bobbin-fibers-aj sidekiq-aj async_job-aj solid_queue-fibers solid_queue-threads good_job].freeze
  # Bobbin's Active Job path with durable_enqueue = false, shown as its own perform_later row in that table.
  NONDURABLE = "bobbin-fibers-aj-nondurable"
  # Bobbin's own API with durable_enqueue = false, run in the open-loop cells beside the durable default.
  NONDURABLE_OPEN_LOOP = "bobbin-fibers-nondurable"

  # steady: in full runs the measured rounds' job count comes from the warm-up's throughput (Plan.steady_jobs);
  # the others are scenarios with a fixed count. latency: seconds each job waits (nil for CPU-bound); threads: the thread systems' concurrency where it
  # differs (a thread pool cannot sensibly hold 1,500 threads, nor can PostgreSQL hold their connections).
  WORKLOADS = {
    "noop" => { concurrency: 100, jobs: 10_000, quick: 3_000, latency: nil, steady: true },
    "sleep" => { concurrency: 100, jobs: 10_000, quick: 2_000, latency: 0.05, steady: true },
    "http" => { concurrency: 100, jobs: 10_000, quick: 2_000, latency: 0.05, steady: true },
    "cpu" => { concurrency: 10, jobs: 400, quick: 100, latency: nil, steady: true },
    # llm_stream: parents/s; each parent also enqueues 40 broadcast jobs, all of which must run before the cell ends.
    "llm_stream" => { concurrency: 100, jobs: 300, quick: 100, latency: 0.8, children: Work::TOKENS },
    "db_mix" => { concurrency: 100, jobs: 5_000, quick: 1_000, latency: 0.05, steady: true },
    "burst" => { concurrency: 1_500, threads: 50, jobs: 1_500, quick: 600, latency: 1.25 },
    # Open loop: jobs arrive one at a time at `rate` per second while the worker runs; reports enqueue → start.
    "latency" => { concurrency: 100, jobs: 3_000, quick: 1_000, latency: nil, rate: 200 },
    "latency_2k" => { concurrency: 100, jobs: 12_000, quick: 4_000, latency: nil, rate: 2_000 },
    # Scheduled: jobs arrive at `rate`, each scheduled `ahead` seconds later; reports start − run_at (lateness).
    "scheduled" => { concurrency: 100, jobs: 1_000, quick: 400, latency: nil, rate: 100, ahead: 2.0 }
  }.freeze

  # The stress matrix: several worker processes of each PostgreSQL system against PostgreSQL's default
  # max_connections (100), each process with the pool its system's docs ask for (threads + 2 for thread pools;
  # Bobbin: its threads, or 5 for a fiber pool of any size). Reports which cells complete and what fails.
  STRESS = { workload: "sleep", processes: [ 2, 6 ], concurrency: [ 25, 100, 200 ], jobs: 4_000, quick: 1_000 }.freeze

  # One-at-a-time enqueue: each system's single-job API (Bobbin `Job.enqueue`, `perform_later`, `perform_async`)
  # called in a loop by one process, no worker running; bulk enqueue is measured in every cell.
  ENQUEUE = { workload: "noop", jobs: 2_000, quick: 500 }.freeze

  # Enqueue from many producers: 1–64 threads, or fibers under Async, in one process, one single-job call per job
  # (`Job.enqueue`, `perform_later`, `perform_async`, …); one system per distinct enqueue path.
  PRODUCERS = { counts: [ 1, 4, 16, 64 ], modes: %w[threads fibers], jobs: 4_000, quick: 800,
                systems: %w[bobbin-fibers bobbin-fibers-aj sidekiq sidekiq-aj async_job async_job-aj solid_queue-threads good_job river] }.freeze

  # An idle worker's load on its database: transactions committed per minute with no job to run.
  IDLE = { seconds: 60, quick: 15, systems: %w[bobbin-fibers solid_queue-threads good_job river] }.freeze

  # SQLite pickup (bench/sqlite_pickup.rb): jobs arriving at `rate` to an idle worker in the same process, in another, and
  # in another with notifications off.
  SQLITE_PICKUP = { jobs: 2_000, quick: 300, rate: 200 }.freeze

  # Throughput vs concurrency: sleep 50 ms at each concurrency, one round per system, 40 jobs per slot (2 s at
  # the ideal C ÷ latency). Full runs sweep it by default; `--sweep 10,100` picks the concurrencies.
  SWEEP = { workload: "sleep", concurrency: [ 10, 50, 100, 200, 500 ], jobs_per_slot: 40 }.freeze

  # Dashboard page renders (bench/dashboard.rb, `bin/bench --dashboard [JOBS]`): the jobs table's size and mix, and
  # the issue's target for every page.
  DASHBOARD = { jobs: 1_000_000, ready: 200_000, failed: 50_000, quick: 50_000, target_ms: 150 }.freeze

  # Thread peers get a pool of threads + 5, capped at 50: with the pool their docs ask for, 100 threads exceed
  # PostgreSQL's default max_connections (the stress matrix shows that case).
  MAX_THREAD_POOL = 50

  module_function

  # True for a variant that differs from its system only in how it enqueues: it runs only where that shows.
  def variant?(system) = system[:enqueue_only] || system[:open_loop_only]

  # The systems that run `workload`'s cells (an open-loop-only variant runs in the open-loop ones).
  def workers(systems, workload)
    open_loop = WORKLOADS.fetch(workload).key?(:rate)
    systems.reject { |s| variant?(s) && !(s[:open_loop_only] && open_loop) }
  end

  # [system, processes, concurrency, pool] for every stress cell of the PostgreSQL systems.
  def stress_cells
    SYSTEMS.reject { |s| s[:script].start_with?("sidekiq", "async_job") || variant?(s) }.flat_map do |system|
      STRESS[:processes].product(STRESS[:concurrency]).map do |processes, concurrency|
        pool = case system[:pool]
        when :threads then concurrency + 2
        when :exact then concurrency
        else system[:pool]
        end
        [ system, processes, concurrency, pool ]
      end
    end
  end

  # [system, concurrency, pool] for every sweep cell; pools as in the main tables (thread peers capped at 50).
  def sweep_cells(systems, concurrencies)
    systems.reject { |s| variant?(s) }.flat_map do |system|
      concurrencies.map { |concurrency| [ system, concurrency, pool(system, concurrency) ] }
    end
  end

  # Jobs for a steady cell: enough for STEADY_SECONDS at the warm-up's rate, at least 10 × the concurrency
  # (BENCHMARKS.md: ≥ 10× concurrency and ≥ 5 s per cell), at most MAX_JOBS.
  STEADY_SECONDS = 6
  MAX_JOBS = 100_000

  def steady_jobs(spec, concurrency, rate)
    return spec[:jobs] unless rate

    (rate * STEADY_SECONDS).ceil.clamp(10 * concurrency, MAX_JOBS)
  end

  # The concurrency and Active Record pool a system gets for a workload.
  def sizing(system, workload)
    spec = WORKLOADS.fetch(workload)
    concurrency = system[:mode] == "threads" ? spec.fetch(:threads, spec[:concurrency]) : spec[:concurrency]
    [ concurrency, pool(system, concurrency) ]
  end

  def pool(system, concurrency)
    case system[:pool]
    when :threads then [ concurrency + 5, MAX_THREAD_POOL ].min
    when :exact then concurrency # Bobbin refuses to boot a thread pool larger than its AR pool
    else system[:pool]
    end
  end
end
