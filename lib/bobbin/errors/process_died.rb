# frozen_string_literal: true

module Bobbin
  # Recorded as a job's last_error_class when its process died (or was pruned as dead) while it ran; never raised.
  class ProcessDied < Error; end
end
