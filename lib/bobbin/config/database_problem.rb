# frozen_string_literal: true

module Bobbin
  # Turns a failure to reach the database into one line saying what is wrong and what to do.
  module DatabaseProblem
    module_function

    # The one-line explanation of `error`, raised while connecting or checking tables; `where` names what said
    # which database (DATABASE_URL, the -d URL, config/database.yml).
    def describe(error, where = "DATABASE_URL")
      text = first_line(error.cause || error) # Active Record's own wording can misname it (a role in the message → "username")
      if error.is_a?(ActiveRecord::NoDatabaseError) && text.match?(/does not exist|not found|no such file/i) then no_database(where)
      elsif text.match?(/too many (connections|clients)/i) then too_many(text)
      elsif sqlite_unwritable?(error) then read_only(text)
      elsif error.is_a?(ActiveRecord::ConnectionNotEstablished)
        "cannot connect to the database: #{text}; is the server running, and is #{where} right?"
      else "database error before starting: #{text} (#{error.class}); check #{where}"
      end
    end

    # The first non-blank line of the error's message.
    def first_line(error) = error.message.lines.map(&:strip).reject(&:empty?).first.to_s

    # The configured database does not exist on the server.
    def no_database(where)
      name = database
      "the database #{name.inspect} does not exist: create it (createdb #{name}, or bin/rails db:create) or fix the database URL (#{where})"
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

    # Bobbin's database name or SQLite path, if Active Record got that far: the queue database when the app gives
    # Bobbin one of its own (config.bobbin.connects_to), not the app's primary.
    def database
      Record.connection_db_config.database
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
