# frozen_string_literal: true

require "digest"
require "json"
require "net/http"
require_relative "ledger"
require_relative "app_db"
require_relative "start_line"
require_relative "../../demo/llm_stream"

# The workloads of BENCHMARKS.md, shared by every system's job class so each does exactly the same work.
module Work
  URL = ENV.fetch("BENCH_HTTP_URL", "http://127.0.0.1:0")
  TOKENS = 40

  class << self
    # How a job enqueues one more job in this system: `->(workload, key) { … }` (set by each system's script).
    attr_accessor :enqueue_one
  end

  module_function

  # The ledger prefix suffix under which an open-loop producer reports when each enqueue call returned (its commit
  # is then done): "prefix~returned:i".
  RETURNED = "~returned"

  # Enqueues `count` jobs of `workload` keyed "prefix:i", a slice of keys per block call (the system's bulk API),
  # and prints how long it took. With BENCH_ENQUEUE=one, through the system's single-job API (`enqueue_one`)
  # instead, one call per job as fast as they go. With BENCH_RATE set (open loop), one slice of one key at a
  # time at that many per second, each key ending in its enqueue time ("prefix:i:epoch"), so the harness can
  # measure enqueue → start; with BENCH_AHEAD, each job is scheduled that many seconds ahead and its key ends in
  # that due time instead (start − due is its lateness); each call's return is reported too (RETURNED). BENCH_STRIDE/BENCH_OFFSET split the keys between several
  # enqueuing processes (process k of n takes i = k, k + n, …), for arrival rates one process cannot keep; with
  # BENCH_BARRIER they start together once all have booted (StartLine).
  def enqueue(count, prefix, workload, slice: 1_000)
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    if ENV["BENCH_ENQUEUE"] == "one"
      Integer(count).times { |i| enqueue_one.call(workload, "#{prefix}:#{i}") }
    elsif (rate = ENV["BENCH_RATE"]&.then { |r| Float(r) })
      started = StartLine.wait(ENV["BENCH_BARRIER"], ENV.fetch("BENCH_OFFSET", "0")) if ENV["BENCH_BARRIER"]
      due_in = Float(ENV.fetch("BENCH_AHEAD", "0"))
      (Integer(ENV.fetch("BENCH_OFFSET", "0"))...Integer(count)).step(Integer(ENV.fetch("BENCH_STRIDE", "1"))) do |i|
        ahead = started + i / rate - Process.clock_gettime(Process::CLOCK_MONOTONIC)
        Kernel.sleep(ahead) if ahead.positive?
        yield [ "#{prefix}:#{i}:#{(Process.clock_gettime(Process::CLOCK_REALTIME) + due_in).round(6)}" ]
        Ledger::Client.record("#{prefix}#{RETURNED}:#{i}", Process.clock_gettime(Process::CLOCK_REALTIME)) if due_in.zero?
      end
    else
      Array.new(Integer(count)) { |i| "#{prefix}:#{i}" }.each_slice(slice) { |keys| yield keys }
    end
    puts JSON.generate(enqueue_seconds: Process.clock_gettime(Process::CLOCK_MONOTONIC) - started)
  end

  # `producers` threads (mode "threads") or fibers under Async ("fibers") enqueue `count` no-op jobs between them,
  # one `enqueue_one` call per job, as fast as they go; prints jobs/s and the p50/p99 of a call in milliseconds.
  def produce(mode, producers, count, prefix)
    producers = Integer(producers)
    each = Integer(count) / producers
    calls = Array.new(producers) { [] }
    enqueue = lambda do |p|
      each.times do |i|
        started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        enqueue_one.call("noop", "#{prefix}:#{p * each + i}")
        calls[p] << Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
      end
    end
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    mode == "fibers" ? in_fibers(producers, &enqueue) : Array.new(producers) { |p| Thread.new { enqueue.call(p) } }.each(&:join)
    seconds = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
    times = calls.flatten.sort
    puts JSON.generate(jobs_per_second: times.size / seconds, p50_ms: times[times.size / 2] * 1000, p99_ms: times[(times.size * 0.99).ceil - 1] * 1000)
  end

  # Runs the block for 0...count in as many fibers of one Async reactor (the current one, or a new one).
  def in_fibers(count, &block)
    require "async"
    ActiveSupport::IsolatedExecutionState.isolation_level = :fiber if defined?(ActiveSupport::IsolatedExecutionState)
    Sync { |task| Array.new(count) { |p| task.async { block.call(p) } }.each(&:wait) }
  end

  # The time job `key` is scheduled for (BENCH_AHEAD), nil when it runs now.
  def due(key) = ENV["BENCH_AHEAD"] && Time.at(key.split(":").last.to_f)

  # Runs `workload` for job `key` and reports it to the ledger.
  def run(workload, key)
    started = Process.clock_gettime(Process::CLOCK_REALTIME)
    public_send(workload, key)
    Ledger::Client.record(key, started)
  end

  def noop(_key) = nil

  # The open-loop job: a short wait, so the worker is never the limit and enqueue → start is pickup alone.
  def latency(_key) = Kernel.sleep(0.01)

  # The same job at 2,000 arrivals a second, and scheduled 2 s ahead.
  def latency_2k(key) = latency(key)

  def scheduled(key) = latency(key)

  def sleep(_key) = Kernel.sleep(0.05)

  def http(_key) = get("/delay?ms=50")

  def cpu(_key) = 50_000.times { |i| Digest::SHA256.digest("bobbin-#{i}") }

  # A chat reply: 40 tokens 20 ms apart; per token, append it to the message row and enqueue a broadcast job
  # (a no-op keyed "prefix~child:n:i", which the harness counts too).
  def llm_stream(key)
    db = AppDB.ready!
    message = db::Message.create!(key: key)
    child = key.sub(":", "~child:")
    i = 0
    LLMStream.each_token("#{URL}/stream?tokens=#{TOKENS}&interval_ms=20") do |token|
      db::Message.where(id: message.id).update_all([ "body = body || ?", token ])
      enqueue_one.call("noop", "#{child}:#{i}")
      i += 1
    end
  end

  # Read a row, call a 50 ms API, write the row.
  def db_mix(key)
    db = AppDB.ready!
    id = key.split(":").last.to_i % AppDB::ROWS + 1
    db::Row.find(id)
    get("/delay?ms=50")
    db::Row.where(id: id).update_all("hits = hits + 1")
  end

  # 1,500 calls with latency uniform in 0.5–2.0 s (the key's number picks it, so every system gets the same).
  def burst(key) = get("/delay?ms=#{500 + (key.split(':').last.to_i * 7919 % 1501)}")

  def get(path)
    uri = URI("#{URL}#{path}")
    response = Net::HTTP.get_response(uri)
    raise "HTTP #{response.code}" unless response.is_a?(Net::HTTPSuccess)
  end
end
