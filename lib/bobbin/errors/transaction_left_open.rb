# frozen_string_literal: true

module Bobbin
  # A job returned with a database transaction still open on its connection: the transaction was rolled back (the
  # connection thrown away), and the job fails or retries with this error.
  class TransactionLeftOpen < Error; end
end
