# frozen_string_literal: true

# Marks the app's root for Rails (which otherwise walks up the directory tree looking for a config.ru: a copy of
# this app in a temporary directory would take /tmp/config.ru, if one exists, for its root).
require_relative "config/environment"

run Rails.application
