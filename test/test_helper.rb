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

    # The run BOBBIN_TEST_LANE names defines only its own tests: "default" (`bin/rake test`) those marked with nothing,
    # "long" (`bin/rake test:long`) those marked `long: true`, each needing seconds of real processes (a generated Rails
    # app, Puma, PostgreSQL stopped or cut, a process killed, frozen or stopped mid-job and waited out). Unset (a file
    # run by hand), both.
    LANES = { "" => %i[default long], "default" => %i[default], "long" => %i[long] }
              .fetch(ENV["BOBBIN_TEST_LANE"].to_s) { raise ArgumentError, "BOBBIN_TEST_LANE: default, long or unset" }

    def self.test(name, long: false, &block)
      super(name, &block) if LANES.include?(long ? :long : :default)
    end

    setup do
      TestDatabase.clean!
      Recorder.reset
      # An earlier test's outage (a worker run in this process that lost the database) leaves Recovery distrusting
      # silent heartbeats for process_alive_threshold; each test starts with none.
      Bobbin::Recovery.instance_variable_set(:@reachable_since, nil)
      Bobbin::Recovery.instance_variable_set(:@beat_at, nil)
    end

    # A test may change Bobbin.config (set, configure, a config file loaded in this process): the next one finds the
    # settings this one found (a threshold left at 2 s once failed the config file's tests, in one order of many).
    setup { @config_before = Bobbin.config.dup }
    teardown { Bobbin.instance_variable_set(:@config, @config_before) }

    teardown { FileUtils.rm_f(Dir[File.expand_path("../tmp/gate-*-#{Process.pid}*", __dir__)]) } # GatedJob's gates and start marks

    def postgres? = TestDatabase.postgres?

    def skip_unless_postgres = (skip("PostgreSQL only") unless postgres?)

    # For a test whose subject does not depend on the suite's database (flags, files, an SQLite database of its own):
    # the SQLite suite runs it and the PostgreSQL suite skips it, so it runs once per `bin/rake test`.
    def once_per_run = (skip("independent of the suite's database: the SQLite suite runs it") if postgres?)

    # Runs `pg_ctlcluster` with `args`; true when it succeeded. See sessions_killed!.
    def pg_ctlcluster(*args)
      sessions_killed!
      system("pg_ctlcluster", *args, out: File::NULL, err: File::NULL)
    end

    # The test kills PostgreSQL sessions (a restart, pg_terminate_backend), this process's pooled ones among them, and
    # Active Record trusts a connection used within verify_timeout without a check: after the test every pooled
    # connection is closed, so the next test's first statement (say, a group commit's INSERT) does not meet a dead one.
    def sessions_killed! = @sessions_killed = true

    teardown { ActiveRecord::Base.connection_handler.clear_all_connections!(:all) if @sessions_killed }

    def drain(**options) = Bobbin::Worker.new(polling_interval: 0.05, **options).run_until_empty

    # Like `drain`, but a worker that cannot finish (a slot lost for good) fails the test instead of hanging it.
    def drain_within(timeout = 60, **options)
      worker = Bobbin::Worker.new(polling_interval: 0.05, **options)
      thread = Thread.new { worker.run_until_empty }
      return thread.value if thread.join(timeout)

      worker.stop(timeout: 0)
      flunk("the worker did not drain within #{timeout}s")
    end

    # What Bobbin logged while the block ran, as a String; the test run's own logger is back afterwards. The block
    # gets the log so far, as a lambda (to wait for a line).
    def bobbin_log(level: Logger::DEBUG)
      logger, log = Bobbin.config.logger, StringIO.new
      Bobbin.config.logger = Logger.new(log, level: level)
      yield -> { log.string }
      log.string
    ensure
      Bobbin.config.logger = logger
    end

    # A SQLite URL in `dir` that Active Record cannot open, whoever runs the test (root included): its directory
    # would have to be made under a file. Opening it raises ActiveRecord::NoDatabaseError.
    def unopenable_sqlite_url(dir)
      FileUtils.touch(File.join(dir, "file"))
      "sqlite3:#{dir}/file/jobs.sqlite3"
    end

    # Runs the block with Bobbin::Record on a database without Bobbin's tables (a schema of its own on PostgreSQL, a new
    # file on SQLite), then back on the suite's database.
    def without_bobbin_tables(name)
      schema = "bobbin_#{name}_#{Process.pid}"
      Dir.mktmpdir("bobbin-empty") do |dir|
        if postgres?
          ActiveRecord::Base.connection.execute("CREATE SCHEMA #{schema}")
          Bobbin::Record.establish_connection(TestDatabase.url_with_pool + "&schema_search_path=#{schema}")
        else
          Bobbin::Record.establish_connection(adapter: "sqlite3", database: File.join(dir, "empty.sqlite3"))
        end
        yield
      ensure
        Bobbin::Record.remove_connection
      end
    ensure
      ActiveRecord::Base.connection.execute("DROP SCHEMA IF EXISTS #{schema}") if postgres?
    end

    # Reads through a PostgreSQL restart: a query that meets a dropped connection is retried on a fresh one.
    def query
      yield
    rescue ActiveRecord::ActiveRecordError
      ActiveRecord::Base.connection_handler.clear_all_connections!
      sleep(0.2)
      retry
    end

    # `count` jobs that succeeded past the retention (two days ago, or a minute beyond a longer one); returns their ids.
    def expired_jobs(count)
      ids = (0...count).each_slice(5_000).flat_map { |slice| Bobbin.enqueue_all(slice.map { |i| [ SleepJob, [ i ] ] }) }
      finished = Time.now.utc - [ 2 * 86_400, Bobbin.config.retention.to_i + 60 ].max
      Bobbin::JobRecord.where(id: ids).update_all(state: "succeeded", finished_at: finished)
      ids
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
