# frozen_string_literal: true

module Bobbin
  # Recorded as a job's last_error_class when the job returned with a database transaction still open on its
  # connection: the transaction was rolled back (see Worker::Execution), and the job fails or retries with this.
  class TransactionLeftOpen < Error; end
end
