# frozen_string_literal: true

# Async::Job through Active Job (its adapter, a Redis-backed "default" queue, N jobs at a time):
# `ruby systems/async_job_active_job.rb reset | enqueue WORKLOAD N PREFIX | work fibers N`.
ENV["BENCH_ADAPTER"] = "async_job"
ENV["BENCH_SLOTS"] = ARGV[2] if ARGV[0] == "work"
require_relative "../app/application"

command, *args = ARGV
case command
when "reset"
  Sync do
    client = Async::Redis::Client.new(Async::Redis::Endpoint.parse(ENV.fetch("REDIS_URL", "redis://127.0.0.1:6379/0")))
    keys = client.call("KEYS", "bench-async-job-aj:*")
    client.call("DEL", *keys) if keys.any?
    client.close
  end
when "enqueue"
  BenchActiveJob.enqueue(*args)
when "produce"
  Work.produce(*args)
when "work"
  Signal.trap("TERM") { exit }
  Sync do
    Rails.application.config.async_job.start("default")
    sleep
  end
end
