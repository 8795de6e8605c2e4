# frozen_string_literal: true

module Bobbin
  class Worker
    # Raised into jobs still running when a stop's shutdown_timeout has passed: in a job's thread, or as the cause of
    # the Async::Cancel a job's fiber gets. The job goes back to its queue, to run again.
    class Shutdown < Exception # rubocop:disable Lint/InheritException -- must pass through the jobs' rescue StandardError
      def initialize(message = "interrupted: the worker is stopping and its shutdown_timeout has passed; the job goes back to its queue") = super
    end
  end
end
