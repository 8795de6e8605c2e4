# frozen_string_literal: true

# Sidekiq in the benchmark: `ruby systems/sidekiq.rb reset | enqueue WORKLOAD N PREFIX | work threads N`.
require "sidekiq"
require "json"
require_relative "../lib/work"

class BenchSidekiqJob
  include Sidekiq::Job
  sidekiq_options retry: false

  def perform(workload, key) = Work.run(workload, key)
end

Sidekiq.configure_server { |config| config.logger.level = Logger::WARN }
Sidekiq.configure_client { |config| config.logger.level = Logger::WARN }
command, *args = ARGV
case ($PROGRAM_NAME == __FILE__) && command
when "reset"
  Sidekiq.redis { |r| r.call("FLUSHDB") }
when "enqueue"
  workload, count, prefix = args
  started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  Array.new(Integer(count)) { |i| [ workload, "#{prefix}:#{i}" ] }.each_slice(1_000) do |slice|
    Sidekiq::Client.push_bulk("class" => BenchSidekiqJob, "args" => slice)
  end
  puts JSON.generate(enqueue_seconds: Process.clock_gettime(Process::CLOCK_MONOTONIC) - started)
when "work"
  _mode, size = args
  exec("sidekiq", "-r", __FILE__, "-c", size, "-q", "default", "-e", "production")
end
