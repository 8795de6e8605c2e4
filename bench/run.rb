# frozen_string_literal: true

# bin/bench [--quick] [--only WORKLOAD[,…]|enqueue|stress|sweep] [--systems a,b] [--rounds N] [--[no-]stress] [--report JSON]
# [--profile]: Bobbin side by side with its peers. --only fiber_safety runs bench/fiber_safety.rb (issue 17) instead.
require "fileutils"
require "json"
require "optparse"
require "rbconfig"
require "ruby-progressbar"
require_relative "lib/ledger"
require_relative "lib/plan"
require_relative "lib/cell"
require_relative "lib/servers"
require_relative "lib/report"

options = { rounds: 5, quick: false, workloads: Plan::WORKLOADS.keys, systems: Plan::SYSTEMS.map { |s| s[:name] }, enqueue: true, stress: nil, sweep: nil,
            producers: nil, idle: nil, sqlite: nil }
EXTRA = %w[enqueue stress sweep producers idle sqlite].freeze
parser = OptionParser.new do |o|
  o.on("--quick", "reduced run for CI: one round, no warm-up, fewer jobs (< 10 min)") { options.merge!(quick: true, rounds: 1) }
  o.on("--only LIST", Array, "workloads, and/or enqueue, stress, sweep, producers, idle, sqlite; or fiber_safety (alone)") do |v|
    options[:fiber_safety] = v.include?("fiber_safety")
    v -= [ "fiber_safety" ]
    options.merge!(workloads: v - EXTRA, enqueue: v.include?("enqueue"), stress: v.include?("stress"),
                   sweep: v.include?("sweep") && Plan::SWEEP[:concurrency], producers: v.include?("producers"), idle: v.include?("idle"),
                   sqlite: v.include?("sqlite"))
  end
  o.on("--[no-]stress", "the stress matrix (default: on in full runs without --only)") { |v| options[:stress] = v }
  o.on("--[no-]sweep [C,C,…]", Array, "throughput vs concurrency (default: on in full runs, at #{Plan::SWEEP[:concurrency].join(',')})") do |v|
    raise OptionParser::InvalidArgument, "#{v.join(',')} (concurrencies are positive integers)" if v && v.any? { |c| !c.match?(/\A[1-9]\d*\z/) }

    options[:sweep] = v.nil? ? Plan::SWEEP[:concurrency] : (v && v.map(&:to_i))
  end
  o.on("--systems LIST", Array) { |v| options[:systems] = v }
  o.on("--rounds N", Integer, "measured rounds (after one warm-up)") { |v| options.merge!(rounds: v, rounds_given: true) }
  o.on("--profile", "profile Bobbin alone: per-statement costs, 10,000 in-flight 2 s jobs, concurrency limits (bench/profile.rb), " \
                    "an Active Job job's pieces (bench/profile_active_job.rb), schema 8's indexes against 9's (bench/schema_indexes.rb), " \
                    "io-event's selectors side by side (bench/selector.rb), where open-loop pickup goes (bench/profile_pickup.rb)") do
    Servers.create_database("bench_bobbin") # on a fresh machine
    system({ "BENCH_PG_PORT" => Servers.port }, RbConfig.ruby, File.join(__dir__, "profile.rb")) or exit(1)
    system({ "BENCH_PG_PORT" => Servers.port }, RbConfig.ruby, File.join(__dir__, "profile_active_job.rb")) or exit(1)
    system({ "BENCH_PG_PORT" => Servers.port }, RbConfig.ruby, File.join(__dir__, "schema_indexes.rb")) or exit(1)
    system({ "BENCH_PG_PORT" => Servers.port }, RbConfig.ruby, File.join(__dir__, "selector.rb")) or exit(1)
    exec({ "BENCH_PG_PORT" => Servers.port }, RbConfig.ruby, File.join(__dir__, "profile_pickup.rb"))
  end
  o.on("--dashboard [JOBS]", Integer, "time every Bobbin::Dashboard page with JOBS (default #{Plan::DASHBOARD[:jobs]}) jobs in the table " \
                                      "(bench/dashboard.rb), then exit") do |jobs|
    exec({ "BENCH_PG_PORT" => Servers.port }, RbConfig.ruby, File.join(__dir__, "dashboard.rb"), (jobs || Plan::DASHBOARD[:jobs]).to_s)
  end
  o.on("--report JSON[,JSON]", Array, "re-render RESULTS.md, CSV and charts from saved runs (a run's parts only: PATH:part+part), then exit") { |v| exit(Report.rerender(v) || 0) }
end
begin
  parser.parse!
rescue OptionParser::ParseError => error
  abort("bin/bench: #{error.message}")
end
if options[:fiber_safety] # the stall detector, offload and the thread lane (bench/fiber_safety.rb): its own tables and JSON
  exec({ "BENCH_PG_PORT" => Servers.port }, RbConfig.ruby, File.join(__dir__, "fiber_safety.rb"), *("--quick" if options[:quick]),
       *("--rounds=#{options[:rounds]}" if options[:rounds_given]))
end
options[:stress] = !options[:quick] if options[:stress].nil?
options[:producers] = !options[:quick] if options[:producers].nil?
options[:idle] = !options[:quick] if options[:idle].nil?
options[:sqlite] = !options[:quick] if options[:sqlite].nil?
producers = options[:producers] ? Plan::PRODUCERS[:systems].product(Plan::PRODUCERS[:modes], Plan::PRODUCERS[:counts]) : []
producers = producers.select { |name, *| options[:systems].include?(name) }
idle = options[:idle] ? Plan::IDLE[:systems].select { |name| options[:systems].include?(name) } : []
options[:sweep] = !options[:quick] && Plan::SWEEP[:concurrency] if options[:sweep].nil?
systems = Plan::SYSTEMS.select { |s| options[:systems].include?(s[:name]) }
stress = options[:stress] ? Plan.stress_cells.select { |system, *| options[:systems].include?(system[:name]) } : []
sweep = options[:sweep] ? Plan.sweep_cells(systems, options[:sweep]) : []
abort("bin/bench: unknown workload #{(options[:workloads] - Plan::WORKLOADS.keys).join(', ')}") unless (options[:workloads] - Plan::WORKLOADS.keys).empty?

Servers.check_databases!(systems)
ENV["BENCH_PG_PORT"] = Servers.port
FileUtils.mkdir_p(File.join(__dir__, "tmp")) # logs and the ledger's socket; absent in a fresh clone
ledger = Ledger::Server.new(File.join(__dir__, "tmp", "ledger.sock"))
http = Servers::FakeLLM.start
capacity = http.capacity_check
cells = []
# Every finished cell is saved at once, so a run cut short still leaves its cells (`bin/bench --report tmp/<run>.json`).
name = Report.run_name(options)
checkpoint = File.join(__dir__, "tmp", "#{name}.json")
record = lambda do |cell|
  cells << cell
  File.write(checkpoint, JSON.generate(options: options, server_check: capacity, cells: cells))
end
steady = {} # [workload, system] => jobs for the measured rounds, sized from the warm-up's throughput
enqueue_rounds = options[:enqueue] ? (1..options[:rounds]).to_a : []
total = options[:workloads].sum { |workload| Plan.workers(systems, workload).size } * (options[:rounds] + (options[:quick] ? 0 : 1)) +
        enqueue_rounds.size * systems.size + stress.size + sweep.size +
        producers.size + idle.size + (options[:sqlite] ? 1 : 0)
bar = ProgressBar.create(title: "bench", total: total, format: "%t %c/%C |%B| %e %a")
begin
  options[:workloads].each do |workload|
    spec = Plan::WORKLOADS.fetch(workload)
    first = options[:quick] ? 1 : 0 # round 0 is the warm-up
    (first..options[:rounds]).each do |round|
      Plan.workers(systems, workload).rotate(round).each do |system|
        concurrency, pool = Plan.sizing(system, workload)
        jobs = options[:quick] || (round.zero? && spec[:steady]) ? spec[:quick] : steady.fetch([ workload, system[:name] ], spec[:jobs])
        bar.title = "#{workload} r#{round} #{system[:name]}".ljust(34)
        env = Servers.env(system, pool, ledger.path, http.url)
        timeout = 60 + jobs * (spec[:latency] || 0.05) / [ concurrency, 1 ].max * 10 + (spec[:rate] ? jobs / spec[:rate] : 0) + spec.fetch(:ahead, 0) +
                  jobs * spec.fetch(:children, 0) * 0.02
        result = Cell.new(system.merge(pool: pool), workload, jobs: jobs, concurrency: concurrency, env: env,
                          ledger: ledger, round: round, rate: spec[:rate], ahead: spec[:ahead], children: spec.fetch(:children, 0)).run(timeout: timeout)
        record.call(result.merge("round" => round, "warmup" => round.zero?))
        steady[[ workload, system[:name] ]] = Plan.steady_jobs(spec, concurrency, result["jobs_per_second"]) if round.zero? && spec[:steady]
        bar.log("  ! #{result['system']} #{workload}: #{result['error'] || 'missing/duplicate/timeout'}") if Report.bad?(result)
        bar.increment
      end
    end
  end
  enqueue_rounds.each do |round|
    systems.rotate(round).each do |system|
      bar.title = "enqueue one r#{round} #{system[:name]}".ljust(34)
      pool = Plan.pool(system, 1)
      result = Cell.new(system.merge(pool: pool), Plan::ENQUEUE[:workload], jobs: Plan::ENQUEUE[options[:quick] ? :quick : :jobs], concurrency: 0,
                        env: Servers.env(system, pool, ledger.path, http.url), ledger: ledger, round: round).enqueue_one
      record.call(result.merge("round" => round, "enqueue" => true))
      bar.log("  ! #{result['system']} enqueue: #{result['error']}") if Report.bad?(result)
      bar.increment
    end
  end
  jobs = options[:quick] ? Plan::STRESS[:quick] : Plan::STRESS[:jobs]
  stress.each do |system, processes, concurrency, pool|
    bar.title = "stress #{processes}×#{concurrency} #{system[:name]}".ljust(34)
    result = Cell.new(system.merge(pool: pool), Plan::STRESS[:workload], jobs: jobs, concurrency: concurrency, processes: processes,
                      env: Servers.env(system, pool, ledger.path, http.url), ledger: ledger, round: 1).run(timeout: 90)
    record.call(result.merge("matrix" => true))
    bar.increment
  end
  sweep.each do |system, concurrency, pool|
    bar.title = "sweep C=#{concurrency} #{system[:name]}".ljust(34)
    jobs = concurrency * Plan::SWEEP[:jobs_per_slot]
    result = Cell.new(system.merge(pool: pool), Plan::SWEEP[:workload], jobs: jobs, concurrency: concurrency,
                      env: Servers.env(system, pool, ledger.path, http.url), ledger: ledger, round: 1).run(timeout: 60 + jobs * 0.05)
    record.call(result.merge("sweep" => true))
    bar.log("  ! #{result['system']} sweep C=#{concurrency}: #{result['error'] || 'missing/duplicate/timeout'}") if Report.bad?(result)
    bar.increment
  end
  # Producers: interleaved by producer count, then mode, so no system runs all of its cells in a row.
  producers.sort_by { |name, mode, count| [ count, mode, Plan::PRODUCERS[:systems].index(name) ] }.each do |name, mode, count|
    system = Plan::SYSTEMS.find { |s| s[:name] == name }
    bar.title = "producers #{count} #{mode} #{name}".ljust(34)
    pool = count + 5
    result = Cell.new(system.merge(pool: pool), "noop", jobs: Plan::PRODUCERS[options[:quick] ? :quick : :jobs], concurrency: 0,
                      env: Servers.env(system, pool, ledger.path, http.url), ledger: ledger, round: 1).produce(mode, count)
    record.call(result.merge("producers_cell" => true))
    bar.log("  ! #{name} #{count} #{mode} producers: #{result['error']}") if result["error"]
    bar.increment
  end
  idle.each do |name|
    system = Plan::SYSTEMS.find { |s| s[:name] == name }
    bar.title = "idle #{name}".ljust(34)
    concurrency, pool = Plan.sizing(system, "sleep")
    result = Cell.new(system.merge(pool: pool), "sleep", jobs: 0, concurrency: concurrency, env: Servers.env(system, pool, ledger.path, http.url),
                      ledger: ledger, round: 1).idle(Plan::IDLE[options[:quick] ? :quick : :seconds])
    record.call(result.merge("idle" => true))
    bar.increment
  end
  if options[:sqlite]
    bar.title = "sqlite pickup".ljust(34)
    spec = Plan::SQLITE_PICKUP
    out = IO.popen([ RbConfig.ruby, File.join(__dir__, "sqlite_pickup.rb"), spec[options[:quick] ? :quick : :jobs].to_s, spec[:rate].to_s ],
                   err: File.join(__dir__, "tmp", "sqlite_pickup.log"), &:read)
    lines = out.lines.filter_map { |line| JSON.parse(line) rescue nil } # rubocop:disable Style/RescueModifier -- a line that is not a result
    lines = [ { "setup" => "all", "error" => "bench/sqlite_pickup.rb failed (bench/tmp/sqlite_pickup.log)" } ] if lines.empty?
    lines.each { |line| record.call(line.merge("system" => "bobbin-fibers", "workload" => "sqlite_pickup", "sqlite_pickup" => true)) }
    bar.increment
  end
ensure
  http.stop
  ledger.close
end
Report.new(cells, runs: [ { "name" => name, "options" => options } ], server_check: capacity).write
