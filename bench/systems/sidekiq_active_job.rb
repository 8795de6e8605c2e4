# frozen_string_literal: true

# Sidekiq through Active Job (its own adapter; the worker runs the Rails app's jobs inside Sidekiq's Rails executor):
# `ruby systems/sidekiq_active_job.rb reset | enqueue WORKLOAD N PREFIX | work threads N`.
ENV["BENCH_ADAPTER"] = "sidekiq"
require_relative "../app/application"

command, *args = ARGV
case command
when "reset"
  Sidekiq.redis { |r| r.call("FLUSHDB") }
when "enqueue"
  BenchActiveJob.enqueue(*args)
when "produce"
  Work.produce(*args)
when "work"
  _mode, size = args
  exec("sidekiq", "-r", File.expand_path("../config/environment.rb", __dir__), "-c", size, "-q", "default", "-e", "production")
end
