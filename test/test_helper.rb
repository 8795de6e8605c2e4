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

    # Reads through a PostgreSQL restart: a query that meets a dropped connection is retried on a fresh one.
    def query
      yield
    rescue ActiveRecord::ActiveRecordError
      ActiveRecord::Base.connection_handler.clear_all_connections!
      sleep(0.2)
      retry
    end

    # Asserts the block raises Bobbin::EnqueueError matching `pattern` and that nothing was written.
    def assert_refused(pattern, &block)
      error = assert_raises(Bobbin::EnqueueError, &block)
      assert_match pattern, error.message
      assert_equal 0, Bobbin::JobRecord.count, "nothing was written"
      error
    end
  end
end
