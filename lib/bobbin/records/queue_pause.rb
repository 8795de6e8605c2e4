# frozen_string_literal: true

module Bobbin
  # A paused queue: the claim query skips its jobs until the row is gone.
  class QueuePause < Record
    self.table_name = "bobbin_pauses"

    # Pauses `queue` (idempotent).
    def self.pause(queue)
      insert_all([ { queue: queue.to_s, created_at: Time.now.utc } ], unique_by: :bobbin_pauses_queue)
    end

    # Resumes `queue` (idempotent) and wakes the workers that take it.
    def self.resume(queue)
      where(queue: queue.to_s).delete_all.tap { |resumed| Wakeups.announce([ queue.to_s ]) if resumed.positive? }
    end
  end
end
