# frozen_string_literal: true

# WaitingJob as a plain Bobbin::Job: records its start, then waits (at most a minute) for the ledger row "KEY release".
class PlainWaitingJob
  include Bobbin::Job
  bobbin_options queue: "rails_app"

  def perform(key)
    LedgerEntry.create!(key: "#{key} started", pid: Process.pid)
    deadline = Time.now + 60
    sleep(0.05) until LedgerEntry.exists?(key: "#{key} release") || Time.now > deadline
  end
end
