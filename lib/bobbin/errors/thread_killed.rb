# frozen_string_literal: true

module Bobbin
  # Recorded as a job's last_error_class when the job ended its own thread (Thread.exit, Thread#kill) while it ran;
  # never raised.
  class ThreadKilled < Error; end
end
