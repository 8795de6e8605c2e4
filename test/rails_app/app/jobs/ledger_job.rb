# frozen_string_literal: true

# Records that it ran: its key, the Bobbin row it ran from (provider_job_id) and the adapter it ran under.
class LedgerJob < ApplicationJob
  queue_as :rails_app

  # Writes one ledger row "KEY provider_job_id=ID adapter=NAME".
  def perform(key)
    LedgerEntry.create!(key: "#{key} provider_job_id=#{provider_job_id} adapter=#{self.class.queue_adapter_name}", pid: Process.pid)
  end
end
