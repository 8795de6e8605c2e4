# frozen_string_literal: true

# Fiber safety (bin/bench --only fiber_safety; issue 17): the stall detector, offload and the thread lane, measured
# on PostgreSQL, each cell a fresh worker in a process of its own, variants interleaved (A B C, B C A, …):
#   falcon           50 × 50 ms HTTP on fibers: 50 (thread_lane: 5), alone / beside 5 × 1 s non-yielding C calls as
#                    fibers / the same calls on the thread lane: HTTP span and latency, when and how each stall was named
#   busy, ongoing    a job busy in Ruby for 300 ms; one 2 s C call (when the "so far" log line comes)
#   lag              ten jobs holding the loop 40 ms and one 80 ms in one loop turn: none past the threshold
#   offload          3 × deflate 32 MB beside a fiber waking every 5 ms: its worst lateness, Bobbin offload on/off,
#                    async without a worker pool, async with a thread per call
#   cost             noop and sleep 50 ms on fibers: 100, detector on/off, offload on/off (A B C C B A in one process):
#                    jobs/s, CPU per job; an idle pool's CPU per second
#   false_positives  fibers: 10,000 fed 10,000 × sleep 1 s waves, 500 noop/s and garbage-making jobs: stalls reported
# Prints markdown tables and writes bench/results/<date>-fiber_safety.json.
#   ruby bench/fiber_safety.rb [--quick] [--rounds N] [--only falcon,busy,ongoing,lag,offload,cost,false_positives]
#   ruby bench/fiber_safety.rb --report results/<run>.json    (the tables again, from a saved run)
# Database: BENCH_DATABASE_URL, else postgres:///bench_fiber_safety on the port of .database_url.
require "bobbin"
require "fileutils"
require "json"
require "optparse"
require "rbconfig"
require_relative "lib/servers"
require_relative "lib/facts"
require_relative "lib/fiber_safety/cells"
require_relative "lib/fiber_safety/producer"
require_relative "lib/fiber_safety/summary"

DATABASE = ENV.fetch("BENCH_DATABASE_URL", "postgres:///bench_fiber_safety?port=#{Servers.port}")
SIZES = { full: { rounds: 7, noop_jobs: 50_000, sleep_jobs: 10_000, cost_repeats: 2, deflate_mb: 32, fp_seconds: 20, fp_rounds: 3 },
          quick: { rounds: 2, noop_jobs: 5_000, sleep_jobs: 2_000, cost_repeats: 1, deflate_mb: 32, fp_seconds: 8, fp_rounds: 1 } }.freeze
EXPERIMENTS = { "falcon" => [ "alone", "fibers", "thread lane" ], "busy" => [ "300 ms" ], "ongoing" => [ "2 s" ], "lag" => [ "10 × 40 ms + 80 ms" ],
                "offload" => [ "offload 4", "offload 0", "async, no worker pool", "async, a thread per call" ], "cost" => %w[noop sleep idle] }.freeze
LOG = File.join(__dir__, "tmp", "fiber_safety.log")

if ARGV.first == "--report" # re-renders the tables of a saved run
  run = JSON.parse(File.read(ARGV.fetch(1)))
  puts FiberSafety::Summary.new(run["cells"], run["sizes"].transform_keys(&:to_sym))
  exit
end
if ARGV.first == "--cell" || ARGV.first == "--produce"
  Bobbin.config.logger.level = Logger::WARN
  sizes = JSON.parse(ENV.fetch("BENCH_SIZES"), symbolize_names: true)
  if ARGV.first == "--produce"
    Bobbin.connect(DATABASE)
    puts JSON.generate(FiberSafety::Producer.new(sizes[:fp_seconds]).run)
  else
    cells = FiberSafety::Cells.new(url: DATABASE, http_url: ENV.fetch("BENCH_HTTP_URL"), sizes: sizes)
    puts JSON.generate(cells.public_send(ARGV[1], ARGV[2]).merge(jobs: cells.jobs))
  end
  exit
end

options = { quick: false, only: EXPERIMENTS.keys + [ "false_positives" ] }
OptionParser.new do |o|
  o.on("--quick", "two rounds, smaller cells (a few minutes)") { options[:quick] = true }
  o.on("--rounds N", Integer) { |n| options[:rounds] = n }
  o.on("--only LIST", Array, "of #{options[:only].join(', ')}") { |list| options[:only] = list }
end.parse!
sizes = SIZES.fetch(options[:quick] ? :quick : :full).merge(options.slice(:rounds))
FileUtils.mkdir_p(File.join(__dir__, "tmp"))
system("createdb", "-p", DATABASE[/port=(\d+)/, 1] || "5432", DATABASE[%r{///([^?]+)}, 1], err: File::NULL) # exists already: fine
Bobbin.config.logger.level = Logger::WARN
Bobbin.connect(DATABASE)
Bobbin.migrate!
http = Servers::FakeLLM.start
env = { "BENCH_HTTP_URL" => http.url, "BENCH_SIZES" => JSON.generate(sizes) }

# Runs one cell in a process of its own; its last line of output is its result.
run_cell = lambda do |name, variant|
  out = IO.popen(env, [ RbConfig.ruby, __FILE__, "--cell", name, variant ], err: [ LOG, "a" ], &:read)
  JSON.parse(out.lines.last.to_s)
rescue JSON::ParserError
  { "error" => "the cell failed (#{LOG})" }
end

# The worker runs until the producer is done and every job it enqueued has finished.
false_positives = lambda do
  worker = IO.popen(env, [ RbConfig.ruby, __FILE__, "--cell", "false_positives" ], err: [ LOG, "a" ])
  worker.gets == "ready\n" or raise "the false-positive worker did not start (#{LOG})"
  produced = JSON.parse(IO.popen(env, [ RbConfig.ruby, __FILE__, "--produce" ], err: [ LOG, "a" ], &:read).lines.last)
  sleep(0.5) until Bobbin::JobRecord.where(state: %w[ready running]).none?
  Process.kill(:TERM, worker.pid)
  result = JSON.parse(worker.read.lines.last)
  result.merge("produced" => produced, "counts" => Bobbin.counts.slice("succeeded", "failed"))
ensure
  worker&.close
end

cells = []
experiments = EXPERIMENTS.slice(*options[:only])
started = Time.now
begin
  (options[:quick] ? 1 : 0).upto(sizes[:rounds]) do |round| # round 0 warms up (not counted)
    experiments.each do |name, variants|
      variants.rotate(round).each do |variant|
        result = run_cell.call(name, variant)
        cells << { "experiment" => name, "variant" => variant, "round" => round, "result" => result } if round.positive?
        warn("round #{round} #{name} #{variant}: #{JSON.generate(result)[0, 300]}")
      end
    end
  end
  if options[:only].include?("false_positives")
    1.upto(sizes[:fp_rounds]) do |round|
      Bobbin::Record.connection_pool.with_connection { |c| c.execute("TRUNCATE bobbin_jobs, bobbin_processes") }
      cells << { "experiment" => "false_positives", "variant" => "fibers 10000", "round" => round, "result" => false_positives.call }
      warn("false positives round #{round}: #{JSON.generate(cells.last['result'])[0, 300]}")
    end
  end
ensure
  http.stop
end

name = "#{started.strftime('%Y-%m-%d-%H%M')}-fiber_safety#{'-quick' if options[:quick]}"
path = File.join(__dir__, "results", "#{name}.json")
File.write(path, JSON.pretty_generate("run" => name, "sizes" => sizes, "facts" => Facts.collect, "cells" => cells))
puts FiberSafety::Summary.new(cells, sizes)
warn("wrote #{path}")
