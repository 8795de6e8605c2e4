# frozen_string_literal: true

# GoodJob's CLI loads the app from config/environment.rb.
require_relative "../app/application"
