# frozen_string_literal: true

module Bobbin
  # An argument cannot round-trip through JSON, or the arguments are too large or too deeply nested.
  class SerializationError < EnqueueError; end
end
