# frozen_string_literal: true

module Bobbin
  # A configuration value, pool size or isolation level that cannot work.
  class ConfigurationError < Error; end
end
