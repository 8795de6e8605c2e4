# frozen_string_literal: true

module Bobbin
  # A job that cannot be stored as given (its arguments, queue, priority or run_at); raised before anything is
  # written, the same on PostgreSQL and SQLite. (A class that is not a Bobbin job raises ArgumentError instead.)
  class EnqueueError < Error; end
end
