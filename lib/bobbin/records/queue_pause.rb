# frozen_string_literal: true

module Bobbin
  # A paused queue: the claim query skips its jobs until the row is gone.
  class QueuePause < Record
    self.table_name = "bobbin_pauses"

    # Pauses `queue` (idempotent).
    def self.pause(queue)
      insert_all([ { queue: queue.to_s, created_at: Time.now.utc } ], unique_by: :bobbin_pauses_queue)
    end

    # Resumes `queue` (idempotent).
    def self.resume(queue)
      where(queue: queue.to_s).delete_all
    end
  end
end
