# frozen_string_literal: true

module Bobbin
  # A paused queue: the claim query skips its jobs until the row is gone.
  class QueuePause < Record
    self.table_name = "bobbin_pauses"
    utc_times :created_at

    # Pauses `queue` (idempotent) and tells every worker, so announcements of its new jobs wake none of them; returns
    # 1, or 0 when it was paused already.
    def self.pause(queue)
      queue = checked(queue)
      # A worker's queue list reads `reports_*` as every queue starting with `reports_`; a pause names one queue, and
      # `bobbin pause 'reports_*'` said "paused reports_*" while every reports_ queue went on being claimed (a review).
      raise ArgumentError, pattern_named("pause", queue) if queue.end_with?("*")
      # `pause("mail,web")` (as `--queues` reads a list) or "mail " returned 1 and paused nothing a job can be in: an
      # enqueue refuses such a name (a review). `resume` takes any name, so a pause stored before this check can go.
      unless Client::Fields.queue_name?(Client::Fields.utf8(queue))
        raise ArgumentError, "no job can be in a queue named #{Printable.printable(queue[0, 80].inspect)}: a queue's name has no " \
                             "commas, control characters or spaces around it (pause the queues of a list one by one)"
      end

      insert_all([ { queue: queue, created_at: Time.now.utc } ], unique_by: :bobbin_pauses_queue)
        .length.tap { Wakeups.announce([ queue ], paused: true) }
    end

    # Resumes `queue` (idempotent) and wakes the workers that take it; returns 1, or 0 when it was not paused. A pattern
    # no pause has (none takes one) is refused as a pause's is: `resume("*")` returned 0, and said nothing was resumed.
    def self.resume(queue)
      queue = checked(queue)
      resumed = where(queue: queue).delete_all
      raise ArgumentError, pattern_named("resume", queue) if resumed.zero? && queue.end_with?("*")

      resumed.tap { Wakeups.announce([ queue ], paused: false) if resumed.positive? }
    end

    # A pause or resume (`action`) refused for naming a pattern.
    def self.pattern_named(action, queue)
      "a #{action} names one queue; #{Printable.printable(queue[0, 80].inspect)} is a pattern (as a worker's queues read it): " \
        "#{action} each queue it matches (`bobbin queues` lists them)"
    end
    private_class_method :pattern_named

    # `queue` as a String that can name a queue: not blank, at most the bytes an enqueue allows (no job is in a longer
    # one, and the dashboard's notice repeating a 5,000-byte name overflowed its cookie); else ArgumentError.
    def self.checked(queue)
      queue = queue.to_s
      raise ArgumentError, "a queue's name must not be blank, got #{queue.inspect}" if queue.strip.empty?
      if queue.bytesize > Client::Fields::QUEUE_BYTES
        raise ArgumentError, "a queue's name is at most #{Client::Fields::QUEUE_BYTES} bytes, got #{queue.bytesize} (#{queue[0, 40].inspect}…)"
      end

      queue
    end
  end
end
