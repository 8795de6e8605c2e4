# frozen_string_literal: true

# Rails' own Active Job integration suite (activejob/test/integration) against Bobbin: RailsSuite copies this file to
# activejob/test/support/integration/adapters/bobbin.rb and runs the suite with AJ_ADAPTER=bobbin. The suite's dummy
# app (SQLite) holds Bobbin's tables; a forked worker runs its integration_tests queue.
module BobbinJobsManager
  def setup
    require "bobbin"
    ActiveJob::Base.queue_adapter = :bobbin
  end

  def clear_jobs
    Bobbin::JobRecord.delete_all if Bobbin::Record.connection.table_exists?(:bobbin_jobs)
  end

  def start_workers
    Bobbin.migrate!
    Bobbin.config.logger = Logger.new(File::NULL)
    ActiveRecord::Base.connection_handler.connection_pool_list(:all).each(&:disconnect!) # a fork must not share SQLite handles
    @pid = fork do
      Bobbin::Worker.new(queues: [ "integration_tests" ], threads: 2, polling_interval: 0.1).start
      exit!(0)
    end
  end

  def stop_workers
    Process.kill(:TERM, @pid)
    Process.wait(@pid)
  end
end
