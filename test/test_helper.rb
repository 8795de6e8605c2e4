# frozen_string_literal: true

require "minitest/autorun"
require "active_support"
require "active_support/test_case"
require "bobbin"
require_relative "support/database"
require_relative "support/jobs"
require_relative "support/processes"

TestDatabase.setup!

module Bobbin
  # Base of Bobbin's tests: a real database, emptied before each test.
  class TestCase < ActiveSupport::TestCase
    include TestProcesses

    setup do
      TestDatabase.clean!
      Recorder.reset
    end

    def postgres? = TestDatabase.postgres?

    def skip_unless_postgres = (skip("PostgreSQL only") unless postgres?)

    def drain(**options) = Bobbin::Worker.new(polling_interval: 0.05, **options).run_until_empty
  end
end
