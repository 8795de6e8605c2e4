# frozen_string_literal: true

# bin/bench --profile (third part): where an open-loop job's pickup goes on PostgreSQL (bench_bobbin). Jobs of 10 ms
# arrive one at a time at each --rates value from --producers processes (bench's open-loop cell, without the harness;
# the producers start together once all have booted, as there)
# to --workers idle fiber workers of 100; each worker stamps its claims, and each job when it starts. Per job:
# the enqueue call, call start → job start, call return → job start, and the last split into the wait until the claim
# that took it was sent, that claim's round trip, and claim → start. Also: claims sent (and empty ones), jobs per claim,
# garbage collections in the workers while jobs arrived, and pickup per second of the run.
#
#   ruby bench/profile_pickup.rb [--rates 200,2000] [--seconds 4] [--producers N] [--workers 1]
require "bundler/setup"
require "bobbin"
require "json"
require "optparse"
require "tmpdir"
require_relative "lib/start_line"

ENV["DATABASE_URL"] ||= "postgres:///bench_bobbin?port=#{ENV.fetch('BENCH_PG_PORT', '5432')}&pool=5"
Bobbin.config.logger.level = Logger::WARN

# The open-loop job: notes when it started, then waits 10 ms (so the worker is never the limit).
class PickupJob
  include Bobbin::Job
  bobbin_options retries: 0

  def perform(index)
    PickupProfile.started(index)
    Kernel.sleep(0.01)
  end
end

module PickupProfile
  module_function

  def now = Process.clock_gettime(Process::CLOCK_REALTIME)

  # In a worker: flat arrays and integer-keyed hashes, so stamping allocates no objects that the GC would count.
  def started(index)
    @starts[index + 1] = now # the warm-up job is -1
    @gc_at_first ||= GC.stat.slice(:count, :major_gc_count, :time) if index.zero?
    @done += 1
  end

  # Stamps every claim of this process's workers (sent, returned, jobs) and which claim took each job.
  module ClaimStamps
    def claim(...)
      sent = PickupProfile.now
      jobs = super
      PickupProfile.claimed(sent, jobs)
      jobs
    end
  end

  def claimed(sent, jobs)
    n = @claims.size / 3
    @claims << sent << now << jobs.size
    jobs.each { |job| @claim_of[job.id] = n }
  end

  def worker(dir, index, jobs)
    @starts = Array.new(jobs + 1)
    @done = 0
    @claims = []
    @claim_of = {}
    Bobbin::Store::PostgreSQL.prepend(ClaimStamps)
    Bobbin.connect
    worker = Bobbin::Worker.new(queues: [ "*" ], fibers: 100, polling_interval: 0.1)
    Thread.new do
      Kernel.sleep(0.05) until @done > jobs || File.exist?(File.join(dir, "stop"))
      worker.stop
    end
    worker.start
    gc = GC.stat.slice(:count, :major_gc_count, :time)
    gc = gc.to_h { |key, value| [ key, value - @gc_at_first.fetch(key, value) ] } if @gc_at_first
    File.write(File.join(dir, "worker-#{index}.json"), JSON.generate(starts: @starts, claims: @claims.each_slice(3).to_a, claim_of: @claim_of, gc: gc))
  end

  # Enqueues jobs k, k + stride, … at `rate` per second overall, one call each; writes [index, id, call, return].
  def producer(dir, k, stride, rate, jobs)
    Bobbin.connect
    rows = []
    begin_at = StartLine.wait(dir, k)
    (k...jobs).step(stride) do |i|
      ahead = begin_at + i / rate - Process.clock_gettime(Process::CLOCK_MONOTONIC)
      Kernel.sleep(ahead) if ahead.positive?
      call = now
      id = Bobbin.enqueue_all([ [ PickupJob, [ i ] ] ]).first
      rows << [ i, id, call, now ]
    end
    File.write(File.join(dir, "producer-#{k}.json"), JSON.generate(rows))
  end

  def spawn(*args) = Process.spawn(RbConfig.ruby, __FILE__, *args.map(&:to_s))

  # One rate: workers up, one warm-up job, then the producers; returns the report's lines.
  def run(rate, seconds, producers, workers)
    jobs = (rate * seconds).round
    Dir.mktmpdir("bobbin-pickup") do |dir|
      ActiveRecord::Base.connection_pool.with_connection { |c| c.execute("TRUNCATE bobbin_jobs, bobbin_processes, bobbin_pauses") }
      pids = Array.new(workers) { |w| spawn("worker", dir, w, jobs) }
      Kernel.sleep(0.05) until Bobbin::ProcessRecord.count >= workers
      warm = Bobbin.enqueue_all([ [ PickupJob, [ -1 ] ] ]).first
      Kernel.sleep(0.05) until Bobbin::JobRecord.where(id: warm).where.not(finished_at: nil).exists?
      producer_pids = Array.new(producers) { |k| spawn("producer", dir, k, producers, rate, jobs) }
      failed = []
      StartLine.go(dir, producers) { producer_pids.any? { |pid| Process.wait(pid, Process::WNOHANG)&.then { failed << pid } } }
      (producer_pids - failed).each { |pid| Process.wait(pid) }
      Kernel.sleep(0.05) until Bobbin::JobRecord.where.not(finished_at: nil).count > jobs
      File.write(File.join(dir, "stop"), "")
      pids.each { |pid| Process.wait(pid) }
      report(rate, producers, workers, read(dir, producers, workers))
    end
  end

  def read(dir, producers, workers)
    data = { starts: {}, claims: [], by_id: {}, gc: Hash.new(0) }
    workers.times do |w|
      worker = JSON.parse(File.read(File.join(dir, "worker-#{w}.json")))
      worker["starts"].each_with_index { |at, i| data[:starts][i - 1] = at if at }
      base = data[:claims].size
      data[:claims].concat(worker["claims"])
      worker["claim_of"].each { |id, n| data[:by_id][id.to_i] = data[:claims][base + n] }
      worker["gc"].each { |key, value| data[:gc][key] += value }
    end
    data.merge(rows: Array.new(producers) { |k| JSON.parse(File.read(File.join(dir, "producer-#{k}.json"))) }.flatten(1))
  end

  SEGMENTS = [ "enqueue call", "call start → job start", "call return → job start", "  return → claim sent",
               "  claim round trip", "  claim returned → job start", "jobs per claim (count)" ].freeze

  # The series reported by second of the run, each with its format (ms).
  BY_SECOND = { "call return → job start" => "%.1f", "claim round trip" => "%.2f", "enqueue call" => "%.2f" }.freeze

  def report(rate, producers, workers, data)
    times = Hash.new { |hash, key| hash[key] = [] }
    # By second of the run: series name => { second => [seconds, …] }.
    by_second = BY_SECOND.keys.to_h { |name| [ name, Hash.new { |hash, key| hash[key] = [] } ] }
    data[:rows].each do |index, id, call, returned|
      start = data[:starts][index] or next
      sent, back, count = data[:by_id][id]
      second = (index / rate).floor
      by_second["call return → job start"][second] << start - returned
      by_second["claim round trip"][second] << back - sent if sent
      by_second["enqueue call"][second] << returned - call
      [ returned - call, start - call, start - returned, sent && sent - returned, sent && back - sent, back && start - back, count && count / 1000.0 ]
        .each_with_index { |value, i| times[SEGMENTS[i]] << value if value }
    end
    gc = data[:gc]
    empty = data[:claims].count { |claim| claim[2].zero? }
    [ "", "#{rate} jobs/s arriving from #{producers} producer processes, #{workers} worker(s) of 100 fibers: #{data[:rows].size} jobs (ms)", "",
      "| segment | p50 | p90 | p99 | max |", "|---|---|---|---|---|",
      *SEGMENTS.map { |name| "| #{name} | #{%w[0.5 0.9 0.99 1.0].map { |q| format('%.2f', quantile(times[name], q.to_f) * 1000) }.join(' | ')} |" }, "",
      "claims: #{data[:claims].size} (#{empty} empty); GC in the workers while jobs arrived: #{gc['count']} (#{gc['major_gc_count']} major), #{gc['time']} ms",
      *by_second.map do |name, series|
        "#{name} by second of the run (p50 / p99): " +
          series.sort.map { |second, values| format("%ds #{BY_SECOND[name]} / #{BY_SECOND[name]}", second, quantile(values, 0.5) * 1000, quantile(values, 0.99) * 1000) }.join(", ")
      end ]
  end

  def quantile(values, q)
    return Float::NAN if values.empty?

    sorted = values.sort
    sorted[((sorted.size * q).ceil - 1).clamp(0, sorted.size - 1)]
  end
end

case ARGV.first
when "worker" then PickupProfile.worker(ARGV[1], Integer(ARGV[2]), Integer(ARGV[3]))
when "producer" then PickupProfile.producer(ARGV[1], *ARGV[2..3].map { |arg| Integer(arg) }, Float(ARGV[4]), Integer(ARGV[5]))
else
  options = { rates: [ 200, 2_000 ], seconds: 4.0, producers: nil, workers: 1 }
  OptionParser.new do |o|
    o.on("--rates LIST", Array) { |v| options[:rates] = v.map { |rate| Integer(rate) } }
    o.on("--seconds S", Float) { |v| options[:seconds] = v }
    o.on("--producers N", Integer, "default: one per 500 jobs/s, as in bin/bench") { |v| options[:producers] = v }
    o.on("--workers N", Integer) { |v| options[:workers] = v }
  end.parse!
  Bobbin.connect
  Bobbin.migrate!
  puts "# Where pickup goes (bench/profile_pickup.rb, PostgreSQL)"
  options[:rates].each do |rate|
    producers = options[:producers] || (rate / 500.0).ceil
    puts PickupProfile.run(rate, options[:seconds], producers, options[:workers])
  end
end
