# frozen_string_literal: true

# Records its start, then waits (at most a minute) for the ledger row "KEY release"; records an after_discard.
class WaitingJob < ApplicationJob
  queue_as :rails_app

  after_discard { |job, error| LedgerEntry.create!(key: "#{job.arguments.first} discarded: #{error.class}", pid: Process.pid) }

  def perform(key)
    LedgerEntry.create!(key: "#{key} started", pid: Process.pid)
    deadline = Time.now + 60
    sleep(0.05) until LedgerEntry.exists?(key: "#{key} release") || Time.now > deadline
  end
end
