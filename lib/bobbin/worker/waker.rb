# frozen_string_literal: true

module Bobbin
  class Worker
    # Wakes a sleeping claim loop: a finished job, a stop, or (later) a notification of new work. Safe to call
    # from any thread, fiber or signal handler.
    class Waker
      def initialize
        @reader, @writer = IO.pipe
      end

      # Makes the current or next `wait` return at once.
      def wake = @writer.write_nonblock(".", exception: false)

      # Sleeps up to `timeout` seconds or until woken. A deadline that passed between the caller's check and
      # this call waits zero, not a negative interval (IO#wait_readable raises on that).
      def wait(timeout)
        @reader.wait_readable([ timeout, 0 ].max)
        @reader.read_nonblock(4096, exception: false)
      end
    end
  end
end
