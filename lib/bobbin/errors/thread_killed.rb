# frozen_string_literal: true

module Bobbin
  # Recorded as a job's last_error_class when the job ended its own thread or fiber (Thread.exit, Thread#kill, Fiber#kill) while it ran;
  # never raised.
  class ThreadKilled < Error; end
end
