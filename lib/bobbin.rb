# frozen_string_literal: true

require "active_record"
require "fileutils" # Active Record creates SQLite directories with it without requiring it
require "json"

require_relative "bobbin/version"
%w[error enqueue_error serialization_error configuration_error database_unreachable process_died outcome_not_written thread_killed transaction_left_open unrunnable_job unknown_job_class]
  .each { |error| require_relative "bobbin/errors/#{error}" }
require_relative "bobbin/app_executor"
require "active_support/notifications"
require_relative "bobbin/instrumentation"
require_relative "bobbin/config/setting"
require_relative "bobbin/config/pool"
require_relative "bobbin/configuration"
require_relative "bobbin/config/config_file"
require_relative "bobbin/config/database_problem"
require_relative "bobbin/concurrency/limit"
require_relative "bobbin/client/arguments"
require_relative "bobbin/client/enqueuer"
require_relative "bobbin/client/group_commit"
require_relative "bobbin/runs_on"
require_relative "bobbin/job"
require_relative "bobbin/recurring"
require_relative "bobbin/records/utc_time"
require_relative "bobbin/records/record"
require_relative "bobbin/schema"
require_relative "bobbin/records/job_record"
require_relative "bobbin/records/process_record"
require_relative "bobbin/records/queue_pause"
require_relative "bobbin/records/recurring_task"
require_relative "bobbin/records/recurring_run"
require_relative "bobbin/wakeups"
require_relative "bobbin/store"
%w[unavailable locked guarded own_connections claimed_job outcome queue_selection database_file postgresql sqlite].each { |part| require_relative "bobbin/store/#{part}" }

# Bobbin: background jobs persisted in SQL, run as fibers or threads.
module Bobbin
  autoload :Worker, "bobbin/worker"
  autoload :Supervisor, "bobbin/supervisor"
  autoload :Recovery, "bobbin/recovery"
  autoload :Doctor, "bobbin/doctor"
  autoload :Retention, "bobbin/retention"
  autoload :Maintenance, "bobbin/maintenance"
  autoload :OutageLog, "bobbin/outage_log"
  autoload :LibraryFrames, "bobbin/library_frames"
  autoload :ThreadErrors, "bobbin/thread_errors"
  autoload :SignalGuard, "bobbin/signal_guard"
  autoload :ConnectionBudget, "bobbin/connection_budget"
  autoload :FiberSafety, "bobbin/fiber_safety"
  autoload :LogSubscriber, "bobbin/log_subscriber"
  autoload :Printable, "bobbin/printable"
  autoload :CLI, "bobbin/cli"
  autoload :Operator, "bobbin/operator"
  autoload :Dashboard, "bobbin/dashboard"
  autoload :Metrics, "bobbin/metrics"
  autoload :MissionControlAdapter, "bobbin/mission_control_adapter"

  class << self
    # The process-wide Configuration.
    def config = @config ||= Configuration.new

    # Yields the Configuration to change it.
    def configure = yield(config)

    # Bobbin's logger (Bobbin.config.logger).
    def logger = config.logger

    # Seconds on the monotonic clock, which Bobbin's deadlines, intervals and durations are measured by.
    def monotonic = ::Process.clock_gettime(::Process::CLOCK_MONOTONIC)

    # A postgres URL without its "//", or with "user:password@" after the host's "/".
    MISTYPED_POSTGRES_URL = %r{\Apostgres(?:ql)?:(?!//)|\Apostgres(?:ql)?://[^/?]*/[^?]*@}

    # A SQLite URL with a host part: "sqlite3://db/jobs.sqlite3", "sqlite3://./jobs.sqlite3" ("localhost" names no path).
    SQLITE_URL_WITH_HOST = %r{\Asqlite3?://(?!/|localhost(?:[/?]|\z))}

    # Connects Active Record (and so Bobbin) to `url`: "postgres://…", "sqlite3:path/to/db.sqlite3".
    # Outside a Rails app it also makes Active Record isolate connections per fiber, which fiber pools need.
    def connect(url = ENV["DATABASE_URL"])
      raise ConfigurationError, "no database: call Bobbin.connect(url) or set DATABASE_URL" if url.to_s.empty?

      require_driver(url)
      check_sqlite_url(url)
      # postgres:/user:secret@host/db (a "/" short) or postgres:///user:secret@host/db (one too many) reached a server
      # with all of it, password included, for a database name.
      raise ConfigurationError.new(DatabaseProblem.unreadable_url("the database URL")), cause: nil if url.match?(MISTYPED_POSTGRES_URL)

      url = with_absolute_sqlite_path(with_sqlite_timeout(url))
      ActiveSupport::IsolatedExecutionState.isolation_level = :fiber unless defined?(::Rails.application) && ::Rails.application
      ActiveRecord::Base.establish_connection(url)
      pool = ActiveRecord::Base.connection_pool
      ConnectionBudget.check_connectable!(pool.size, pool.db_config.name) # before verify!, which would wait on a pool of 0
      pool.with_connection(&:verify!)
      self
    rescue ActiveRecord::NoDatabaseError => error # Active Record's own advice is for a Rails app (config/database.yml)
      raise ConfigurationError, DatabaseProblem.describe(error)
    rescue ActiveRecord::StatementInvalid => error # an SQLite file (or its directory) this user cannot write: SQLite's words alone
      raise unless DatabaseProblem.sqlite_unwritable?(error)

      raise ConfigurationError, DatabaseProblem.describe(error)
    rescue ActiveRecord::ConnectionNotEstablished => error # "There is an issue connecting with your hostname: …": and what the driver said
      said = Store.driver_said(error)
      raise if said.empty?

      raise error.class, "#{DatabaseProblem.first_line(error)}#{said}", cause: error.cause # the driver's error, which DatabaseProblem reads
    # Their messages repeat the URL, password and all; URI::InvalidComponentError ("sqlite3:", an unset path after it) went
    # out raw with a backtrace.
    rescue URI::Error, ActiveRecord::DatabaseConfigurations::InvalidConfigurationError
      raise ConfigurationError.new(DatabaseProblem.unreadable_url("the database URL")), cause: nil
    end

    # Creates or upgrades Bobbin's tables; idempotent. Returns the schema version it found.
    def migrate!
      found = Record.connection_pool.with_connection { |connection| Schema.up(connection) }
      Schema.initialized_for_rails(Record.connection_pool) if defined?(::Rails.application) && ::Rails.application
      found
    end

    # Enqueues many jobs in one INSERT: `Bobbin.enqueue_all([[FetchJob, ["a"]], [FetchJob, ["b"]]])`; returns ids.
    def enqueue_all(pairs) = Client::Enqueuer.enqueue_all(pairs)

    # Job counts by state: ready, scheduled, running, succeeded, failed, discarded.
    def counts = JobRecord.counts

    # Runs failed or discarded job `id` again from a fresh attempt budget; false when it is in another state.
    def retry(id) = JobRecord.retry(id)

    # Gives up on failed or waiting job `id` (kept for inspection); false when it is running or finished.
    def discard(id) = JobRecord.discard(id)

    # Adds a recurring task (see Configuration#recurring).
    def recurring(key, **options) = config.recurring(key, **options)

    # Adds a hook around every job workers run (see Configuration#around_perform).
    def around_perform(hook = nil, &) = config.around_perform(hook, &)

    # Stops workers from claiming jobs of `queue` until resumed (patient with SQLite's write lock, as Operator.pause).
    def pause(queue) = Operator.pause(queue)

    # Lets workers claim jobs of `queue` again.
    def resume(queue) = Operator.resume(queue)

    # The database driver's gem for `url`; a URL of another database, or a driver missing from the bundle (a plain
    # Ruby app's Gemfile names it itself), is a ConfigurationError that says what to do.
    def require_driver(url)
      scheme = url[/\A[^:]*/]
      driver = case scheme
      when /\Apostgres/ then "pg"
      when /\Asqlite/ then "sqlite3"
      else raise ConfigurationError, "Bobbin runs on PostgreSQL or SQLite, not #{scheme} (give a postgres://… or sqlite3:path URL)"
      end
      require driver
    rescue LoadError => error
      raise unless error.path == driver

      raise ConfigurationError, "a #{scheme}: URL needs the #{driver} gem, which is not in this bundle: add it to the Gemfile (bundle add #{driver})"
    end

    # Active Record drops a SQLite URL's host: "sqlite3://db/jobs.sqlite3" opened /jobs.sqlite3 at the filesystem's root
    # (or failed there for want of permission), not db/jobs.sqlite3 (a trial). Such a URL is refused with the spellings
    # that work.
    def check_sqlite_url(url)
      return unless url.match?(SQLITE_URL_WITH_HOST)

      relative = url.sub(%r{\A[^:]*://}, "sqlite3:")
      raise ConfigurationError, "the SQLite URL #{url} has a host part (#{url[%r{\A[^:]*://([^/?]*)}, 1]}), which Active Record ignores: " \
                                "write #{relative} for a path relative to the working directory, or sqlite3:///absolute/path/jobs.sqlite3"
    end

    private
      # SQLite answers "database is locked" at once unless told to wait; workers and jobs write concurrently.
      def with_sqlite_timeout(url)
        return url unless url.start_with?("sqlite") && !url.include?("timeout=")

        url + (url.include?("?") ? "&" : "?") + "timeout=5000"
      end

      # A relative SQLite path is the working directory's as Bobbin.connect is called. Active Record opens each later
      # connection by the path as given (outside Rails, which puts Rails.root before it): a worker's outcome writer
      # opened while a job ran in a `Dir.chdir` block made an empty file there, and outcomes failed (a trial).
      def with_absolute_sqlite_path(url)
        return url if defined?(::Rails.root) && ::Rails.root

        scheme, path, query = url.match(%r{\A(sqlite3?:)([^/?][^?]*)(\?.*)?\z})&.captures
        return url if path.nil? || path.start_with?(":memory:", "file:")

        "#{scheme}#{URI::RFC2396_Parser.new.escape(Dir.pwd, %r{[^-_.!~*'()a-zA-Z\d/]})}/#{path}#{query}"
      end
  end
end

# Active Job finds Bobbin's adapter by name (`config.active_job.queue_adapter = :bobbin`) whichever of the two is
# loaded first: ActiveJob::QueueAdapters autoloads it, and it is loaded with ActiveJob::Base.
begin
  require "active_job"
rescue LoadError => error
  raise unless error.path == "active_job" # no Active Job in this bundle: Bobbin::Job classes only
else
  ActiveJob::QueueAdapters.autoload(:BobbinAdapter, File.expand_path("active_job/queue_adapters/bobbin_adapter", __dir__))
  require_relative "bobbin/concurrency/controls"
  require_relative "bobbin/interrupted_jobs"
  ActiveSupport.on_load(:active_job) do
    ActiveJob::QueueAdapters.const_get(:BobbinAdapter) # loads it with Active Job
    include Bobbin::Concurrency::Controls
    include Bobbin::RunsOn
    include Bobbin::InterruptedJobs
  end
end

# In a Rails app (Bundler.require runs after `require "rails"`): config.bobbin, config/bobbin.yml, rake tasks.
require_relative "bobbin/railtie" if defined?(Rails::Railtie)
