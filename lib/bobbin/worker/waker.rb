# frozen_string_literal: true

module Bobbin
  class Worker
    # Wakes a sleeping claim loop: a finished job, a stop, or (later) a notification of new work. Safe to call
    # from any thread, fiber or signal handler.
    class Waker
      def initialize
        @reader, @writer = IO.pipe
        @pending = false
      end

      # Makes the current or next `wait` return at once. While a wake is pending (finished jobs may each wake it) it writes
      # nothing more: one byte per wait, not one per job.
      def wake
        return if @pending

        @pending = true
        @writer.write_nonblock(".", exception: false)
      end

      # Sleeps up to `timeout` seconds or until woken. A deadline that passed between the caller's check and
      # this call waits zero, not a negative interval (IO#wait_readable raises on that). The flag clears after the
      # pipe is drained: a wake in between writes nothing, but its caller changed state before waking, and every
      # caller of `wait` looks at that state again after it returns.
      def wait(timeout)
        @reader.wait_readable([ timeout, 0 ].max)
        @reader.read_nonblock(4096, exception: false).tap { @pending = false }
      end
    end
  end
end
