# frozen_string_literal: true

# A dummy app as `rails new` (Rails 8.1) lays it out, with only the frameworks Bobbin touches. The tests in
# test/rails boot it in real processes: perform_later, `bobbin work` and `bobbin doctor` from this directory.
require_relative "boot"

require "rails"
# Pick the frameworks you want:
require "active_model/railtie"
require "active_job/railtie"
require "active_record/railtie"

# Require the gems listed in Gemfile, including any gems
# you've limited to :test, :development, or :production.
Bundler.require(*Rails.groups)

module RailsApp
  class Application < Rails::Application
    # Initialize configuration defaults for originally generated Rails version.
    config.load_defaults 8.1

    # Configuration for the application, engines, and railties goes here.
    config.active_job.queue_adapter = ENV.fetch("RAILS_APP_QUEUE_ADAPTER", "bobbin").to_sym # another, to test what Bobbin says then
    config.active_support.isolation_level = :fiber # Bobbin's fiber pools need it (checked at boot)

    # The tests read what the app logs from its output, and nothing is written under this directory.
    config.logger = ActiveSupport::TaggedLogging.logger($stdout)
    config.secret_key_base = "bobbin-dummy-app"
  end
end
