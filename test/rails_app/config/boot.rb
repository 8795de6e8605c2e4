# frozen_string_literal: true

# The dummy app runs on Bobbin's own bundle (the repository's Gemfile), as the tests start it.
ENV["BUNDLE_GEMFILE"] ||= File.expand_path("../../../Gemfile", __dir__)

require "bundler/setup" # Set up gems listed in the Gemfile.
