# frozen_string_literal: true

# Bobbin in the benchmark: `ruby systems/bobbin.rb reset | enqueue WORKLOAD N PREFIX | work fibers|threads N`.
require "bobbin"
require_relative "../lib/work"

class BenchJob
  include Bobbin::Job
  bobbin_options retries: 0

  def perform(workload, key) = Work.run(workload, key)
end
Work.enqueue_one = ->(workload, key) { BenchJob.enqueue(workload, key) }

Bobbin.config.logger.level = Logger::WARN
Bobbin.config.durable_enqueue = false if ENV["BENCH_DURABLE_ENQUEUE"] == "0" # the bobbin-fibers-nondurable variant
command, *args = ARGV
case ($PROGRAM_NAME == __FILE__) && command
when "reset"
  Bobbin.connect
  Bobbin.migrate!
  ActiveRecord::Base.connection_pool.with_connection { |c| c.execute("TRUNCATE bobbin_jobs, bobbin_processes, bobbin_pauses") }
when "enqueue"
  workload, count, prefix = args
  Bobbin.connect
  Work.enqueue(count, prefix, workload, slice: 5_000) { |keys| Bobbin.enqueue_all(keys.map { |key| [ BenchJob, [ workload, key ], Work.due(key)&.then { |at| { run_at: at } } ] }) }
when "produce"
  Bobbin.connect
  Work.produce(*args)
when "work"
  mode, size = args
  Bobbin.connect
  Bobbin::Worker.new(queues: [ "*" ], mode.to_sym => Integer(size), polling_interval: 0.1).start
end
