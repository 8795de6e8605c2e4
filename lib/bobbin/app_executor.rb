# frozen_string_literal: true

require_relative "app_executor/reload_gate"

module Bobbin
  # Runs job code the way the host app expects: inside the Rails app's reloader when there is one (executor
  # hooks: connection and query-cache hygiene, CurrentAttributes reset; code reloading in development).
  module AppExecutor
    module_function

    # True inside a booted Rails application.
    def rails? = !!(defined?(::Rails.application) && ::Rails.application)

    # Yields inside the app's reloader (Rails) or just yields (plain Ruby).
    def wrap(&block) = rails? ? ::Rails.application.reloader.wrap(&block) : yield

    # Runs a job (the block) after any reload of the app's code it waits for (development; see ReloadGate).
    def between_reloads(&) = reloading? ? ReloadGate.current.pass(&) : yield

    # The first perform hook of a Rails app's workers: the job runs inside the app's reloader, which reports an error
    # that escapes the job to Rails.error (Sentry, Honeybadger, …) with the execution context, where the job is named
    # under :bobbin_job. Active Job adds its own :job; a Bobbin::Job's error was reported with no context at all (a trial).
    # A stopping worker's interrupt is not reported: the job goes back to its queue (InterruptedJobs).
    def wrap_job(job)
      wrap do
        name_job(job)
        yield
      rescue Exception => error # rubocop:disable Lint/RescueException -- marked, then raised again
        InterruptedJobs.reported!(error) if InterruptedJobs.interrupt?(error)
        raise
      end
    end

    # Names `job` in the context Rails.error's reports carry. An Active Job job's is set inside the reloader its execute
    # callbacks run it in: one whose class this process could not load was reported with no context at all, up to 25
    # times over an hour and a half (a trial).
    def name_job(job)
      ::ActiveSupport::ExecutionContext[:bobbin_job] = { id: job.id, class_name: job.class_name, queue: job.queue, attempt: job.attempts }
    end

    # True while the app reloads code between jobs, so class lookups must not be cached.
    def reloading?
      rails? && ::Rails.application.config.respond_to?(:enable_reloading) && ::Rails.application.config.enable_reloading ? true : false
    end
  end
end
