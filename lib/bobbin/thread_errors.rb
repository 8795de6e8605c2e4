# frozen_string_literal: true

module Bobbin
  # Errors Bobbin's own threads hit, not jobs' errors: the first failure of an outage (a heartbeat, the clock, writing
  # outcomes), a housekeeping task failing for another reason, a claim loop that stops. Handed to
  # `Bobbin.config.on_thread_error` (Solid Queue's and GoodJob's setting of that name), by default in a Rails app to
  # Rails.error, so Sentry or Honeybadger hear of a worker losing its database as they do of a job's error. Reported as
  # handled: Bobbin goes on (it retries, or the supervisor restarts the worker).
  module ThreadErrors
    module_function

    # Reports `error`, which `task` (its log line's start, "bobbin worker 7: heartbeat") hit; `severity`: :error for
    # what waiting will not cure, :warning for an outage's start. A handler that raises is logged, never raised.
    def report(error, task:, severity: :error)
      handler = Bobbin.config.on_thread_error
      handler = rails_error_reporter if handler.nil?
      handler.call(error, { task: task, severity: severity }) if handler
    rescue StandardError => failure
      Bobbin.logger.warn("bobbin: on_thread_error raised #{failure.class}: #{failure.message}")
    end

    # Rails.error, in a booted Rails app.
    def rails_error_reporter
      return unless AppExecutor.rails?

      ->(error, context) { ::Rails.error.report(error, handled: true, severity: context[:severity], context: { bobbin: context[:task] }, source: "bobbin") }
    end
  end
end
