# frozen_string_literal: true

require "test_helper"
require "tempfile"

class ConfigFileTest < Bobbin::TestCase
  setup { @saved = Bobbin.config.dup }
  teardown { Bobbin.instance_variable_set(:@config, @saved) }

  def load(yaml, env: "production")
    file = Tempfile.create([ "bobbin", ".yml" ])
    file.write(yaml)
    file.close
    @path = file.path
    Bobbin::ConfigFile.load(file.path, env: env)
  end

  def assert_config_error(pattern, yaml, env: "production")
    error = assert_raises(Bobbin::ConfigurationError) { load(yaml, env: env) }
    assert_match pattern, error.message
    assert_includes error.message, @path, "the message names the file" if @path
  end

  test "loads the environment's pools and settings, with ERB" do
    pools = load(<<~YAML)
      production:
        shutdown_timeout: <%= 5 * 3 %>
        workers:
          - { queues: [chat], fibers: 100, processes: 2, polling_interval: 0.1 }
          - queues: "notifications, default"
            threads: 4
    YAML
    assert_equal 15, Bobbin.config.shutdown_timeout
    assert_equal [ [ [ "chat" ], :fibers, 100, 2, 0.1 ], [ %w[notifications default], :threads, 4, 1, 1.0 ] ],
                 pools.map { |p| [ p.queues, p.mode, p.size, p.processes, p.polling_interval ] }
  end

  test "the section comes from BOBBIN_ENV, then RAILS_ENV, then RACK_ENV, else development" do
    ENV["RACK_ENV"] = "rack"
    assert_equal "rack", Bobbin::ConfigFile.environment
    ENV["BOBBIN_ENV"] = "bobbin"
    assert_equal "bobbin", Bobbin::ConfigFile.environment
  ensure
    ENV.delete("RACK_ENV")
    ENV.delete("BOBBIN_ENV")
  end

  test "both fibers and threads in one pool names the pool" do
    assert_config_error(/production\.workers\[1\]: give exactly one of fibers or threads, not both/,
                        "production:\n  workers:\n    - { fibers: 1 }\n    - { fibers: 2, threads: 2 }\n")
  end

  test "an unknown pool key names the pool and the key" do
    assert_config_error(/workers\[0\]: unknown key "fiber"/, "production:\n  workers:\n    - { fiber: 10 }\n")
  end

  test "an unknown top-level key is named" do
    assert_config_error(/production: unknown key "shutdown_timout"/, "production:\n  shutdown_timout: 3\n  workers: [{ fibers: 1 }]\n")
  end

  test "negative or non-numeric numbers are refused with the key" do
    assert_config_error(/workers\[0\]\.threads: must be a whole number of at least 1, got -2/, "production:\n  workers: [{ threads: -2 }]\n")
    assert_config_error(/workers\[0\]\.processes: must be a whole number/, "production:\n  workers: [{ fibers: 5, processes: two }]\n")
    assert_config_error(/production\.shutdown_timeout: must be a number of seconds ≥ 0, got -1/, "production:\n  shutdown_timeout: -1\n  workers: [{ fibers: 1 }]\n")
  end

  test "a pool with neither fibers nor threads, or without queues, is refused" do
    assert_config_error(/workers\[0\]: give fibers: N or threads: N/, "production:\n  workers: [{ queues: [a] }]\n")
    assert_config_error(/workers\[0\]\.queues: must be a list of queue names/, "production:\n  workers: [{ queues: [], fibers: 1 }]\n")
  end

  test "bad YAML gives the line" do
    assert_config_error(/invalid YAML: .* at line 3/, "production:\n  workers:\n    - { fibers: 1\n")
  end

  test "a missing file or environment section is named" do
    error = assert_raises(Bobbin::ConfigurationError) { Bobbin::ConfigFile.load("/nonexistent/bobbin.yml") }
    assert_equal "config file /nonexistent/bobbin.yml not found", error.message
    assert_config_error(/no "staging" section \(found: production\)/, "production:\n  workers: [{ fibers: 1 }]\n", env: "staging")
  end

  test "the same options work from Ruby" do
    Bobbin.configure { |c| c.workers = [ { queues: [ "llm_*" ], fibers: 50, processes: 3 } ] }
    assert_equal [ [ "llm_*" ], 3 ], Bobbin.config.pools.map { |p| [ p.queues, p.processes ] }.first
    assert_raises(Bobbin::ConfigurationError) { Bobbin.configure { |c| c.workers = [ { threads: 0 } ] } }
  end
end
