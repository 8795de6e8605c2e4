# frozen_string_literal: true

module Bobbin
  # How the command line starts: connect, load the job files, check Bobbin's tables. Every way that fails before
  # any work starts (no URL, no database, server down or full, read-only SQLite, missing tables or files) becomes
  # a one-line ConfigurationError that names the problem and the fix, which `bobbin` prints and exits 78 on (69 for
  # DatabaseUnreachable: a database down or turning the connection away).
  module Boot
    TABLES = %w[bobbin_jobs bobbin_processes bobbin_pauses].freeze

    module_function

    # Boots the Rails app (config/environment.rb, when present and no `database` URL was given) or connects to
    # `database` (default DATABASE_URL), loads `requires`, and unless `tables: false` checks Bobbin's tables exist.
    # With no URL anywhere and no Rails app, a -r file may connect itself (Bobbin.connect in a plain Ruby app's jobs file).
    def run(database: nil, requires: [], tables: true)
      where = source(database)
      connected = database_step(where) { connect(database, where, create: !tables) }
      check_connectable if connected
      check_sqlite_files(where) if connected
      database_step(where) { requires.each { |file| load_file(file) } }
      raise ConfigurationError, no_database(requires) unless connected || connected?
      database_step(where) { check_tables } if tables
      true
    end

    # What names the database, as errors tell the user to check it.
    def source(database)
      return "the -d URL" if database
      return RAILS_CONFIG if File.exist?("config/environment.rb")

      "DATABASE_URL"
    end

    RAILS_CONFIG = "config/database.yml"

    # `where` (a source), with a booted Rails app's entry for Bobbin's tables and the database and host it gives:
    # `config/database.yml (production queue: database "jobs" on db.internal:5432)`. A URL is not shown (its password).
    def described(where)
      return where unless where == RAILS_CONFIG && connected?

      config = Record.connection_db_config
      port = config.configuration_hash[:port]
      at = config.host ? [ config.host, port ].compact.join(":") : ("port #{port}" if port)
      "#{where} (#{config.env_name} #{config.name}: database #{config.database.to_s.inspect}#{" on #{at}" if at})"
    end

    # True once Bobbin's records have a connection pool.
    def connected?
      Record.connection_pool
      true
    rescue ActiveRecord::ConnectionNotEstablished
      false
    end

    def no_database(requires)
      loaded = " and #{requires.join(', ')} did not call Bobbin.connect" if requires.any?
      "no database: DATABASE_URL is unset or empty#{loaded}; set it (postgres://… or sqlite3:path) or pass -d URL"
    end

    # Runs the block, turning a failure to reach or use the database into a one-line ConfigurationError.
    def database_step(where = "DATABASE_URL")
      yield
    rescue ActiveRecord::ActiveRecordError, *driver_errors => error
      raise DatabaseProblem.error_for(error, where)
    end

    # Boots the Rails app or connects to the URL given or in DATABASE_URL; false when there is no URL (the -r files may
    # connect).
    def connect(database, where, create: false)
      return boot_rails.then { true } if File.exist?("config/environment.rb") && database.nil?

      url = database || ENV["DATABASE_URL"]
      return false if url.to_s.strip.empty?

      Bobbin.require_driver(url)
      Bobbin.check_sqlite_url(url)
      check_sqlite_file(url, where, create: create)
      Bobbin.connect(url)
    rescue ConfigurationError => error # Bobbin.connect's own advice names DATABASE_URL
      raise unless error.cause.is_a?(ActiveRecord::NoDatabaseError)

      raise ConfigurationError, DatabaseProblem.describe(error.cause, where)
    end

    # A Rails app's pools (the app's, and Bobbin's own database's with connects_to) each have a connection to lend:
    # checked before the first query, which would wait on a pool of 0 and fail as if the server were down
    # (Bobbin.connect checks its own).
    def check_connectable
      pools = [ ActiveRecord::Base, Record ].filter_map { |model| pool_of(model) }.uniq
      pools.each { |pool| ConnectionBudget.check_connectable!(pool.size, pool.db_config.name) }
    end

    # A Rails app's SQLite entry that names no file: rails new (without Kamal) writes production's `database:` lines
    # commented out, and the adapter's ArgumentError at the first query made `bobbin start` exit 1 with a backtrace
    # (the Puma plugin's too, stopping Puma).
    def check_sqlite_files(where)
      [ ActiveRecord::Base, Record ].filter_map { |model| pool_of(model)&.db_config }.uniq.each do |config|
        next unless config.adapter.to_s.include?("sqlite") && config.database.to_s.strip.empty?

        example = "storage/#{config.env_name}#{"_#{config.name}" unless config.name == 'primary'}.sqlite3"
        raise ConfigurationError, "the #{config.env_name} #{config.name} database in #{where} names no SQLite file (no database: " \
                                  "or an empty one, as rails new leaves production's commented out): set one, database: #{example} say"
      end
    end

    def pool_of(model)
      model.connection_pool
    rescue ActiveRecord::ConnectionNotEstablished
      nil
    end

    # Boots the Rails app in the current directory, with Bobbin's Railtie registered first (Bobbin may have been
    # required before Rails, as `bobbin` and bin/bobbin do), so config.bobbin and config/bobbin.yml apply.
    def boot_rails
      require "rails"
      require_relative "../railtie"
      require File.expand_path("config/environment.rb")
    end

    # What `bobbin start` and `bobbin work` do once booted, before their workers start: the terminal log, the adapter warning.
    def before_work
      log_to_console
      warn_other_adapter
    end

    # `bobbin start` and `bobbin work` in a Rails app's development environment also write the app's log to the
    # terminal, as `rails server` does there (Rails.logger writes only to log/development.log otherwise, and a worker
    # started by hand or by bin/dev would say nothing about what it does).
    def log_to_console
      return unless defined?(::Rails.env) && ::Rails.env.development? && ::Rails.logger.respond_to?(:broadcast_to)
      return if ActiveSupport::Logger.logger_outputs_to?(::Rails.logger, $stdout, $stderr)

      $stdout.sync = true # a forked worker's lines, not left in a buffer when its output is a file or a pipe (bin/dev)
      console = ActiveSupport::Logger.new($stdout)
      console.formatter = ::Rails.logger.formatter
      console.level = ::Rails.logger.level
      ::Rails.logger.broadcast_to(console)
    end

    # Active Record would create a missing directory (or fail without FileUtils), and SQLite a missing file: a typo
    # should not make a new database. Only `bobbin migrate` (`create`) makes the file; it needs the directory.
    def check_sqlite_file(url, where, create:)
      return unless url.start_with?("sqlite")

      path = sqlite_path(url, where)
      return if path.empty? || path == ":memory:" || path.start_with?("file:")

      directory = File.dirname(File.expand_path(path))
      unless File.directory?(directory)
        raise ConfigurationError, "the SQLite database #{path} is in a directory that does not exist (#{directory}): create it or fix the path in #{where}"
      end
      return if create || File.exist?(path)

      raise ConfigurationError, "the SQLite database #{path} does not exist (check the path in #{where}): to create it, #{Schema::INSTALL}"
    end

    # The path of a SQLite URL. One URI cannot read (`sqlite3:` with nothing after it, as `sqlite3:$JOBS_DB` gives with
    # the variable unset) raised URI::InvalidURIError here with a backtrace, before Bobbin.connect could say so.
    def sqlite_path(url, where)
      ActiveRecord::DatabaseConfigurations::ConnectionUrlResolver.new(url).to_hash[:database].to_s
    rescue URI::Error
      raise ConfigurationError.new(DatabaseProblem.unreadable_url(where)), cause: nil
    end

    # Requires a -r file, saying which one when it is missing or cannot load what it requires.
    def load_file(file)
      path = File.expand_path(file)
      unless File.file?(path) || File.file?("#{path}.rb")
        raise ConfigurationError, "-r #{file}: no such file (#{path}); give the file that defines your job classes"
      end

      require path
    rescue LoadError => error
      raise ConfigurationError, "-r #{file}: #{error.message.lines.first.strip} (LoadError); is the gem in your Gemfile?"
    rescue SyntaxError => error
      raise ConfigurationError, "-r #{file}: #{syntax_problem(error)} (SyntaxError)"
    rescue ConfigurationError, ActiveRecord::ActiveRecordError, *driver_errors # said already, or by database_step
      raise
    rescue StandardError => error
      raise ConfigurationError, "-r #{file} raised as it loaded: #{error.class}: #{error.message.lines.first&.strip} " \
                                "(#{raised_at(error, path)})"
    end

    # A syntax error in one line: where, and the parser's first complaint (Prism's message shows the code around it).
    def syntax_problem(error)
      where = error.message.lines.first.to_s[/\A(.*?:\d+):/, 1]
      complaint = error.message[/^\s*\|\s*\^~*\s+(.+)$/, 1] || error.message.lines.first.to_s.split(": ", 2).last
      [ where, complaint.to_s.strip ].compact.join(": ")
    end

    # The line of `path` (else the first line) the error was raised from, as file:line.
    def raised_at(error, path)
      frames = Array(error.backtrace)
      (frames.find { |frame| frame.start_with?("#{path.delete_suffix('.rb')}.rb:") } || frames.first).to_s.sub(/:in .*\z/, "")
    end

    # Checked here, before a supervisor forks, so workers are not restarted forever against a database they refuse.
    def check_tables
      Record.with_connection do |connection|
        missing = tables_missing(connection)
        raise ConfigurationError, missing_tables(missing, connection, Store::DatabaseFile.open&.path) if missing.any?

        Schema.check!(connection)
      end
    end

    # Which of TABLES the database of `connection` lacks.
    def tables_missing(connection) = TABLES.reject { |table| connection.data_source_exists?(table) }

    # What to say of `missing` tables in the database of `connection`. In a Rails app whose Active Job uses another
    # adapter in this environment, the tables are most likely missing because the generator set Bobbin up for
    # production only (its default), and the user runs it in development.
    # An SQLite file is named by its full path: a relative one opened another file from another directory (a trial).
    def missing_tables(missing, connection, file = nil)
      found = "Bobbin's tables are missing (#{missing.join(', ')})"
      adapter = rails_adapter_elsewhere or return "#{found}#{" in the SQLite file #{file}" if file}: #{Schema.install_hint(connection)}"

      env = ::Rails.env
      "#{found} in #{env}'s database, and Active Job in #{env} uses #{adapter}, not Bobbin (bin/rails generate bobbin:install " \
        "sets Bobbin up for production unless given --environments all): to run jobs on Bobbin in #{env}, run " \
        "bin/rails generate bobbin:install --environments all, then bin/rails db:prepare; for production's workers, " \
        "RAILS_ENV=production bin/bobbin start"
    end

    # `bobbin start` and `bobbin work` in a Rails app say so when perform_later in this environment does not reach them.
    def warn_other_adapter
      adapter = rails_adapter_elsewhere or return

      Bobbin.logger.warn("bobbin: Active Job in #{::Rails.env} uses #{adapter}, not Bobbin: perform_later here does not reach " \
                         "these workers (set config.active_job.queue_adapter = :bobbin, or run bin/rails generate bobbin:install " \
                         "--environments all)")
    end

    # The booted Rails app's Active Job adapter in this environment when it is not the expected one (Doctor.expected_adapter?).
    def rails_adapter_elsewhere
      return unless defined?(::Rails.application) && ::Rails.application

      adapter = Doctor.active_job_adapter
      adapter unless adapter.nil? || Doctor.expected_adapter?(adapter, ::Rails.env)
    end

    # The database drivers' own error classes, for those loaded.
    def driver_errors
      [ (PG::Error if defined?(PG::Error)), (SQLite3::Exception if defined?(SQLite3::Exception)) ].compact
    end
  end
end
