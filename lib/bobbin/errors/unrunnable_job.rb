# frozen_string_literal: true

module Bobbin
  # A stored job cannot be run: unknown class, arguments that are not valid JSON.
  class UnrunnableJob < Error; end
end
