# frozen_string_literal: true

# GoodJob in the benchmark (external execution mode: its documented production setup).
# `ruby systems/good_job.rb reset | enqueue WORKLOAD N PREFIX | work threads N`
ENV["BENCH_ADAPTER"] = "good_job"
require_relative "../app/application"
require "json"
require "erb"

command, *args = ARGV
case command
when "reset"
  unless ActiveRecord::Base.connection.table_exists?(:good_jobs)
    template = File.join(Gem.loaded_specs["good_job"].full_gem_path, "lib/generators/good_job/templates/install/migrations/create_good_jobs.rb.erb")
    migration_version = "[8.1]"
    eval(ERB.new(File.read(template)).result(binding)) # rubocop:disable Security/Eval -- GoodJob's own install migration
    ActiveRecord::Migration.verbose = false
    CreateGoodJobs.new.migrate(:up)
  end
  ActiveRecord::Base.connection.execute("TRUNCATE good_jobs, good_job_executions, good_job_processes, good_job_batches, good_job_settings")
when "enqueue"
  BenchActiveJob.enqueue(*args)
when "produce"
  Work.produce(*args)
when "work"
  _mode, size = args
  require "good_job/cli"
  GoodJob::CLI.start([ "start", "--max-threads=#{size}", "--queues=*", "--poll-interval=1" ])
end
