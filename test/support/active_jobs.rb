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
# Takes keyword arguments, as a Solid Queue recurring task's last Hash of args is passed.
class KeywordActiveJob < ActiveJob::Base
  def perform(id, status:, tags:) = LedgerEntry.create!(key: "#{id} #{status} #{tags.keys.inspect} #{job_id}", pid: Process.pid)
end

class LimitedActiveJob < ActiveJob::Base
  limits_concurrency to: 1, key: ->(account, _n) { account }, duration: 60

  def perform(account, number) = ConcurrencyCounter.record(account, number)
end

# The job of Rails' own Active Job integration suite, in spirit: writes what it ran with (locale, time zone, when)
# to a file named by its argument, as JSON (the test reads it back).
I18n.available_locales = %i[en de] # as the Rails suite's dummy app allows
class IntegrationTestJob < ActiveJob::Base
  queue_as :integration_tests

  # The directory the jobs write to (shared by the test and the worker processes it starts).
  def self.dir = File.expand_path("../../tmp/aj-integration", __dir__)

  def perform(id)
    FileUtils.mkdir_p(self.class.dir)
    record = { "locale" => I18n.locale.to_s, "timezone" => Time.zone&.name || "UTC", "executed_at" => Time.now.to_f }
    File.write(File.join(self.class.dir, "#{id}.new"), JSON.generate(record))
    File.rename(File.join(self.class.dir, "#{id}.new"), File.join(self.class.dir, id))
  end
end
