# frozen_string_literal: true

# A minimal Rails application for every system measured through Active Job (Solid Queue and GoodJob always;
# Bobbin, Sidekiq and Async::Job in the Active Job mode), in production settings: eager load, no reloading, log
# level warn. BENCH_ADAPTER names the adapter.
require "rails"
require "active_record/railtie"
require "active_job/railtie"
require_relative "../lib/work"

ENV["RAILS_ENV"] = "production"
ADAPTER = ENV.fetch("BENCH_ADAPTER")
require ADAPTER == "async_job" ? "async/job/adapter/active_job" : ADAPTER
require_relative "../lib/slots" if ADAPTER == "async_job"
require "async/job/processor/redis" if ADAPTER == "async_job"

class BenchApp < Rails::Application
  config.load_defaults 8.1
  config.root = __dir__
  config.eager_load = true
  config.enable_reloading = false
  config.secret_key_base = "bench"
  config.logger = Logger.new($stderr, level: Logger::WARN)
  config.log_level = :warn
  config.active_job.queue_adapter = ADAPTER.to_sym
  config.active_support.isolation_level = :fiber if ENV["BENCH_FIBERS"]
  config.good_job.execution_mode = :external if ADAPTER == "good_job"
  config.solid_queue.silence_polling = true if ADAPTER == "solid_queue"
  if ADAPTER == "async_job" # Redis-backed queue, N jobs at a time as in its native cell (Slots)
    config.async_job.define_queue("default") do
      dequeue Async::Job::Processor::Redis, endpoint: Async::Redis::Endpoint.parse(ENV.fetch("REDIS_URL", "redis://127.0.0.1:6379/0")),
                                            prefix: "bench-async-job-aj"
      dequeue Slots, slots: Integer(ENV.fetch("BENCH_SLOTS", "100"))
    end
  end
end

class BenchActiveJob < ActiveJob::Base
  # Enqueues `count` jobs of `workload` with perform_all_later (one INSERT per slice where the adapter can).
  def self.enqueue(workload, count, prefix)
    Work.enqueue(count, prefix, workload) do |keys|
      ActiveJob.perform_all_later(keys.map { |key| Work.due(key).then { |at| at ? new(workload, key).set(wait_until: at) : new(workload, key) } })
    end
  end

  def perform(workload, key) = Work.run(workload, key)
end
Work.enqueue_one = ->(workload, key) { BenchActiveJob.perform_later(workload, key) }

Rails.application.initialize!
