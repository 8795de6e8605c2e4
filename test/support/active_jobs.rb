# frozen_string_literal: true

# Active Job classes the tests run, in the test process and in the worker processes they start (`--require`).
require "bobbin"
require_relative "jobs"

ActiveJob::Base.queue_adapter = :bobbin # found by name: `require "bobbin"` is all it takes
ActiveJob::Base.logger = Logger.new(File::NULL)

# Records the provider_job_id it sees inside perform.
class ProviderIdActiveJob < ActiveJob::Base
  def perform(key) = LedgerEntry.create!(key: "#{key} provider_job_id=#{provider_job_id.inspect}", pid: Process.pid)
end

# Three steps (ActiveJob::Continuable). Step b records the cursor it starts from, then advances it (a checkpoint
# each time) until the test adds the ledger row "KEY release". Every record names the process that wrote it.
class StepsActiveJob < ActiveJob::Base
  include ActiveJob::Continuable
  self.resume_options = { wait: 0 }
  queue_as :steps

  def perform(key)
    step(:a) { record("#{key} a") }
    step(:b, start: 0) do |step|
      record("#{key} b from #{step.cursor}")
      until LedgerEntry.exists?(key: "#{key} release")
        step.advance!
        sleep(0.01)
      end
    end
    step(:c) { record("#{key} c") }
  end

  private
    def record(what) = LedgerEntry.create!(key: "#{what} pid=#{Process.pid}", pid: Process.pid)
end

# At most one job per account runs at once; a stuck holder keeps the slot for 60 s at most.
class LimitedActiveJob < ActiveJob::Base
  limits_concurrency to: 1, key: ->(account, _n) { account }, duration: 60

  def perform(account, number) = LedgerEntry.create!(key: "#{account}/#{number}", pid: Process.pid)
end
