# frozen_string_literal: true

# Raises, once: what the app's error reporter (Rails.error: Sentry, Honeybadger, …) should hear of.
class FailingJob < ApplicationJob
  queue_as :rails_app

  def perform(message) = raise(ArgumentError, message)
end
