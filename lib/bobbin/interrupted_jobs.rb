# frozen_string_literal: true

module Bobbin
  # An Active Job job that a stopping worker interrupts (its shutdown_timeout passed) goes back to its queue and runs
  # again: it was neither discarded nor failed. Left to itself, Active Job runs the job's after_discard callbacks for
  # any exception that leaves perform, and the app's executor reports it to Rails.error (Sentry and the like) as
  # unhandled: an app that marks an import failed in after_discard did so for a job that then succeeded, and every
  # deploy sent one error per job still running (a trial; Solid Queue and GoodJob do neither).
  #
  # Included in ActiveJob::Base when Active Job loads. The interrupt is a Worker::Shutdown: raised in a job's thread,
  # or the cause of the Async::Cancel raised in a job's fiber (Active Job looks for a handler along the cause). Its
  # handler raises the exception again: a handler that raises skips after_discard, and the exception goes on, marked
  # as reported (Rails' own mark, which its error reporter checks so as to report an error once), to the worker,
  # which puts the job back. A job's own `rescue_from` for Exception, declared later, still comes first.
  module InterruptedJobs
    def self.included(base)
      # $!: what perform raised (the Async::Cancel of a fiber), where `shutdown` may be its cause.
      base.rescue_from("Bobbin::Worker::Shutdown") { |shutdown| InterruptedJobs.pass_on($! || shutdown) }
    end

    # Raises `error` (the exception perform raised) again, marked as reported along with its causes.
    def self.pass_on(error)
      reported!(error)
      raise error
    end

    # True when `error` is a stopping worker's interrupt: a Worker::Shutdown, or caused by one (a fiber's Async::Cancel).
    def self.interrupt?(error)
      error = error.cause until error.nil? || error.is_a?(Worker::Shutdown)
      !error.nil?
    end

    # Marks `error` and its causes as reported, so that Rails' error reporter leaves them out. A plain Bobbin::Job's
    # interrupt is marked by the app's reloader wrap (AppExecutor.wrap_job).
    def self.reported!(error)
      while error
        error.instance_variable_set(:@__rails_error_reported, true) unless error.frozen?
        error = error.cause
      end
    end
  end
end
