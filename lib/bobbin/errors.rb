# frozen_string_literal: true

module Bobbin
  # Base class of every error Bobbin raises on purpose.
  class Error < StandardError; end

  # A job that cannot be stored as given (its arguments, queue, priority or run_at); raised before anything is
  # written, the same on PostgreSQL and SQLite. (A class that is not a Bobbin job raises ArgumentError instead.)
  class EnqueueError < Error; end

  # An argument cannot round-trip through JSON, or the arguments are too large or too deeply nested.
  class SerializationError < EnqueueError; end

  # A configuration value, pool size or isolation level that cannot work.
  class ConfigurationError < Error; end

  # Recorded as a job's last_error_class when its process died (or was pruned as dead) while it ran; never raised.
  class ProcessDied < Error; end

  # A stored job cannot be run: unknown class, arguments that are not valid JSON.
  class UnrunnableJob < Error; end
end
