# frozen_string_literal: true

require "test_helper"
require "tempfile"

class ConfigFileTest < Bobbin::TestCase
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

  test "a section without workers: is settings only: the pools stay as configured otherwise" do
    default = Bobbin.config.pools
    pools = load("production:\n  shutdown_timeout: 7\n")
    assert_equal 7, Bobbin.config.shutdown_timeout
    assert_equal default, pools
    assert_equal [ [ [ "*" ], :fibers, 100, 1 ] ], Bobbin.config.pools.map { |p| [ p.queues, p.mode, p.size, p.processes ] }

    Bobbin.configure { |c| c.workers = [ { queues: [ "chat" ], threads: 3 }, { queues: [ "cpu" ], threads: 1, polling_interval: 5 } ] }
    load("production:\n  polling_interval: 0.2\n")
    assert_equal [ [ [ "chat" ], :threads, 3, 0.2 ], [ [ "cpu" ], :threads, 1, 5.0 ] ],
                 Bobbin.config.pools.map { |p| [ p.queues, p.mode, p.size, p.polling_interval ] },
                 "Bobbin.configure's pools kept; the one that took the global polling_interval follows the file's"
  end

  test "the section comes from BOBBIN_ENV, then RAILS_ENV, then RACK_ENV, else development" do
    names = %w[BOBBIN_ENV RAILS_ENV RACK_ENV]
    saved = ENV.to_h.slice(*names)
    names.each { |name| ENV.delete(name) }
    assert_equal "development", Bobbin::ConfigFile.environment
    ENV["RACK_ENV"] = "rack"
    assert_equal "rack", Bobbin::ConfigFile.environment
    ENV["RAILS_ENV"] = "rails"
    assert_equal "rails", Bobbin::ConfigFile.environment
    ENV["BOBBIN_ENV"] = "bobbin"
    assert_equal "bobbin", Bobbin::ConfigFile.environment
    ENV["BOBBIN_ENV"] = ""
    assert_equal "rails", Bobbin::ConfigFile.environment, "an empty variable is not set (as in the Railtie)"
  ensure
    names.each { |name| ENV.delete(name) }
    ENV.update(saved)
  end

  test "a polling_interval set in Ruby after the pools were made reaches the pools that did not set their own, and their workers" do
    Bobbin.configure { |c| c.polling_interval = 0.05 }
    assert_equal [ 0.05 ], Bobbin.config.pools.map(&:polling_interval), "the default pool"
    assert_equal 0.05, Bobbin::Worker.new(**Bobbin.config.pools.first.worker_options).polling_interval

    Bobbin.configure { |c| c.workers = [ { queues: [ "chat" ], fibers: 3 }, { queues: [ "cpu" ], threads: 1, polling_interval: 5 } ] }
    Bobbin.configure { |c| c.polling_interval = 0.2 }
    assert_equal [ 0.2, 5.0 ], Bobbin.config.pools.map(&:polling_interval)
    assert_equal [ 0.2, 5.0 ], Bobbin.config.pools.map { |pool| Bobbin::Worker.new(**pool.worker_options).polling_interval }
    assert_equal({ "queues" => [ "chat" ], "fibers" => 3, "processes" => 1 }, Bobbin.config.pools.first.settings, "its own settings only")
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

  test "a key given twice in one mapping is refused with both lines, not kept as the last silently" do
    assert_config_error(/"shutdown_timeout" is given twice in one mapping \(lines 2 and 4\)/,
                        "production:\n  shutdown_timeout: 5\n  workers: [{ fibers: 1 }]\n  shutdown_timeout: 9\n")
    assert_config_error(/"production" is given twice/, "production:\n  shutdown_timeout: 5\nproduction:\n  shutdown_timeout: 9\n")
    load(<<~YAML) # the same key in two mappings, and a merge key overridden, are fine
      defaults: &defaults
        shutdown_timeout: 5
      production:
        <<: *defaults
        shutdown_timeout: 7
        workers: [{ fibers: 1 }]
      development:
        <<: *defaults
    YAML
    assert_equal 7, Bobbin.config.shutdown_timeout
    assert_equal({}, Bobbin::ConfigFile.parse(@path.tap { File.write(@path, "# only comments\n") }), "a file of comments only is empty")
  end

  test "an ERB error is named with the file, a require of a missing gem too, not raised as it was" do
    assert_config_error(/could not be read \(NameError: undefined local variable or method 'nope'/, "production:\n  shutdown_timeout: <%= nope %>\n")
    assert_config_error(/could not be read \(LoadError: cannot load such file -- bobbin_no_such_gem\)/,
                        "<% require \"bobbin_no_such_gem\" %>\nproduction:\n  shutdown_timeout: 5\n")
  end

  test "a missing file or environment section is named" do
    error = assert_raises(Bobbin::ConfigurationError) { Bobbin::ConfigFile.load("/nonexistent/bobbin.yml") }
    assert_equal "config file /nonexistent/bobbin.yml not found", error.message
    assert_config_error(/no "staging" section \(found: production\)/, "production:\n  workers: [{ fibers: 1 }]\n", env: "staging")
  end

  test "settings that cannot work are refused with the key: polling, heartbeat, retention, non-finite numbers" do
    { "polling_interval: 0" => /production\.polling_interval: must be a number of seconds ≥ 0\.01, got 0/,
      "heartbeat_interval: 0.05" => /production\.heartbeat_interval: must be a number of seconds ≥ 0\.1, got 0\.05/,
      "shutdown_timeout: .inf" => /production\.shutdown_timeout: must be a number of seconds ≥ 0, got Infinity/,
      "retention: 0" => /production\.retention: must be a number of seconds > 0, got 0/,
      "retention: -5" => /production\.retention: must be a number of seconds > 0, got -5/,
      "polling_interval: \"1\"" => /production\.polling_interval: must be a number of seconds ≥ 0\.01, got "1"/,
      "fiber_db_concurrency: 0" => /production\.fiber_db_concurrency: must be a whole number of at least 1, got 0/,
      # "Keep them all" as a huge number passed, and each housekeeping pass then failed in PostgreSQL (a review).
      "retention: 1000000000000" => /production\.retention: must be at most 3153600000 seconds \(100 years\), got 1000000000000; retention: nil keeps finished jobs forever/,
      "process_alive_threshold: 3.0e+300" => /production\.process_alive_threshold: must be at most 3153600000 seconds \(100 years\), got 3\.0e\+300\z/ }.each do |setting, pattern|
      assert_config_error(pattern, "production:\n  #{setting}\n  workers: [{ fibers: 1 }]\n")
    end
    assert_config_error(/workers\[0\]\.polling_interval: must be a number of seconds ≥ 0\.01, got -1/, "production:\n  workers: [{ fibers: 1, polling_interval: -1 }]\n")
  end

  test "process_alive_threshold must leave room for a missed heartbeat, and the message says why" do
    assert_config_error(/production\.process_alive_threshold: must be more than 2 × heartbeat_interval \(2 × 30 = 60 s\), got 60: a process is presumed dead after that long without a heartbeat/,
                        "production:\n  heartbeat_interval: 30\n  workers: [{ fibers: 1 }]\n")
    load("production:\n  heartbeat_interval: 40\n  process_alive_threshold: 120\n  retention: ~\n  workers: [{ fibers: 1 }]\n")
    assert_equal [ 40, 120, nil ], [ Bobbin.config.heartbeat_interval, Bobbin.config.process_alive_threshold, Bobbin.config.retention ]
  end

  test "Bobbin.configure checks every setting as it is set" do
    { polling_interval: 0, heartbeat_interval: 0, shutdown_timeout: -3, retention: 0, crash_retries: 0, crash_quarantine: 0, max_argument_bytes: 1.5,
      process_alive_threshold: 20, fiber_db_concurrency: nil }.each do |name, value|
      error = assert_raises(Bobbin::ConfigurationError) { Bobbin.configure { |c| c.public_send(:"#{name}=", value) } }
      assert_match(/\ABobbin\.config\.#{name}: must be/, error.message)
    end
    assert_equal [ 1.0, 10, 60 ], [ Bobbin.config.polling_interval, Bobbin.config.heartbeat_interval, Bobbin.config.process_alive_threshold ]
    Bobbin.configure { |c| c.set(heartbeat_interval: 40, process_alive_threshold: 120) }
    Bobbin.configure { |c| c.retention = nil; c.max_argument_bytes = nil; c.polling_interval = 0.01 }
    assert_raises(Bobbin::ConfigurationError) { Bobbin.config.set(polling_rate: 1) }
  end

  test "Worker.new's keywords are checked by the same rules (Setting.given)" do
    Bobbin::Setting.given("Bobbin::Worker.new", polling_interval: nil, shutdown_timeout: 0)
    error = assert_raises(Bobbin::ConfigurationError) { Bobbin::Setting.given("Bobbin::Worker.new", polling_interval: 0, shutdown_timeout: 1) }
    assert_equal "Bobbin::Worker.new polling_interval: must be a number of seconds ≥ 0.01, got 0", error.message
    assert_raises(Bobbin::ConfigurationError) { Bobbin::Setting.given("Bobbin::Worker.new", shutdown_timeout: -1) }
  end

  test "the same options work from Ruby" do
    Bobbin.configure { |c| c.workers = [ { queues: [ "llm_*" ], fibers: 50, processes: 3 } ] }
    assert_equal [ [ "llm_*" ], 3 ], Bobbin.config.pools.map { |p| [ p.queues, p.processes ] }.first
    assert_raises(Bobbin::ConfigurationError) { Bobbin.configure { |c| c.workers = [ { threads: 0 } ] } }
  end
end
