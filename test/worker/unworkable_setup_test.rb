# frozen_string_literal: true

require "test_helper"

# A worker claims and runs jobs on connections of its own. Two setups a plain-Ruby test suite reaches for cannot work
# that way; they are refused at once instead of draining nothing (a trial: 25 s on SQLite, then it returned).
class UnworkableSetupTest < Bobbin::TestCase
  teardown { Bobbin.connect(TestDatabase.url_with_pool(name: TestDatabase.application_name)) if @reconnect }

  test "a worker started inside a transaction its caller holds open is refused, and runs once it has committed" do
    Bobbin::Record.transaction do
      LedgerJob.enqueue("in the transaction")
      error = assert_raises(Bobbin::ConfigurationError) { drain(threads: 1) }
      assert_equal "Bobbin::Worker#run_until_empty inside an open transaction: the worker claims and runs jobs on connections of its own, " \
                   "which do not see what the transaction has not committed; commit first (in a test, drain after the transaction)", error.message
      assert_raises(Bobbin::ConfigurationError) { Bobbin::Worker.new(fibers: 2).run }
    end
    drain(threads: 1)
    assert_equal [ "in the transaction" ], LedgerEntry.pluck(:key)
    assert_equal 0, Bobbin::ProcessRecord.count, "the refused workers registered nothing"
  end

  test "a worker on an in-memory SQLite database is refused" do
    once_per_run
    @reconnect = true
    [ "sqlite3::memory:", "sqlite3:file::memory:?cache=shared" ].each do |url|
      Bobbin.connect(url)
      Bobbin.migrate!
      SleepJob.enqueue(0)
      error = assert_raises(Bobbin::ConfigurationError) { drain(threads: 1) }
      assert_match(/\ABobbin::Worker#run_until_empty on an in-memory SQLite database: .* use a file/, error.message)
    end
  end
end
