# frozen_string_literal: true

# bin/bench --profile: where a Bobbin job's time goes, measured in one process on PostgreSQL (bench_bobbin).
#   1. noop and sleep 50 ms × 20,000 on fibers: 100 — jobs/s, Ruby CPU per job, and per hot-path statement
#      (claim, finish) its calls, time per call and rows per call.
#   2. 10,000 × sleep 2 s on fibers: 10_000 — first start → last finish, peak PostgreSQL sessions, peak RSS.
#   3. CPU-bound jobs (the cpu workload) at C = 10, fibers and threads alternated: jobs/s, the share of the wall
#      time some job was running (a fiber pool's gaps between jobs), minor GCs and GC time per job.
#   4. Concurrency limits: 1,000 noop jobs on fibers: 100, without a limit and over 10 keys with limit 1 (then at
#      most 10 run at once): jobs/s, and the promote statements that let waiting jobs through.
#   5. The perform hooks and events: Worker::Execution#call alone for a noop job, with 0, 1 and 5 around_perform
#      hooks, with and without a subscriber on /\.bobbin$/ — CPU µs per job, medians of alternated rounds.
# Prints a markdown section that bench/analysis.md quotes. `ruby profile.rb --help` for the options.
require "bobbin"
require "optparse"
require "pg"
require_relative "lib/work"

SECTIONS = %w[statements in_flight cpu limits hooks].freeze
OPTIONS = { only: SECTIONS, database: ENV.fetch("BENCH_PG_DATABASE", "bench_bobbin"), rounds: 7 }
OptionParser.new do |o|
  o.banner = "Usage: ruby profile.rb [--only SECTIONS] [--database NAME] [--rounds N]  (PostgreSQL on BENCH_PG_PORT, default 5432)"
  o.on("--only LIST", Array, "sections to run, of #{SECTIONS.join(',')} (default all)") do |list|
    unknown = list - SECTIONS
    raise OptionParser::InvalidArgument, "unknown section #{unknown.join(', ')}" if unknown.any?

    OPTIONS[:only] = list
  end
  o.on("--database NAME", "PostgreSQL database to use (default bench_bobbin, or BENCH_PG_DATABASE); its Bobbin tables are emptied") do |name|
    OPTIONS[:database] = name
  end
  o.on("--rounds N", Integer, "hooks: rounds of every variant, alternated (default 7)") { |n| OPTIONS[:rounds] = n }
end.parse!

Bobbin.config.logger.level = Logger::WARN
PORT = ENV.fetch("BENCH_PG_PORT", "5432")
DATABASE = OPTIONS[:database]
Bobbin.connect("postgres:///#{DATABASE}?port=#{PORT}&pool=12")
Bobbin.migrate!

# Every job notes when it started and finished (monotonic clock, same process).
class ProfiledJob
  include Bobbin::Job
  bobbin_options retries: 0
  TIMES = []

  def perform(seconds, work = "sleep")
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    if work == "cpu"
      Work.cpu(nil)
    elsif seconds.positive?
      sleep(seconds)
    end
    TIMES << [ started, Process.clock_gettime(Process::CLOCK_MONOTONIC) ]
  end
end

# Counts calls, seconds and rows of the worker's hot-path statements.
module StatementClock
  STATS = Hash.new { |h, k| h[k] = [ 0, 0.0, 0 ] }

  %i[claim finish promote].each do |name|
    define_method(name) do |*args, **options|
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      result = super(*args, **options)
      stat = STATS[name]
      stat[0] += 1
      stat[1] += Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
      stat[2] += { claim: -> { result.size }, finish: -> { args[1].size }, promote: -> { result } }.fetch(name).call
      result
    end
  end
end
Bobbin::Store::Guarded.prepend(StatementClock)

# ProfiledJob with a limit of one running job per key (its third argument).
class LimitedProfiledJob < ProfiledJob
  bobbin_options concurrency: { to: 1, key: ->(_seconds, _work, key) { key } }

  def perform(seconds, work, _key) = super(seconds, work)
end

def reset(jobs, seconds, work = "sleep", keys: nil)
  ActiveRecord::Base.connection_pool.with_connection { |c| c.execute("TRUNCATE bobbin_jobs, bobbin_processes") }
  rows = Array.new(jobs) { |i| keys ? [ LimitedProfiledJob, [ seconds, work, "k#{i % keys}" ] ] : [ ProfiledJob, [ seconds, work ] ] }
  rows.each_slice(5_000) { |slice| Bobbin.enqueue_all(slice) }
  ProfiledJob::TIMES.clear
  StatementClock::STATS.clear
end

def rss_mb = File.read("/proc/self/status")[/VmRSS:\s+(\d+)/, 1].to_i / 1024

def sessions(pg) = pg.exec_params("SELECT count(*) FROM pg_stat_activity WHERE datname = $1", [ DATABASE ]).getvalue(0, 0).to_i

# Runs a drained worker (`fibers: n` or `threads: n`) while a thread samples RSS and PostgreSQL sessions every 50 ms.
def measure(**pool)
  pg = PG.connect(dbname: "postgres", port: PORT)
  peaks = { rss: rss_mb, sessions: 0, base_rss: rss_mb }
  sampler = Thread.new { loop { peaks[:rss] = [ peaks[:rss], rss_mb ].max; peaks[:sessions] = [ peaks[:sessions], sessions(pg) ].max; sleep 0.05 } }
  gc = GC.stat.slice(:minor_gc_count, :time)
  cpu = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
  Bobbin::Worker.new(**pool, polling_interval: 0.05).run_until_empty
  cpu = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID) - cpu
  sampler.kill
  pg.close
  span = ProfiledJob::TIMES.map(&:last).max - ProfiledJob::TIMES.map(&:first).min
  { span: span, cpu: cpu, jobs: ProfiledJob::TIMES.size, covered: covered(ProfiledJob::TIMES) / span,
    minor_gcs: GC.stat(:minor_gc_count) - gc[:minor_gc_count], gc_ms: GC.stat(:time) - gc[:time] }.merge(peaks)
end

# Seconds during which at least one of the [start, finish] intervals was running.
def covered(times)
  reach = -Float::INFINITY
  times.sort.sum do |started, finished|
    (finished - [ started, reach ].max).clamp(0, nil).tap { reach = [ reach, finished ].max }
  end
end

def statements_section
  puts "| jobs | jobs/s | process CPU per job | claim: calls, ms/call, rows/call | finish: calls, ms/call, rows/call |"
  puts "|---|---|---|---|---|"
  [ [ "20,000 noop, fibers: 100", 0.0 ], [ "20,000 × sleep 50 ms, fibers: 100", 0.05 ] ].each do |label, seconds|
    reset(20_000, seconds)
    m = measure(fibers: 100)
    cells = StatementClock::STATS.values_at(:claim, :finish).map do |calls, total, rows|
      format("%d, %.2f, %.1f", calls, total / calls * 1000, rows.to_f / calls)
    end
    puts format("| %s | %.0f | %.0f µs | %s | %s |", label, m[:jobs] / m[:span], m[:cpu] / m[:jobs] * 1e6, *cells)
  end
end

def in_flight_section
  reset(10_000, 2.0)
  GC.start
  m = measure(fibers: 10_000)
  puts "\n10,000 × sleep 2 s on fibers: 10_000 in one process: #{m[:jobs]} ran, first start → last finish " \
       "#{m[:span].round(2)} s (ideal 2.0), peak #{m[:sessions]} PostgreSQL sessions, peak RSS #{m[:rss]} MB " \
       "(#{m[:base_rss]} MB before the worker started)."
end

def cpu_section
  puts "\n| 200 × cpu (50,000 SHA256), C = 10 | jobs/s | a job running | minor GCs per job | GC ms per job |"
  puts "|---|---|---|---|---|"
  [ :threads, :fibers, :threads, :fibers ].each do |mode|
    reset(200, 0.0, "cpu")
    GC.start
    m = measure(mode => 10)
    puts format("| %s: 10 | %.1f | %.1f %% | %.1f | %.1f |", mode, m[:jobs] / m[:span], m[:covered] * 100,
                m[:minor_gcs].fdiv(m[:jobs]), m[:gc_ms].fdiv(m[:jobs]))
  end
end

def limits_section
  puts "\n| 1,000 noop jobs, fibers: 100 | jobs/s | promote: calls, ms/call, jobs let through per call |"
  puts "|---|---|---|"
  [ [ "no limit", nil ], [ "10 keys, limit 1", 10 ], [ "no limit", nil ], [ "10 keys, limit 1", 10 ] ].each do |label, keys|
    reset(1_000, 0.0, keys: keys)
    m = measure(fibers: 100)
    calls, total, rows = StatementClock::STATS[:promote]
    promote = calls.zero? ? "—" : format("%d, %.2f, %.1f", calls, total / calls * 1000, rows.to_f / calls)
    puts format("| %s | %.0f | %s |", label, m[:jobs] / m[:span], promote)
  end
end

# A Bobbin::Job that does nothing: what is left is Bobbin's own cost per job.
class NoopProfiledJob
  include Bobbin::Job

  def perform = nil
end

HOOK_CALLS = 20_000

# Worker::Execution#call alone (no claim, no outcome write): [CPU, wall] µs per noop job for `hooks` around_perform
# hooks added as users add them (`around_perform { |job, run| run.call }`), with or without a subscriber on every
# Bobbin event (a block taking the event, as instrumentation.rb documents: Active Support builds an Event per event
# then). CPU time of this thread, because on a shared machine the wall time also counts the other processes' turns.
def execution_us(hooks, subscribed)
  config = Bobbin::Configuration.new
  hooks.times { config.around_perform { |_job, run| run.call } }
  execution = Bobbin::Worker::Execution.new(hooks: config.perform_hooks)
  job = Bobbin::Store::ClaimedJob.new(1, "default", "NoopProfiledJob", "[]", 1, 1, nil, 0, nil)
  subscriber = ActiveSupport::Notifications.subscribe(/\.bobbin$/) { |_event| nil } if subscribed
  1_000.times { execution.call(job) } # class lookup cached, code warm
  GC.start
  clocks = [ Process::CLOCK_THREAD_CPUTIME_ID, Process::CLOCK_MONOTONIC ]
  started = clocks.map { |clock| Process.clock_gettime(clock) }
  HOOK_CALLS.times { execution.call(job) }
  clocks.zip(started).map { |clock, start| (Process.clock_gettime(clock) - start) / HOOK_CALLS * 1e6 }
ensure
  ActiveSupport::Notifications.unsubscribe(subscriber) if subscriber
end

def hooks_section
  variants = [ 0, 1, 5 ].product([ false, true ])
  runs = Hash.new { |hash, key| hash[key] = [] }
  # Every round runs every variant, each round starting one variant later, so none always runs first or last.
  OPTIONS[:rounds].times { |round| variants.rotate(round).each { |variant| runs[variant] << execution_us(*variant) } }
  median = ->(values) { values.sort[values.size / 2] }
  cell = lambda do |variant|
    cpu, wall = runs[variant].transpose
    format("%.1f (%.1f–%.1f), wall %.1f", median.call(cpu), cpu.min, cpu.max, median.call(wall))
  end
  puts "\nWorker::Execution#call, noop Bobbin::Job, CPU µs per job: median of #{OPTIONS[:rounds]} alternated rounds of " \
       "#{HOOK_CALLS.to_s.reverse.scan(/\d{1,3}/).join(',').reverse} calls (min–max), and the wall time's median\n\n"
  puts "| around_perform hooks | no subscriber | subscriber on /\\.bobbin$/ |"
  puts "|---|---:|---:|"
  [ 0, 1, 5 ].each { |hooks| puts "| #{hooks} | #{cell.call([ hooks, false ])} | #{cell.call([ hooks, true ])} |" }
end

puts "## Profile: where a Bobbin job's time goes (bench/profile.rb, one process, PostgreSQL)\n\n"
OPTIONS[:only].each { |section| send(:"#{section}_section") }
