# frozen_string_literal: true

# Bobbin through Active Job (perform_later / perform_all_later, the adapter, a worker inside the Rails app):
# `ruby systems/bobbin_active_job.rb reset | enqueue WORKLOAD N PREFIX | work fibers|threads N`.
ENV["BENCH_ADAPTER"] = "bobbin"
ENV["BENCH_FIBERS"] = "1" if ARGV[0] == "work" && ARGV[1] == "fibers"
require_relative "../app/application"

Bobbin.config.logger.level = Logger::WARN
Bobbin.config.durable_enqueue = false if ENV["BENCH_DURABLE_ENQUEUE"] == "0" # the bobbin-fibers-aj-nondurable variant
command, *args = ARGV
case command
when "reset"
  Bobbin.migrate!
  ActiveRecord::Base.connection_pool.with_connection { |c| c.execute("TRUNCATE bobbin_jobs, bobbin_processes, bobbin_pauses") }
when "enqueue"
  BenchActiveJob.enqueue(*args)
when "produce"
  Work.produce(*args)
when "work"
  mode, size = args
  Bobbin::Worker.new(queues: [ "*" ], mode.to_sym => Integer(size), polling_interval: 0.1).start
end
