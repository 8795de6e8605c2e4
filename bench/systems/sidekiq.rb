# frozen_string_literal: true

# Sidekiq in the benchmark: `ruby systems/sidekiq.rb reset | enqueue WORKLOAD N PREFIX | work threads|fibers N`.
# Fiber mode is the sidekiq-fiber gem as its README sets it up: a capsule whose processor runs each thread's
# jobs as fibers (N = threads × fiber_concurrency; here 2 threads), for job classes that opt in.
require "sidekiq"
require "json"
require_relative "../lib/work"

FIBER_THREADS = 2
fibers = ENV["BENCH_SIDEKIQ_FIBERS"]&.then { |n| Integer(n) }
require "sidekiq-fiber" if fibers

class BenchSidekiqJob
  include Sidekiq::Job
  include Sidekiq::Fiber::Worker if defined?(Sidekiq::Fiber::Worker)
  sidekiq_options retry: false

  def perform(workload, key) = Work.run(workload, key)
end
Work.enqueue_one = ->(workload, key) { BenchSidekiqJob.perform_async(workload, key) }

Sidekiq.configure_server do |config|
  config.logger.level = Logger::WARN
  next unless fibers

  config[:fiber_concurrency] = (fibers / FIBER_THREADS.to_f).ceil
  config.capsule("fiber") do |capsule|
    capsule.concurrency = FIBER_THREADS
    capsule.queues = [ "default" ]
    capsule.processor_class = Sidekiq::Fiber::Processor
  end
end
Sidekiq.configure_client { |config| config.logger.level = Logger::WARN }
command, *args = ARGV
case ($PROGRAM_NAME == __FILE__) && command
when "reset"
  Sidekiq.redis { |r| r.call("FLUSHDB") }
when "enqueue"
  workload, count, prefix = args
  Work.enqueue(count, prefix, workload) do |keys|
    at = keys.filter_map { |key| Work.due(key)&.to_f }
    Sidekiq::Client.push_bulk({ "class" => BenchSidekiqJob, "args" => keys.map { |key| [ workload, key ] }, "at" => (at if at.any?) }.compact)
  end
when "produce"
  Work.produce(*args)
when "work"
  mode, size = args
  # In fiber mode the default capsule gets one thread on a queue nothing is sent to.
  ENV["BENCH_SIDEKIQ_FIBERS"] = size if mode == "fibers"
  exec("sidekiq", "-r", __FILE__, "-c", mode == "fibers" ? "1" : size, "-q", mode == "fibers" ? "idle" : "default", "-e", "production")
end
