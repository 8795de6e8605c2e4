# frozen_string_literal: true

module Bobbin
  # A paused queue: the claim query skips its jobs until the row is gone.
  class QueuePause < Record
    self.table_name = "bobbin_pauses"

    # Pauses `queue` (idempotent) and tells every worker, so announcements of its new jobs wake none of them; returns
    # 1, or 0 when it was paused already.
    def self.pause(queue)
      raise ArgumentError, "a queue's name must not be blank, got #{queue.inspect}" if queue.to_s.strip.empty?

      insert_all([ { queue: queue.to_s, created_at: Time.now.utc } ], unique_by: :bobbin_pauses_queue)
        .length.tap { Wakeups.announce([ queue.to_s ], paused: true) }
    end

    # Resumes `queue` (idempotent) and wakes the workers that take it; returns 1, or 0 when it was not paused.
    def self.resume(queue)
      where(queue: queue.to_s).delete_all.tap { |resumed| Wakeups.announce([ queue.to_s ], paused: false) if resumed.positive? }
    end
  end
end
