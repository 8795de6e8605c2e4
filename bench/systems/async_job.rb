# frozen_string_literal: true

# Async::Job with its Redis processor (fibers; jobs live in Redis only while queued or running).
# `ruby systems/async_job.rb reset | enqueue WORKLOAD N PREFIX | work fibers N`
#
# It has no concurrency setting of its own: the processor pops every ready job and starts a fiber for each. To
# give it the same N slots as every other system, its delegate runs at most N jobs at once (Async::Semaphore);
# the rest wait, popped, in their fibers.
require "async"
require "async/semaphore"
require "async/job"
require "async/job/processor/redis"
require "json"
require_relative "../lib/work"

PREFIX = "bench-async-job"

# The processor's delegate: runs each job hash it pops, N at a time (the end of the chain: nothing to start).
class BenchAsyncJob
  def initialize(slots = nil)
    @slots = slots && Async::Semaphore.new(slots)
  end

  def call(job) = @slots.acquire { Work.run(job["workload"], job["key"]) }
  def start = nil
  def stop = nil
end

def redis_endpoint = Async::Redis::Endpoint.parse(ENV.fetch("REDIS_URL", "redis://127.0.0.1:6379/0"))

command, *args = ARGV
case ($PROGRAM_NAME == __FILE__) && command
when "reset"
  Sync do
    client = Async::Redis::Client.new(redis_endpoint)
    keys = client.call("KEYS", "#{PREFIX}:*")
    client.call("DEL", *keys) if keys.any?
    client.close
  end
when "enqueue"
  workload, count, prefix = args
  Sync do
    server = Async::Job::Processor::Redis.new(BenchAsyncJob.new, endpoint: redis_endpoint, prefix: PREFIX)
    Work.enqueue_one = ->(job_workload, key) { server.call({ "workload" => job_workload, "key" => key }) }
    Work.enqueue(count, prefix, workload) do |keys|
      keys.each { |key| server.call({ "workload" => workload, "key" => key, "scheduled_at" => Work.due(key) }.compact) }
    end
  end
when "produce"
  mode, *rest = args
  abort("async_job: its client runs inside an Async reactor; threads cannot share it") if mode == "threads"
  Sync do
    server = Async::Job::Processor::Redis.new(BenchAsyncJob.new, endpoint: redis_endpoint, prefix: PREFIX)
    Work.enqueue_one = ->(job_workload, key) { server.call({ "workload" => job_workload, "key" => key }) }
    Work.produce(mode, *rest)
  end
when "work"
  _mode, size = args
  Sync do
    server = Async::Job::Processor::Redis.new(BenchAsyncJob.new(Integer(size)), endpoint: redis_endpoint, prefix: PREFIX)
    Work.enqueue_one = ->(workload, key) { server.call({ "workload" => workload, "key" => key }) }
    Signal.trap("TERM") { exit }
    server.start
    sleep
  end
end
