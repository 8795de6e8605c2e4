# frozen_string_literal: true

module Bobbin
  # Turns a failure to reach the database into one line saying what is wrong and what to do.
  module DatabaseProblem
    module_function

    # Runs the block (a process registering itself); a database error that no waiting mends (an SQLite file this user
    # cannot write, a full disk) becomes a ConfigurationError saying so: one line and exit 78 from the command line,
    # not a backtrace. A PostgreSQL that takes no writes (a replica, a failover's old primary) is a DatabaseUnreachable:
    # one line and exit 69, as a server that is down (it exited 1 with a backtrace); so is an SQLite file another process
    # keeps locked past the busy timeout. Others pass: an outage at boot is waited out by whoever restarts the process.
    def lasting!
      yield
    rescue ActiveRecord::ActiveRecordError => error
      raise DatabaseUnreachable, describe(error) if read_only_server?(error) || sqlite_busy?(error)
      raise unless sqlite_unwritable?(error) || disk_full?(error) || denied?(error)

      raise ConfigurationError, describe(error)
    end

    # What a server (or libpq) says when it turns away these credentials, whatever its state: no restart mends them. A
    # role that may not log in, and a URL without the password the server asks for, were exit 69 and "is the server
    # running?", and a process manager restarted them for ever.
    REFUSED_FOR_GOOD = /password authentication failed|role "[^"]*" does not exist|no pg_hba\.conf entry|role "[^"]*" is not permitted to log in|no password supplied/

    # The error to raise for `error` before work starts: DatabaseUnreachable for a database that is down or turns the
    # connection away (a restart mends that once it is back), else ConfigurationError; its message says which.
    def error_for(error, where = "DATABASE_URL")
      (unreachable?(error) ? DatabaseUnreachable : ConfigurationError).new(describe(error, where))
    end

    # Whether `error` says the database is down, restarting or dropped the connection: a restart (or a deploy's next
    # try) mends that once it is back. Credentials, SSL settings and privileges it turns away are not.
    def unreachable?(error)
      return false if denied?(error) || refused_for_good?(error) || tls_unusable?(error)

      error.is_a?(ActiveRecord::ConnectionFailed) ||
        (error.is_a?(ActiveRecord::ConnectionNotEstablished) && !error.is_a?(ActiveRecord::NoDatabaseError))
    end

    # The one-line explanation of `error`, raised while connecting or checking tables; `where` names what said
    # which database (DATABASE_URL, the -d URL, config/database.yml).
    def describe(error, where = "DATABASE_URL")
      text = first_line(error.cause || error) # Active Record's own wording can misname it (a role in the message → "username")
      if error.is_a?(ActiveRecord::NoDatabaseError) && text.match?(/does not exist|not found|no such file/i) then no_database(where)
      elsif text.match?(/too many (connections|clients)/i) then too_many(text)
      elsif sqlite_unwritable?(error) then read_only(text)
      elsif sqlite_busy?(error) then busy(text)
      elsif denied?(error) then denied(text)
      elsif read_only_server?(error) then read_only_server(text)
      elsif disk_full?(error) then "the disk holding the database #{database} is full (#{first_line(causes(error).last).delete_suffix(':')}): free space on it"
      elsif error.is_a?(ActiveRecord::ConnectionNotEstablished) && tls_unusable?(error)
        "the connection's SSL settings do not work with this server: #{text}; check sslmode, sslrootcert, sslcert and sslkey in #{where}"
      elsif error.is_a?(ActiveRecord::ConnectionNotEstablished) && refused_for_good?(error)
        "the database turned the connection away: #{text}; check the user name and password in #{where} (and that the role may log in)"
      elsif error.is_a?(ActiveRecord::ConnectionNotEstablished)
        "cannot connect to the database: #{text}; is the server running, and is #{where} right?"
      elsif error.is_a?(ActiveRecord::ConnectionFailed) # connected, then lost: the server stopped or restarted
        "lost the connection to the database: #{text}; run it again once the server is back"
      else "database error before starting: #{text} (#{error.class}); check #{where}"
      end
    end

    # A database URL that URI cannot parse (a password with % or a space not percent-encoded): URI's message repeats the
    # whole URL, password and all, so it is not shown.
    def unreadable_url(where)
      "#{where} is not a URL Active Record can read: write it postgres://user:password@host:port/database or sqlite3:path, " \
        "and percent-encode special characters in its user name and password (% as %25, @ as %40, # as %23, / as %2F, a space as %20)"
    end

    # The first non-blank line of the error's message.
    def first_line(error) = error.message.lines.map(&:strip).reject(&:empty?).first.to_s

    # The configured database does not exist on the server.
    def no_database(where)
      name = database
      # A URL missing a "/" (postgres:/user:secret@host/db) reaches the local server with all of it as the database's
      # name: not a database anyone created, and the password would be shown twice (a trial).
      return unreadable_url(where) if name.to_s.include?("@")

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

    # Another process kept SQLite's write lock for longer than this one waits (its busy timeout).
    def busy(text)
      "the SQLite database #{database} stayed locked past its busy timeout (#{text}): another process holds its write lock " \
        "(one stopped or frozen as it wrote, a long transaction); start again once it lets go"
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

      causes(error).any? { |e| e.is_a?(SQLite3::ReadOnlyException) || e.is_a?(SQLite3::CantOpenException) }
    end

    def sqlite_busy?(error) = defined?(SQLite3::BusyException) && causes(error).any?(SQLite3::BusyException)

    # The database role lacks a privilege: a least-privilege role a DBA made (a trial got a backtrace and exit 1).
    def denied(text)
      "the database role lacks a privilege Bobbin needs (#{text}): grant it SELECT, INSERT, UPDATE and DELETE on Bobbin's " \
        "tables and USAGE on their sequences (README: Running in production, database roles)"
    end

    # PostgreSQL refused a write: the session is read-only.
    def read_only_server(text)
      "the database #{database.inspect} takes no writes (#{text}): its URL reaches a replica or a failover's old " \
        "primary, or default_transaction_read_only is on for this role or database; point it at the primary"
    end

    def read_only_server?(error) = defined?(PG::ReadOnlySqlTransaction) && causes(error).any?(PG::ReadOnlySqlTransaction)

    def refused_for_good?(error) = causes(error).any? { |e| e.message.match?(REFUSED_FOR_GOOD) }

    # What libpq says of SSL settings that cannot work with this server (a certificate it cannot verify or read, an
    # sslmode it does not know, SSL required of a server without it): no restart mends them either. They were exit 69
    # and "is the server running?", and a process manager restarted them for ever.
    TLS_UNUSABLE = /certificate verify failed|root certificate file .* does not exist|could not (read|load|open) (private key|certificate|SSL|root certificate)|server certificate for .* does not match host name|invalid sslmode value|server does not support SSL, but SSL was required|SSL error: .*(certificate|unsupported protocol|wrong version)/

    def tls_unusable?(error) = causes(error).any? { |e| e.message.match?(TLS_UNUSABLE) }

    def denied?(error) = defined?(PG::InsufficientPrivilege) && causes(error).any?(PG::InsufficientPrivilege)

    # Whether the disk is full: SQLite says so (behind the failed ROLLBACK that follows, at times), PostgreSQL too.
    # SQLite's "disk I/O error" may be one too: the first connection to a file cannot make its -shm and -wal files.
    def disk_full?(error)
      causes(error).any? { |e| (defined?(SQLite3::FullException) && e.is_a?(SQLite3::FullException)) || e.message.match?(/No space left on device|could not extend file/) } ||
        (defined?(SQLite3::IOException) && causes(error).any?(SQLite3::IOException) && Store::DatabaseFile.open&.full?) || false
    rescue ActiveRecord::ActiveRecordError
      false
    end

    def causes(error) = Store.causes(error)
  end
end
