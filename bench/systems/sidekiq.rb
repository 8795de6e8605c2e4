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
  Work.enqueue(count, prefix) { |keys| Sidekiq::Client.push_bulk("class" => BenchSidekiqJob, "args" => keys.map { |key| [ workload, key ] }) }
when "work"
  _mode, size = args
  exec("sidekiq", "-r", __FILE__, "-c", size, "-q", "default", "-e", "production")
end
