# frozen_string_literal: true

# Bobbin in the benchmark: `ruby systems/bobbin.rb reset | enqueue WORKLOAD N PREFIX | work fibers|threads N`.
require "bobbin"
require_relative "../lib/work"

class BenchJob
  include Bobbin::Job
  bobbin_options retries: 0

  def perform(workload, key) = Work.run(workload, key)
end

Bobbin.config.logger.level = Logger::WARN
command, *args = ARGV
case ($PROGRAM_NAME == __FILE__) && command
when "reset"
  Bobbin.connect
  Bobbin.migrate!
  ActiveRecord::Base.connection_pool.with_connection { |c| c.execute("TRUNCATE bobbin_jobs, bobbin_processes, bobbin_pauses") }
when "enqueue"
  workload, count, prefix = args
  Bobbin.connect
  started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  Array.new(Integer(count)) { |i| [ BenchJob, [ workload, "#{prefix}:#{i}" ] ] }.each_slice(5_000) { |slice| Bobbin.enqueue_all(slice) }
  puts JSON.generate(enqueue_seconds: Process.clock_gettime(Process::CLOCK_MONOTONIC) - started)
when "work"
  mode, size = args
  Bobbin.connect
  Bobbin::Worker.new(queues: [ "*" ], mode.to_sym => Integer(size), polling_interval: 0.1).start
end
