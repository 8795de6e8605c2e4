# frozen_string_literal: true

module Bobbin
  # Where jobs live. Each database has one class holding its hot-path SQL; the rest is Active Record.
  module Store
    # The columns of a process row a worker re-registers with, after the id, in order.
    PROCESS_COLUMNS = %i[kind name pid hostname supervisor_id metadata].freeze

    # The columns a new job row carries, in the order the INSERT statements read them.
    NEW_JOB = %i[queue class_name arguments priority run_at max_attempts active_job_id].freeze
    # The same, for rows of which some carry a concurrency limit (Concurrency::Limit#columns).
    LIMITED_JOB = (NEW_JOB + %i[concurrency_key concurrency_limit concurrency_duration]).freeze
    # The state a job goes back to when it waits again (retry, release, recovery): blocked if it has a limit.
    WAITING = "CASE WHEN concurrency_key IS NULL THEN 'ready' ELSE 'blocked' END"
    # Concurrency keys let through per transaction. On PostgreSQL each key is an advisory lock held to the end of its
    # transaction, in a lock table shared by the whole cluster (max_locks_per_transaction × max_connections: 6,400
    # by default); tens of thousands of keys in one transaction filled it ("out of shared memory").
    PROMOTE_SLICE = 500
    # Seconds before its run_at, by the database's clock, that a claim takes a job at the most (a claim's `through`,
    # Worker::Pacer::LEAD ahead of it): a host whose idea of that clock is off (its own stepped since it last measured)
    # then holds a job in a slot for this long, not for as long as its error.
    AHEAD_AT_MOST = 0.1

    # Formats a Time the way both databases compare and Active Record reads it back.
    def self.timestamp(time)
      time&.utc&.strftime("%Y-%m-%d %H:%M:%S.%6N")
    end

    # `value` as text every database stores: UTF-8 (a binary String's bytes read as UTF-8, another encoding
    # converted), bytes that are not UTF-8 and NULs (which PostgreSQL refuses in text) replaced by U+FFFD, at most
    # `limit` characters. For what a job hands Bobbin to keep but cannot be checked at enqueue (its errors).
    def self.text(value, limit)
      text = value.to_s
      text = text.dup.force_encoding(Encoding::UTF_8) if text.encoding == Encoding::BINARY
      text = text.encode(Encoding::UTF_8, invalid: :replace, undef: :replace) unless text.encoding == Encoding::UTF_8
      text = text.scrub unless text.valid_encoding?
      text = text.tr("\0", "\uFFFD") if text.include?("\0")
      text.length > limit ? text[0, limit] : text
    end

    # `relation.update_all(changes)` that returns the ids of the rows it changed (UPDATE … RETURNING id, on both databases).
    def self.updated_ids(relation, changes)
      relation.model.with_connection do |connection|
        values = changes.map do |name, value|
          type = relation.model.type_for_attribute(name.to_s)
          [ relation.table[name], Arel.arel_node?(value) ? Arel::Nodes::Grouping.new(value) : Arel.sql(connection.quote(type.serialize(type.cast(value)))) ]
        end
        update = relation.arel.compile_update(values, relation.table[relation.model.primary_key])
        sql = connection.unprepared_statement { connection.to_sql(update) }
        returned = "#{connection.quote_table_name(relation.model.table_name)}.#{connection.quote_column_name(relation.model.primary_key)}" # a join's tables have ids too
        # exec_query, not select_values: a write clears the query cache (a Rails request's, a runner's), and a read after
        # this one was answered from it, the jobs still shown as before.
        connection.exec_query("#{sql} RETURNING #{returned}", "#{relation.model} Update All").rows.map { |row| row.first.to_i }
      end
    end

    # Active Record's errors for a connection that could not be made or was lost. NoDatabaseError is a connection
    # refused too: Active Record raises it when PostgreSQL's refusal names the database (dropped, not accepting
    # connections, CONNECT revoked) or SQLite's directory cannot be made, a state to wait out like a server down.
    CONNECTION_ERRORS = [ ActiveRecord::ConnectionNotEstablished, ActiveRecord::ConnectionFailed, ActiveRecord::NoDatabaseError ].freeze

    # True for a lost connection, or a database that cannot take the statement for now: PostgreSQL turned read-only
    # (a failover whose old primary, now a replica, still answers the worker's address), starting up or shutting down,
    # out of disk, memory or connections, or a statement cancelled (statement_timeout, an operator); SQLite busy past
    # its busy timeout, out of disk, or failing to read or write its file. Bobbin keeps what it holds and tries again
    # later; other errors are bugs or a schema that does not match, and are reported as such.
    def self.outage?(error)
      3.times do
        return false if busy?(error)
        return true if outage_errors.any? { |kind| error.is_a?(kind) }
        return false unless (error = error.cause)
      end
      false
    end

    # True when a statement gave up waiting for a lock (PostgreSQL's lock_timeout; see `lock_wait`).
    def self.locked?(error)
      causes(error).any? { |e| e.is_a?(ActiveRecord::LockWaitTimeout) || (defined?(PG::LockNotAvailable) && e.is_a?(PG::LockNotAvailable)) }
    end

    # A database made read-only for a while (a failover's window: `default_transaction_read_only`, which a session
    # reads when it starts) leaves the sessions opened meanwhile read-only after it ends. Bobbin's own sessions are
    # opened again after any outage; the idle ones of Active Record's pool are closed here, so the next try opens one
    # that can write (the supervisor's heartbeat and clock stayed read-only for good: a trial).
    def self.drop_read_only_sessions(error)
      return unless defined?(PG::ReadOnlySqlTransaction) && causes(error).any?(PG::ReadOnlySqlTransaction)

      Record.connection_pool.flush!
    end

    # `error` and the errors behind it (at most five in all).
    def self.causes(error)
      chain = [ error ]
      chain << chain.last.cause while chain.last.cause && chain.size < 5
      chain
    end

    # Seconds Bobbin's sessions wait for a lock before giving up for now (PostgreSQL's lock_timeout: a worker's own
    # sessions, and housekeeping's). A table lock held for minutes (CREATE INDEX without CONCURRENTLY, VACUUM FULL,
    # an ALTER TABLE that rewrites, LOCK TABLE) would otherwise hold a worker's outcome writes and, behind them on the
    # same session, its heartbeat: silent past process_alive_threshold, the live worker was pruned and its jobs ran
    # twice. A quarter of heartbeat_interval, so the beats go on; at most 5 s.
    def self.lock_wait = Bobbin.config.heartbeat_interval.fdiv(4).clamp(0.05, 5)

    # `lock_wait` as PostgreSQL's lock_timeout setting.
    def self.lock_timeout = "#{(lock_wait * 1000).round}ms"

    # What a log line says of a wait for a lock that gave up.
    def self.lock_waited = "waited #{format('%g', lock_wait)}s for a lock on Bobbin's tables that another session holds"

    # Who holds a lock on Bobbin's tables that holds up their readers or writers: "pid 42 (AccessExclusiveLock): LOCK
    # TABLE bobbin_jobs; …" (PostgreSQL), "" when none is seen.
    def self.lock_holders
      holders = Record.with_connection { |connection| connection.select_rows(<<~SQL, "Bobbin Lock Holders") }
        SELECT DISTINCT a.pid, l.mode, left(regexp_replace(coalesce(a.query, ''), '\s+', ' ', 'g'), 80) FROM pg_locks l
        JOIN pg_stat_activity a ON a.pid = l.pid
        WHERE l.granted AND l.pid <> pg_backend_pid() AND l.mode IN ('ShareLock', 'ShareRowExclusiveLock', 'ExclusiveLock', 'AccessExclusiveLock')
          AND l.relation IN (SELECT oid FROM pg_class WHERE relname LIKE 'bobbin\_%')
      SQL
      holders.map { |pid, mode, query| "pid #{pid} (#{mode}): #{query}" }.join("; ")
    end

    # Runs the block on one connection of Bobbin's tables that waits at most `lock_wait` for a lock (PostgreSQL; on
    # SQLite, whose busy timeout is the wait, it just runs the block). The session's own setting comes back after.
    def self.waiting_briefly_for_locks
      return yield unless postgresql?

      Record.connection_pool.with_connection do |connection|
        before = connection.select_value("SELECT current_setting('lock_timeout')", "Bobbin Maintenance")
        connection.select_value("SELECT set_config('lock_timeout', $1, false)", "Bobbin Maintenance", [ lock_timeout ])
        begin
          yield
        ensure
          connection.select_value("SELECT set_config('lock_timeout', $1, false)", "Bobbin Maintenance", [ before ]) if connection.active?
        end
      end
    end

    # True when this process's Active Record pool had no free connection in time (its jobs hold them all): the
    # database may be fine, so it is not an outage, and silent processes elsewhere are still judged by their silence.
    def self.busy?(error) = error.is_a?(ActiveRecord::ConnectionTimeoutError)

    # An outage or a busy pool: what housekeeping waits out and tries again, rather than report as a bug.
    def self.transient?(error) = outage?(error) || busy?(error) || locked?(error)

    # True for an error the database or its driver raised (not one raised into the calling thread from outside).
    def self.database_error?(error)
      error.is_a?(ActiveRecord::ActiveRecordError) || (defined?(PG::Error) && error.is_a?(PG::Error)) ||
        (defined?(SQLite3::Exception) && error.is_a?(SQLite3::Exception)) || false
    end

    # Looked up on each error (rare), so a driver loaded after the first one still counts.
    def self.outage_errors
      [
        *CONNECTION_ERRORS,
        *([ PG::ConnectionBad, PG::UnableToSend, PG::ReadOnlySqlTransaction, PG::OperatorIntervention, PG::InsufficientResources ] if defined?(PG::Error)),
        *([ SQLite3::BusyException, SQLite3::FullException, SQLite3::IOException ] if defined?(SQLite3::Exception))
      ]
    end
    private_class_method :outage_errors

    # What a log line says of a database error: its class and first line, and the driver's own when Active Record's
    # reads otherwise. Active Record guesses the cause of a refused connection from its text, and a refusal naming
    # the user ("too many connections for role …") comes out as a wrong password.
    def self.reason(error) = "#{error.class}: #{error.message.lines.first&.strip}#{driver_said(error)}"

    # " (PG::ConnectionBad: connection to server … refused)": what the driver said under an Active Record error whose
    # own message does not (Active Record's "There is an issue connecting with your hostname" names no cause); "".
    def self.driver_said(error)
      cause = error.cause
      return "" if cause.nil? || cause.is_a?(ActiveRecord::ActiveRecordError)

      driver = cause.message.lines.first&.strip.to_s
      driver.empty? || error.message.include?(driver) ? "" : " (#{cause.class}: #{driver})"
    end

    # Opens a store on a new connection of its own (outside the pool the jobs' code uses).
    def self.open(selection)
      db_config = Record.connection_db_config
      Guarded.new(for_adapter(db_config.adapter).new(OwnConnections.open(db_config), selection))
    end

    # Inserts new job rows and returns their ids; announces them once committed. Inside a transaction on Bobbin's
    # connection the rows join it (one statement, committed or rolled back with it); outside one, concurrent
    # callers of this process share a statement and a commit (Client::GroupCommit) and each returns once its rows
    # are durable.
    def self.insert(rows)
      # With Bobbin's tables in the app's primary database, a GET under Rails' role switching prevents writes on it;
      # an enqueue is let through, as into a queue database of their own (see Record.current_role).
      owner = Record.connection_class_for_self
      return owner.connected_to(role: ActiveRecord.writing_role) { insert(rows) } if owner.current_preventing_writes

      own = Record.connection_pool.active_connection?
      ids = if own&.transaction_open? || rows.any? { |row| row[:concurrency_key] }
        Record.with_connection { |connection| write(connection, rows) }
      else
        group_commit.insert(rows).tap { own&.clear_query_cache }
      end
      same_file!(ids)
    end

    # `ids`, unless the SQLite file this process enqueues into is no longer at its path (moved, deleted or replaced
    # since the process's first enqueue): the rows went into the old file, which workers read only until they notice
    # (they then exit), so the jobs may or may not run, and the caller hears so (a trial: a web process went on
    # enqueuing into a deleted file, each call returning an id; another: a third of the jobs so refused ran).
    def self.same_file!(ids)
      db_config = Record.connection_db_config
      @enqueue_file = [ db_config, DatabaseFile.open(db_config) ] unless @enqueue_file&.first.equal?(db_config)
      file = @enqueue_file.last
      return ids unless file&.replaced?

      jobs = ids.one? ? "job #{ids.first}" : "#{ids.size} jobs (#{ids.first}…#{ids.last})"
      raise EnqueueError, "the SQLite database #{file.path} was moved, deleted or replaced since this process opened it: #{jobs} went " \
                          "into the old file it still has open, which workers that have not noticed yet (a second or two) may still run, " \
                          "and then none will; start this process again to open the file at the path"
    end

    # One statement on `connection`, around Active Record's query cache (two identical enqueues are two jobs) and
    # clearing it (later reads see them); announced after the commit.
    def self.write(connection, rows)
      sql = for_adapter(connection.adapter_name)
      connection.bobbin_reopen_if_closed if sql == PostgreSQL && connection.respond_to?(:bobbin_reopen_if_closed)
      notices = notices(rows)
      if notices.one? && sql == PostgreSQL && sql.pipelined?(connection) && rows.none? { |row| row[:concurrency_key] }
        return all_stored!(write_announcing(connection, sql, rows, notices.first), rows)
      end

      insert = -> { connection.uncached { rows.any? { |row| row[:concurrency_key] } ? insert_limited(connection, sql, rows) : sql.insert(connection, rows) } }
      ids = all_stored!(sql == SQLite ? Wakeups.inserting(connection, &insert) : insert.call, rows)
      connection.clear_query_cache
      notices.each { |notice| Wakeups.announce(notice.queues, at: notice.at, connection: connection) }
      ids
    end

    # `ids`, one for each of `rows`: an INSERT that stored fewer (its values lost on the way: Active Record 7.2 dropped a
    # SQLite statement's binds, see SQLite.run) returned fewer ids, and each enqueue it lost returned as if it had
    # stored its job.
    def self.all_stored!(ids, rows)
      return ids if ids.size == rows.size

      raise EnqueueError, "Bobbin stored #{ids.size} of the #{rows.size} jobs given to it; the others were not stored. Please report this " \
                          "with your Active Record version and database adapter"
    end

    # PostgreSQL outside a transaction: the INSERT and its NOTIFY in one round trip.
    def self.write_announcing(connection, sql, rows, notice)
      sql.insert_announcing(connection, rows, notice.to_json).tap { connection.clear_query_cache }
    end

    # This process's GroupCommit (a forked child gets its own: a parent's writer may have been mid-write).
    def self.group_commit
      return @group_commit if @group_commit_pid == ::Process.pid

      # Made before the pid is noted: the other way round, a second thread of a new child could take the parent's meanwhile.
      @group_commit = Client::GroupCommit.new { |rows| Record.with_connection { |connection| write(connection, rows) } }
      @group_commit_pid = ::Process.pid
      @group_commit
    end

    # What new rows announce: the queues of those due now; the queues of those due later, with the earliest of their
    # due times (epoch seconds). Rows of both kinds (an enqueue_all, or callers sharing a group commit) are two
    # notices, or a worker told only "now" would find the later ones at its next poll.
    def self.notices(rows)
      now = nil
      later, due = rows.partition { |row| row[:run_at] && row[:run_at] > (now ||= timestamp(Time.now)) }
      notices = []
      notices << Wakeups::Notice.new(due.map { |row| row[:queue] }.uniq, nil) if due.any?
      notices << Wakeups::Notice.new(later.map { |row| row[:queue] }.uniq, epoch(later.map { |row| row[:run_at] }.min)) if later.any?
      notices
    end

    # A `timestamp` string as epoch seconds.
    def self.epoch(timestamp) = Time.utc(*timestamp.scan(/\d+/).map(&:to_i)).to_f

    # Rows of which some carry a concurrency limit: inserted (those blocked) and let through to their keys' free
    # slots in one transaction. Inside the app's transaction they are let through once it commits, in a transaction
    # of their own: letting them through takes their keys' locks (on PostgreSQL advisory locks that last as long as
    # the transaction), and held for as long as the app's transaction stays open they stopped every worker finishing a
    # job of those keys (its heartbeat too), and two transactions enqueuing keys in opposite orders deadlocked.
    # More keys than a PROMOTE_SLICE are let through after the insert, a slice per transaction.
    def self.insert_limited(connection, sql, rows)
      keys = rows.filter_map { |row| row[:concurrency_key] }.uniq
      if connection.transaction_open?
        return sql.insert_limited(connection, rows).tap { Record.current_transaction.after_commit { promote_keys(keys) } }
      end
      return sql.insert_limited(connection, rows).tap { promote_keys(keys) } if keys.size > PROMOTE_SLICE # failing, the Clock does it

      connection.transaction { sql.insert_limited(connection, rows).tap { sql.promote(connection, keys) } }
    end

    # Lets blocked jobs of `keys` through to their free slots through a worker's own `store`, announcing them. Its
    # statements go through Active Record's logging, held back as housekeeping's are (in development each limited job's
    # finish printed 20 lines of SQL to the terminal). A failure is logged: the Clock's next pass promotes them.
    def self.let_through(store, keys, logger = Bobbin.logger)
      return if keys.empty?

      store.announce(Wakeups::Notice.new(nil, nil)) if Maintenance.quietly { store.promote(keys.uniq) }.positive?
    rescue StandardError => error # Store::Unavailable, or a statement refused
      logger.warn("bobbin: could not let waiting jobs of #{keys.uniq.size} concurrency keys through yet: #{error.message}")
    end

    # Lets blocked jobs of `keys` through to their free slots, announcing them; a failure is logged (the Clock's
    # next pass promotes them).
    def self.promote_keys(keys)
      Record.with_connection { |connection| promote_on(connection, keys) }
    rescue StandardError => error
      Bobbin.logger.warn("bobbin: could not let the blocked jobs of #{keys.size} concurrency keys through yet " \
                         "(#{reason(error)}); the next promotion pass will")
    end

    # Promotes blocked jobs whose key has a free slot, for every key with due blocked jobs: slots freed by a
    # holder's duration running out, a crash, or a retry coming due. Returns how many jobs it promoted. Due by the
    # database's clock, as PROMOTE judges, in the same statement (a host whose clock was behind let retried limited
    # jobs through late); SQLite's clock is this host's.
    def self.promote_due
      Record.with_connection do |connection|
        # Retryable, as Active Record's own conditions are (a session the server closed while idle is opened again);
        # SQLite's time as a bind parameter, not written into the statement.
        db_now = Arel.sql("now() AT TIME ZONE 'UTC'", retryable: true)
        due = postgresql? ? JobRecord.where(JobRecord.arel_table[:run_at].lteq(db_now)) : JobRecord.where(run_at: ..Time.now.utc)
        promote_on(connection, due.where(state: "blocked").distinct.pluck(:concurrency_key))
      end
    end

    # Seconds until the earliest blocked job set to run later falls due, by the clock PROMOTE judges by (the database's
    # on PostgreSQL, this host's on SQLite); nil when none waits for its time. The Clock wakes then: at its once-a-second
    # pass, a limited job's `wait:` (or its retry's backoff) ran up to a second late, where an unlimited one starts on time.
    def self.next_blocked_due
      Record.with_connection do |connection|
        if postgresql?
          connection.select_all(<<~SQL, "Bobbin Next Blocked", allow_retry: true).rows.first.first&.to_f
            SELECT EXTRACT(EPOCH FROM MIN(run_at) - now() AT TIME ZONE 'UTC')::float8 FROM bobbin_jobs
            WHERE state = 'blocked' AND run_at > now() AT TIME ZONE 'UTC'
          SQL
        else
          now = Time.now.utc
          JobRecord.where(state: "blocked", run_at: (now + 0.000001)..).minimum(:run_at)&.then { |first| first - now }
        end
      end
    end

    # Promotes `keys`' blocked jobs on `connection`, PROMOTE_SLICE keys per transaction, and announces them; returns how many.
    def self.promote_on(connection, keys)
      sql = for_adapter(connection.adapter_name)
      promoted = keys.sort.each_slice(PROMOTE_SLICE).sum { |some| sql.promote(connection, some) }
      Wakeups.announce(nil, connection: connection) if promoted.positive?
      promoted
    end

    # True when `db_config` (Bobbin's, by default) is a PostgreSQL database.
    def self.postgresql?(db_config = Record.connection_db_config) = db_config.adapter.to_s.match?(/postg/i)

    # The class holding the hot-path SQL for an adapter name.
    def self.for_adapter(name)
      case name.to_s.downcase
      when /postg/ then PostgreSQL
      when /sqlite/ then SQLite
      else raise ConfigurationError, "Bobbin supports PostgreSQL and SQLite, not #{name.inspect}"
      end
    end
  end
end
