# frozen_string_literal: true

require "digest"
require "json"
require "net/http"
require_relative "ledger"

# The workloads of BENCHMARKS.md, shared by every system's job class so each does exactly the same work.
module Work
  URL = ENV.fetch("BENCH_HTTP_URL", "http://127.0.0.1:0")

  module_function

  # Enqueues `count` jobs keyed "prefix:i", a slice of keys per block call, and prints how long it took.
  # With BENCH_RATE set (open loop), enqueues them one at a time at that many per second instead, each key
  # ending in its enqueue time ("prefix:i:epoch"), so the harness can measure enqueue → start.
  def enqueue(count, prefix, slice: 1_000)
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    if (rate = ENV["BENCH_RATE"]&.then { |r| Float(r) })
      Integer(count).times do |i|
        ahead = started + i / rate - Process.clock_gettime(Process::CLOCK_MONOTONIC)
        Kernel.sleep(ahead) if ahead.positive?
        yield [ "#{prefix}:#{i}:#{Process.clock_gettime(Process::CLOCK_REALTIME).round(6)}" ]
      end
    else
      Array.new(Integer(count)) { |i| "#{prefix}:#{i}" }.each_slice(slice) { |keys| yield keys }
    end
    puts JSON.generate(enqueue_seconds: Process.clock_gettime(Process::CLOCK_MONOTONIC) - started)
  end

  # Runs `workload` for job `key` and reports it to the ledger.
  def run(workload, key)
    started = Process.clock_gettime(Process::CLOCK_REALTIME)
    public_send(workload, key)
    Ledger::Client.record(key, started)
  end

  def noop(_key) = nil

  # The open-loop job: a short wait, so the worker is never the limit and enqueue → start is pickup alone.
  def latency(_key) = Kernel.sleep(0.01)

  def sleep(_key) = Kernel.sleep(0.05)

  def http(_key) = get("/delay?ms=50")

  def cpu(_key) = 50_000.times { |i| Digest::SHA256.digest("bobbin-#{i}") }

  # 1,500 calls with latency uniform in 0.5–2.0 s (the key's number picks it, so every system gets the same).
  def burst(key) = get("/delay?ms=#{500 + (key.split(':').last.to_i * 7919 % 1501)}")

  def get(path)
    uri = URI("#{URL}#{path}")
    response = Net::HTTP.get_response(uri)
    raise "HTTP #{response.code}" unless response.is_a?(Net::HTTPSuccess)
  end
end
