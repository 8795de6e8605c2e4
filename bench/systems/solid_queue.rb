# frozen_string_literal: true

# Solid Queue in the benchmark (its documented production setup: a supervisor with a dispatcher and workers).
# `ruby systems/solid_queue.rb reset | enqueue WORKLOAD N PREFIX | work threads|fibers N`
ENV["BENCH_ADAPTER"] = "solid_queue"
ENV["BENCH_FIBERS"] = "1" if ARGV[0] == "work" && ARGV[1] == "fibers"
require_relative "../app/application"
require "json"
require "yaml"

command, *args = ARGV
case command
when "reset"
  schema = File.join(Gem.loaded_specs["solid_queue"].full_gem_path, "lib/generators/solid_queue/install/templates/db/queue_schema.rb")
  ActiveRecord::Schema.verbose = false
  load(schema) unless ActiveRecord::Base.connection.table_exists?(:solid_queue_jobs)
  tables = ActiveRecord::Base.connection.tables.grep(/\Asolid_queue_/)
  ActiveRecord::Base.connection.execute("TRUNCATE #{tables.join(', ')} CASCADE")
when "enqueue"
  BenchActiveJob.enqueue(*args)
when "produce"
  Work.produce(*args)
when "work"
  mode, size = args
  config = { "production" => { "dispatchers" => [ { "polling_interval" => 1, "batch_size" => 500 } ],
                               "workers" => [ { "queues" => "*", mode => Integer(size), "processes" => 1, "polling_interval" => 0.1 } ] } }
  path = File.join(Dir.tmpdir, "bench-solid-queue-#{Process.pid}.yml")
  File.write(path, config.to_yaml)
  require "solid_queue/cli"
  SolidQueue::Cli.start([ "start", "-c", path ])
end
