# frozen_string_literal: true

require "test_helper"

# A job that returns with a transaction still open on its connection fails, and the transaction is rolled back:
# left open, it would hold the writes of every later job on that pooled connection, which would report success and
# vanish. A transaction that was open before the job started (a test's transactional fixtures) is left alone.
class OpenTransactionsTest < Bobbin::TestCase
  def job(id) = Bobbin::JobRecord.find(id)

  %w[fibers threads].each do |mode|
    test "a #{mode} job that leaves a transaction open fails, its writes roll back, and the jobs after it keep theirs" do
      leaving = TransactionLeavingJob.enqueue("leave", "left")
      after = Array.new(3) { |i| TransactionLeavingJob.enqueue("plain", "after-#{i}") }
      drain_within(mode.to_sym => 1)

      assert_equal [ "failed", "Bobbin::TransactionLeftOpen" ], job(leaving).then { |row| [ row.state, row.last_error_class ] }
      assert_match(/\ATransactionLeavingJob #{leaving} returned with a transaction still open; it was rolled back\z/, job(leaving).last_error_message)
      assert_equal [ "succeeded" ], Bobbin::JobRecord.where(id: after).distinct.pluck(:state)
      assert_equal %w[after-0 after-1 after-2], LedgerEntry.order(:key).pluck(:key), "the left transaction's row is gone; the others committed"
    end
  end

  # with_connection (what Active Record >= 7.2's models use) hands its connection back as its block ends: a transaction
  # begun inside it went back to the pool open, the job succeeded, and the jobs after it on that connection wrote into
  # it and lost their rows (on SQLite its write lock held up the worker's own writes instead).
  %w[fibers threads].product(%w[within within-raise]).each do |mode, how|
    test "a #{mode} job that begins a transaction inside with_connection (#{how}) has it rolled back; the jobs after it keep their rows" do
      ActiveRecord::Base.establish_connection(TestDatabase.url_with_pool(1, name: TestDatabase.application_name)) # the next jobs get that connection
      leaving = TransactionLeavingJob.enqueue(how, "left")
      after = Array.new(3) { |i| TransactionLeavingJob.enqueue("plain", "after-#{i}") }
      drain_within(mode.to_sym => 1)

      expected = how == "within" ? [ "failed", "Bobbin::TransactionLeftOpen" ] : [ "failed", "RuntimeError" ]
      assert_equal expected, job(leaving).then { |row| [ row.state, row.last_error_class ] }
      assert_equal [ "succeeded" ], Bobbin::JobRecord.where(id: after).distinct.pluck(:state)
      ActiveRecord::Base.connection_handler.clear_all_connections!(:all) # a transaction still open would end here, rolled back
      assert_equal %w[after-0 after-1 after-2], LedgerEntry.order(:key).pluck(:key), "the left transaction's row is gone; the others committed"
    ensure
      ActiveRecord::Base.establish_connection(TestDatabase.url_with_pool(name: TestDatabase.application_name))
    end
  end

  # A connection a job checks out itself belongs to its fiber or thread, which outlives the job: Active Record's reaper
  # takes back only a dead owner's. Each such job kept one for good, and once pool-size of them had run every later job
  # waited checkout_timeout and failed.
  %w[fibers threads].each do |mode|
    test "connections #{mode} jobs check out and never check in go back to the pool as each ends; a transaction left on one fails its job" do
      ActiveRecord::Base.establish_connection(TestDatabase.url_with_pool(2, name: TestDatabase.application_name) + "&checkout_timeout=0.5")
      keeping = Array.new(4) { |i| CheckoutKeepingJob.enqueue("keep", "kept-#{i}") }
      leaving = CheckoutKeepingJob.enqueue("transaction", "left")
      after = Array.new(3) { |i| TransactionLeavingJob.enqueue("plain", "after-#{i}") }
      log = bobbin_log { drain_within(mode.to_sym => 1) }

      assert_equal [ [ "succeeded", nil ] ], Bobbin::JobRecord.where(id: keeping + after).distinct.pluck(:state, :last_error_class)
      assert_equal [ "failed", "Bobbin::TransactionLeftOpen" ], job(leaving).then { |row| [ row.state, row.last_error_class ] }
      assert_equal 5, log.scan(/CheckoutKeepingJob \d+ kept a database connection it checked out/).size, log
      assert_equal 0, ActiveRecord::Base.connection_pool.stat[:busy]
      ActiveRecord::Base.connection_handler.clear_all_connections!(:all)
      assert_equal %w[after-0 after-1 after-2 kept-0 kept-1 kept-2 kept-3], LedgerEntry.order(:key).pluck(:key)
    ensure
      ActiveRecord::Base.establish_connection(TestDatabase.url_with_pool(name: TestDatabase.application_name))
    end
  end

  test "a transaction open before the job began (transactional fixtures) is left open; only the job's own is rolled back" do
    execution = Bobbin::Worker::Execution.new
    claimed = [ "plain", "leave" ].map do |how|
      row = Bobbin::JobRecord.find(TransactionLeavingJob.enqueue(how, "#{how}-inside"))
      Bobbin::Store::ClaimedJob.new(*row.attributes.values_at(*Bobbin::Store::ClaimedJob.members.map(&:to_s))).tap { |job| job.attempts = 1 } # as claimed
    end
    pool = LedgerEntry.connection_pool
    pool.pin_connection!(true) # as Rails' transactional tests do: one connection for all, inside a transaction
    begin
      states = claimed.map { |job| execution.call(job).state }
      open = pool.lease_connection.open_transactions
      keys = LedgerEntry.pluck(:key)
    ensure
      clean = pool.unpin_connection!
    end
    assert_equal %w[succeeded failed], states
    assert_equal 1, open, "the fixtures' transaction is still open, the job's own is gone"
    assert_equal [ "plain-inside" ], keys
    assert clean, "the fixtures' transaction was neither committed nor rolled back by Bobbin"
    assert_empty LedgerEntry.all
  end
end
