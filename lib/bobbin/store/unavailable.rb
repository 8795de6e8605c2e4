# frozen_string_literal: true

module Bobbin
  module Store
    # Raised when the database cannot be reached; callers wait and retry, nothing is dropped.
    class Unavailable < Error; end
  end
end
