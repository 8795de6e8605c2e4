# frozen_string_literal: true

# WaitingJob as a plain Bobbin::Job: records its start, then waits for the ledger row "KEY release", as WaitingJob does.
class PlainWaitingJob
  include Bobbin::Job
  bobbin_options queue: "rails_app"

  def perform(key) = WaitingJob.new.perform(key)
end
