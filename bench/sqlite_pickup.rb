# frozen_string_literal: true

# SQLite pickup (bin/bench --only sqlite): enqueue → start of jobs arriving one at a time at RATE per second to an
# idle fiber worker on the embedded default, in the three setups a SQLite user has: the worker in the enqueuing
# process (async supervisor mode, bin/demo), a worker in another process (it watches the database file), and
# that other process with notifications off (polling every polling_interval, as before wake-ups existed).
# Prints one JSON line per setup. Usage: ruby bench/sqlite_pickup.rb [JOBS] [RATE]
require "bundler/setup"
require "bobbin"
require "json"
require "tmpdir"

JOBS = Integer(ARGV[0] || 1_000)
RATE = Float(ARGV[1] || 200)

# Reports how late it started: now − the wall clock time its enqueuer put in its arguments.
class PickupJob
  include Bobbin::Job

  class << self
    attr_accessor :report
  end

  def perform(enqueued_at) = self.class.report.call(Process.clock_gettime(Process::CLOCK_REALTIME) - enqueued_at)
end

def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)

# Enqueues JOBS jobs at RATE per second on a fixed schedule (open loop: a late enqueue does not delay the next).
def arrive
  start = now
  JOBS.times do |i|
    wait = start + i / RATE - now
    sleep(wait) if wait.positive?
    PickupJob.enqueue(Process.clock_gettime(Process::CLOCK_REALTIME))
  end
end

def percentiles(seconds)
  sorted = seconds.sort
  %w[p50 p90 p99].zip([ 0.5, 0.9, 0.99 ]).to_h { |name, q| [ name, (sorted[(q * (sorted.size - 1)).round] * 1000).round(2) ] }.merge("max" => (sorted.last * 1000).round(2))
end

def worker = Bobbin::Worker.new(queues: [ "*" ], fibers: 20)

def same_process(url)
  latencies = Thread::Queue.new
  PickupJob.report = ->(late) { latencies << late }
  Bobbin.connect(url)
  runner = worker
  thread = Thread.new { runner.run }
  sleep(1) # booted and idle
  arrive
  Array.new(JOBS) { latencies.pop(timeout: 60) or abort("a job did not start within 60 s") }
ensure
  runner&.stop
  thread&.join
  ActiveRecord::Base.connection_handler.clear_all_connections!
end

def other_process(url, notifications:)
  reader, writer = IO.pipe
  pid = fork do
    reader.close
    writer.sync = true
    PickupJob.report = ->(late) { writer.puts(late) }
    Bobbin.config.notifications = notifications
    Bobbin.connect(url)
    runner = worker
    Signal.trap("TERM") { Thread.new { runner.stop } }
    runner.run
  end
  writer.close
  Bobbin.connect(url)
  sleep(2) # booted and idle
  arrive
  Array.new(JOBS) { Float(reader.gets || abort("the worker process ended early")) }
ensure
  Process.kill(:TERM, pid) if pid
  Process.wait(pid) if pid
  reader&.close
end

Dir.mktmpdir("bobbin-sqlite-pickup") do |dir|
  url = "sqlite3:#{dir}/pickup.sqlite3"
  Bobbin.connect(url)
  Bobbin.migrate!
  ActiveRecord::Base.connection_handler.clear_all_connections!
  { "same process" => -> { same_process(url) },
    "separate process" => -> { other_process(url, notifications: true) },
    "separate process, notifications off" => -> { other_process(url, notifications: false) } }.each do |setup, run|
    puts JSON.generate("setup" => setup, "jobs" => JOBS, "rate" => RATE, "polling_interval" => Bobbin.config.polling_interval,
                       "latency_ms" => percentiles(run.call))
  end
end
