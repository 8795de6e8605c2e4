# frozen_string_literal: true

module Bobbin
  # How the command line starts: connect, load the job files, check Bobbin's tables. Every way that fails before
  # any work starts (no URL, no database, server down or full, read-only SQLite, missing tables or files) becomes
  # a one-line ConfigurationError that names the problem and the fix, which `bobbin` prints and exits 78 on.
  module Boot
    TABLES = %w[bobbin_jobs bobbin_processes bobbin_pauses].freeze

    module_function

    # Boots the Rails app (config/environment.rb, when present and no `database` URL was given) or connects to
    # `database` (default DATABASE_URL), loads `requires`, and unless `tables: false` checks Bobbin's tables exist.
    def run(database: nil, requires: [], tables: true)
      database_step { connect(database) }
      requires.each { |file| load_file(file) }
      database_step { check_tables } if tables
      true
    end

    # Runs the block, turning a failure to reach or use the database into a one-line ConfigurationError.
    def database_step
      yield
    rescue ActiveRecord::ActiveRecordError, *driver_errors => error
      raise ConfigurationError, DatabaseProblem.describe(error)
    end

    # Boots the Rails app or connects to the URL given or in DATABASE_URL.
    def connect(database)
      return require(File.expand_path("config/environment.rb")) if File.exist?("config/environment.rb") && database.nil?

      url = database || ENV["DATABASE_URL"]
      raise ConfigurationError, "no database: DATABASE_URL is unset or empty; set it (postgres://… or sqlite3:path) or pass -d URL" if url.to_s.strip.empty?

      check_sqlite_directory(url)
      Bobbin.connect(url)
    end

    # Active Record would create a missing directory (or fail without FileUtils); a typo should not make a new database.
    def check_sqlite_directory(url)
      return unless url.start_with?("sqlite")

      path = ActiveRecord::DatabaseConfigurations::ConnectionUrlResolver.new(url).to_hash[:database].to_s
      return if path.empty? || path == ":memory:" || path.start_with?("file:") || File.directory?(File.dirname(File.expand_path(path)))

      raise ConfigurationError, "the SQLite database #{path} is in a directory that does not exist " \
                                "(#{File.dirname(File.expand_path(path))}): create it or fix the path in DATABASE_URL"
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
    end

    # Checked here, before a supervisor forks, so workers are not restarted forever against a database they refuse.
    def check_tables
      Record.with_connection do |connection|
        missing = TABLES.reject { |table| connection.data_source_exists?(table) }
        raise ConfigurationError, "Bobbin's tables are missing (#{missing.join(', ')}): run `bobbin migrate` " \
                                  "(or, in a Rails app, add the migration from the README and run it)" if missing.any?

        Schema.check!(connection)
      end
    end

    # The database drivers' own error classes, for those loaded.
    def driver_errors
      [ (PG::Error if defined?(PG::Error)), (SQLite3::Exception if defined?(SQLite3::Exception)) ].compact
    end
  end

  # Turns a failure to reach the database into one line saying what is wrong and what to do.
  module DatabaseProblem
    module_function

    # The one-line explanation of `error`, raised while connecting or checking tables.
    def describe(error)
      text = first_line(error.cause || error) # Active Record's own wording can misname it (a role in the message → "username")
      if error.is_a?(ActiveRecord::NoDatabaseError) && text.match?(/does not exist|not found|no such file/i) then no_database
      elsif text.match?(/too many (connections|clients)/i) then too_many(text)
      elsif sqlite_unwritable?(error) then read_only(text)
      elsif error.is_a?(ActiveRecord::ConnectionNotEstablished)
        "cannot connect to the database: #{text}; is the server running, and is DATABASE_URL right?"
      else "database error before starting: #{text} (#{error.class}); check DATABASE_URL"
      end
    end

    # The first non-blank line of the error's message.
    def first_line(error) = error.message.lines.map(&:strip).reject(&:empty?).first.to_s

    # The configured database does not exist on the server.
    def no_database
      name = database
      "the database #{name.inspect} does not exist: create it (createdb #{name}, or bin/rails db:create) or fix DATABASE_URL"
    end

    # The server turned the connection away: max_connections or a CONNECTION LIMIT is reached.
    def too_many(text)
      "the database refused the connection, it has too many already (#{text}): raise max_connections (or the role's " \
        "or database's CONNECTION LIMIT) or run fewer processes; `bobbin doctor` shows how many this configuration needs"
    end

    # SQLite cannot open or write the file (permissions on the file or its directory).
    def read_only(text)
      path = database
      "cannot write the SQLite database #{path} (#{text}): this user needs write access to the file and to its " \
        "directory, where SQLite creates the -wal and -shm files"
    end

    # The configured database name or SQLite path, if Active Record got that far.
    def database
      ActiveRecord::Base.connection_db_config.database
    rescue ActiveRecord::ActiveRecordError
      nil
    end

    # Whether SQLite refused to open or write the file.
    def sqlite_unwritable?(error)
      return false unless defined?(SQLite3::Exception)

      [ error, error.cause ].any? { |e| e.is_a?(SQLite3::ReadOnlyException) || e.is_a?(SQLite3::CantOpenException) }
    end
  end
end
