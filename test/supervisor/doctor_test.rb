# frozen_string_literal: true

require "test_helper"

class DoctorTest < Bobbin::TestCase
  def doctor(workers, mode: :fork)
    pools = workers.each_with_index.map { |hash, i| Bobbin::Pool.parse(hash, "workers[#{i}]") }
    out = StringIO.new
    [ Bobbin::Doctor.new(pools, mode: mode, out: out).run, out.string ]
  end

  test "a configuration that fits passes, and the report shows per-pool and total needs" do
    status, report = doctor([ { "queues" => [ "chat" ], "fibers" => 100, "processes" => 2 }, { "threads" => 5 } ])
    assert_equal 0, status, report
    assert_match(/workers\[0\] fibers: 100 × 2 processes.*jobs' DB connections 3 \+ Bobbin's own 2/, report)
    assert_match(/total: 3 worker processes, 205 concurrent jobs, 18 database connections/, report)
    assert_match(/Active Record pool: 25 configured, 5 needed per process/, report)
    assert_match(/OK: this configuration fits/, report)
  end

  test "a thread pool larger than the Active Record pool fails the check" do
    status, report = doctor([ { "threads" => 40 } ])
    assert_equal 1, status
    assert_match(/the Active Record pool is 25 but a worker process needs 40/, report)
  end

  test "more connections than PostgreSQL's max_connections fails the check" do
    skip_unless_postgres
    status, report = doctor([ { "threads" => 20, "processes" => 6 } ])
    assert_equal 1, status
    assert_match(/PostgreSQL: max_connections \d+/, report)
    assert_match(/Bobbin needs 133 connections but PostgreSQL allows \d+/, report)
  end

  test "fiber pools without fiber isolation fail the check" do
    ActiveSupport::IsolatedExecutionState.isolation_level = :thread
    status, report = doctor([ { "fibers" => 10 } ])
    assert_equal 1, status
    assert_match(/fiber pools need config.active_support.isolation_level = :fiber/, report)
  ensure
    ActiveSupport::IsolatedExecutionState.isolation_level = :fiber
  end
end
