# frozen_string_literal: true

module Bobbin
  # Recorded as a job's last_error_class when the database refused the job's own outcome (see
  # Worker::OutcomeBuffer); never raised.
  class OutcomeNotWritten < Error; end
end
