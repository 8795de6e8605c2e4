# frozen_string_literal: true

module Bobbin
  # A job that cannot be stored as given (its arguments, queue, priority or run_at); raised before anything is
  # written, the same on PostgreSQL and SQLite. A row whose class is not a Bobbin job is refused so too.
  class EnqueueError < Error; end
end
