# frozen_string_literal: true

require_relative "cli_helper"

# An Active Record pool of 0 (pool: 0, or RAILS_MAX_THREADS=abc, which Rails reads as 0) made `bobbin start` wait
# 5 s on it and exit with "cannot connect to the database …; is the server running" (a trial); a pool of 1 got the
# precise message. Both are refused at once, with the numbers.
class EmptyPoolTest < Bobbin::TestCase
  include CLIHelper

  test "start refuses an Active Record pool of 0 at once, naming what the pool needs, as it refuses one too small" do
    { "0" => 0, "abc" => 0, "1" => 1 }.each do |given, size|
      result = run_bobbin("start", "--fibers", "100", env: { "DATABASE_URL" => TestDatabase.url_with_pool(given) })
      assert_config_exit(result, /the Active Record pool of "primary" has #{size} connections(?: \(a RAILS_MAX_THREADS that is not a number reads as 0\))? but a fibers pool of 100 needs 3; set pool: 3 /)
      refute_match(/could not obtain a connection from the pool/, result.last, "pool=#{given}: refused before anything waited on the pool")
    end
    assert_equal 0, Bobbin::ProcessRecord.count, "no supervisor or worker registered"
  end

  test "an operator command is refused at once too, and a pool without a limit (Rails 8.1 reads a negative one so) is not" do
    assert_config_exit(run_bobbin("counts", env: { "DATABASE_URL" => TestDatabase.url_with_pool(0) }),
                       /the Active Record pool of "primary" has 0 connections \(a RAILS_MAX_THREADS that is not a number reads as 0\) but a fibers pool of 100 needs 3/)
    status, out, err = run_bobbin("counts", env: { "DATABASE_URL" => TestDatabase.url_with_pool(-1) })
    expected = ActiveRecord.gem_version >= Gem::Version.new("8.1") ? 0 : 78
    assert_equal expected, status.exitstatus, out + err
  end

  test "bobbin doctor reads a pool without a limit as enough, and says so" do
    skip("a negative pool is refused before Active Record 8.1") if ActiveRecord.gem_version < Gem::Version.new("8.1")
    status, out, err = run_bobbin("doctor", "--fibers", "20", env: { "DATABASE_URL" => TestDatabase.url_with_pool(-1) })
    assert_equal 0, status.exitstatus, out + err
    assert_match(/Active Record pool: no limit configured, 3 needed per process\n  fiber pools' jobs may open one each though they need 3/, out)
  end

  test "Bobbin.connect (plain Ruby) refuses a pool of 0 itself, before it waits on it" do
    error = assert_raises(Bobbin::ConfigurationError) { Bobbin.connect(TestDatabase.url_with_pool(0)) }
    assert_match(/the Active Record pool of "primary" has 0 connections .*set pool: /, error.message)
  ensure
    Bobbin.connect(TestDatabase.url_with_pool(name: TestDatabase.application_name))
  end

  test "the pool checks read a pool without a limit as enough" do
    assert_nil Bobbin::ConnectionBudget.check_connectable!(nil, "primary")
    fibers = Bobbin::Pool.parse({ "fibers" => 100 }, "workers[0]")
    assert_equal 100 + Bobbin.config.thread_lane, Bobbin::ConnectionBudget.job_connections_at_most(fibers, Float::INFINITY),
                 "its fibers and its lane's threads may open one each"
    error = assert_raises(Bobbin::ConfigurationError) { Bobbin::ConnectionBudget.check_connectable!(-1, "queue", []) }
    assert_match(/pool of "queue" has -1 connections but Bobbin needs 1; set pool: 1/, error.message)
  end
end
