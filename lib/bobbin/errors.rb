# frozen_string_literal: true

module Bobbin
  # Base class of every error Bobbin raises on purpose.
  class Error < StandardError; end

  # An argument cannot round-trip through JSON, or the arguments are too large.
  class SerializationError < Error; end

  # A configuration value, pool size or isolation level that cannot work.
  class ConfigurationError < Error; end

  # A stored job cannot be run: unknown class, arguments that are not valid JSON.
  class UnrunnableJob < Error; end
end
