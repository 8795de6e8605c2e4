# frozen_string_literal: true

# A plain Bobbin::Job (no Active Job) that raises, once: the app's error reporter should hear of it, naming the job.
class PlainFailingJob
  include Bobbin::Job
  bobbin_options queue: "rails_app", retries: 0

  def perform(message) = raise(message)
end
