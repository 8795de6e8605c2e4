# frozen_string_literal: true

module Bobbin
  # Deletes finished jobs older than Bobbin.config.retention; failed jobs stay until retried or discarded.
  module Retention
    BATCH = 1_000

    module_function

    # Deletes up to `batches` × BATCH expired succeeded/discarded jobs; returns how many.
    def sweep(retention: Bobbin.config.retention, batches: 10)
      return 0 if retention.nil?

      cutoff = Time.now.utc - retention
      expired = JobRecord.where(state: %w[succeeded discarded], finished_at: ...cutoff)
      deleted = 0
      batches.times do
        count = expired.limit(BATCH).delete_all
        deleted += count
        break if count < BATCH
      end
      deleted
    end
  end
end
