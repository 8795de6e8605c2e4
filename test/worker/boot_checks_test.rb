# frozen_string_literal: true

require "test_helper"

class BootChecksTest < Bobbin::TestCase
  test "Worker.new checks its polling_interval and shutdown_timeout like the configuration does" do
    error = assert_raises(Bobbin::ConfigurationError) { Bobbin::Worker.new(fibers: 2, polling_interval: 0) }
    assert_match(/Bobbin::Worker.new polling_interval: must be a number of seconds/, error.message)
    assert_raises(Bobbin::ConfigurationError) { Bobbin::Worker.new(threads: 2, shutdown_timeout: -3) }
  end

  test "a thread pool larger than the Active Record pool is refused at boot with the numbers" do
    error = assert_raises(Bobbin::ConfigurationError) { Bobbin::Worker.new(threads: 40).run_until_empty }
    assert_match(/has 25 connections but a threads pool of 40 needs 40; set pool: 40 in the database config \(or \?\w+=40 in DATABASE_URL\)/, error.message)
    refute_match(/database\.yml/, error.message, "no database.yml outside Rails")
    assert_equal 0, Bobbin::ProcessRecord.count, "nothing registered"
  end

  # Rails 8.1's database.yml sizes the pool with max_connections:, which Active Record reads before a DATABASE_URL's
  # ?pool=: the refusal's "?pool=40 in DATABASE_URL", followed, changed nothing and the worker was refused again.
  test "a pool too small in a Rails 8.1 app (max_connections: in database.yml) is refused with a DATABASE_URL fix that works" do
    skip("database.yml's key is pool: before Active Record 8.1") if ActiveRecord.gem_version < Gem::Version.new("8.1")
    ActiveRecord::Base.establish_connection(url: TestDatabase.url, max_connections: 5) # database.yml's, with DATABASE_URL
    error = assert_raises(Bobbin::ConfigurationError) { Bobbin::ConnectionBudget.check!(:threads, 40) }
    advice = error.message[/\(or \?(\w+=40) in DATABASE_URL\)/, 1]
    assert advice, error.message
    ActiveRecord::Base.establish_connection(url: "#{TestDatabase.url}#{TestDatabase.url.include?('?') ? '&' : '?'}#{advice}", max_connections: 5)
    assert_equal 40, ActiveRecord::Base.connection_pool.size
    Bobbin::ConnectionBudget.check!(:threads, 40)
  ensure
    Bobbin.connect(TestDatabase.url_with_pool(name: TestDatabase.application_name))
  end

  test "a fiber pool needs the fiber DB concurrency, not one connection per fiber" do
    assert_equal 3, Bobbin::ConnectionBudget.job_connections(:fibers, 10_000)
    assert_equal 2, Bobbin::ConnectionBudget.job_connections(:fibers, 2)
    assert_equal 10, Bobbin::ConnectionBudget.job_connections(:threads, 10)
  end

  test "a fiber pool without fiber isolation is refused at boot" do
    ActiveSupport::IsolatedExecutionState.isolation_level = :thread
    error = assert_raises(Bobbin::ConfigurationError) { Bobbin::Worker.new(fibers: 10).run_until_empty }
    assert_match(/needs Active Support's isolation level :fiber, but it is :thread/, error.message)
  ensure
    ActiveSupport::IsolatedExecutionState.isolation_level = :fiber
  end

  test "a worker needs exactly one of fibers and threads, and a positive size" do
    assert_raises(Bobbin::ConfigurationError) { Bobbin::Worker.new(fibers: 1, threads: 1) }
    assert_raises(Bobbin::ConfigurationError) { Bobbin::Worker.new }
    assert_raises(Bobbin::ConfigurationError) { Bobbin::Worker.new(fibers: 0) }
    assert_raises(Bobbin::ConfigurationError) { Bobbin::Worker.new(fibers: 1, queues: []) }
  end

  test "a fiber pool warns at boot about a loaded gem that blocks its loop; a thread pool does not" do
    Gem.loaded_specs["typhoeus"] = Gem::Specification.new("typhoeus", "1.4.1")
    assert_match(/typhoeus is loaded: its calls block a fiber pool's event loop \(use async-http or Net::HTTP/, bobbin_log { drain(fibers: 2) })
    refute_match(/typhoeus/, bobbin_log { drain(threads: 2) })
  ensure
    Gem.loaded_specs.delete("typhoeus")
  end
end
