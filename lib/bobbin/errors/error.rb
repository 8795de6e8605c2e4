# frozen_string_literal: true

module Bobbin
  # Base class of every error Bobbin raises on purpose.
  class Error < StandardError; end
end
