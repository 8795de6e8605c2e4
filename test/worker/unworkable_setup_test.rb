# frozen_string_literal: true

require "test_helper"

# A worker claims and runs jobs on connections of its own. Two setups a plain-Ruby test suite reaches for cannot work
# that way; they are refused at once instead of draining nothing (a trial: 25 s on SQLite, then it returned).
class UnworkableSetupTest < Bobbin::TestCase
  teardown { Bobbin.connect(TestDatabase.url_with_pool(name: TestDatabase.application_name)) if @reconnect }

  test "a worker started inside a transaction its caller holds open is refused, and runs once it has committed" do
    Bobbin::Record.transaction do
      LedgerJob.enqueue("in the transaction")
      error = nil
      log = bobbin_log { error = assert_raises(Bobbin::ConfigurationError) { drain(threads: 1) } }
      assert_equal "", log, "a refusal is its error alone (it warned \"could not deregister … undefined method 'any?' for nil\")"
      assert_equal "Bobbin::Worker#run_until_empty inside an open transaction: the worker claims jobs on connections of its own, which do " \
                   "not see what the transaction has not committed; commit first (a Rails test that runs a worker needs " \
                   "`self.use_transactional_tests = false`)", error.message
      assert_raises(Bobbin::ConfigurationError) { Bobbin::Worker.new(fibers: 2).run }
    end
    drain(threads: 1)
    assert_equal [ "in the transaction" ], LedgerEntry.pluck(:key)
    assert_equal 0, Bobbin::ProcessRecord.count, "the refused workers registered nothing"
  end

  # Rails' transactional tests pin one connection for every thread, in a transaction around the test: a drain there
  # ran nothing, after 2.5 s on PostgreSQL and 25 s on SQLite (a trial).
  test "a worker started in a Rails transactional test (a pinned connection in a transaction) is refused" do
    pool = Bobbin::Record.connection_pool
    pool.pin_connection!(true)
    begin
      LedgerJob.enqueue("in the test's transaction")
      error = assert_raises(Bobbin::ConfigurationError) { drain(threads: 1) }
      assert_match(/use_transactional_tests = false/, error.message)
    ensure
      pool.unpin_connection!
    end
    assert_equal 0, Bobbin::JobRecord.count, "the test's transaction rolled back"
  end

  test "a worker on an in-memory SQLite database is refused" do
    once_per_run
    @reconnect = true
    [ "sqlite3::memory:", "sqlite3:file::memory:?cache=shared" ].each do |url|
      Bobbin.connect(url)
      Bobbin.migrate!
      SleepJob.enqueue(0)
      error = nil
      log = bobbin_log { error = assert_raises(Bobbin::ConfigurationError) { drain(threads: 1) } }
      assert_equal "", log
      assert_match(/\ABobbin::Worker#run_until_empty on an in-memory SQLite database: .* use a file/, error.message)
    end
  end
end
