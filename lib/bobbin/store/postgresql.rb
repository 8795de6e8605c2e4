# frozen_string_literal: true

require "digest"

module Bobbin
  module Store
    # Bobbin's hot-path SQL for PostgreSQL: one statement per batch, run on a connection the worker owns.
    class PostgreSQL
      # A wildcard worker's session plans its statements once: planning the wildcard's claim (`prefix_choice`) cost
      # ~0.5 ms, more than running it, and PostgreSQL planned it afresh at every claim (its generic plan's estimate of a
      # `LIMIT $2` is 10% of the rows, so it looked dearer than a plan for the batch's size): a drain took twice as long.
      GENERIC = "; SET plan_cache_mode = force_generic_plan"
      # Seconds a session keeps the plans it cached for its prepared statements. PostgreSQL makes a new one only after
      # an ANALYZE (autovacuum's, up to a minute or more after the table changed): a plan made on an empty table (a new
      # install, a drained queue) walked every ready job of a wildcard's queues for each claim once they grew (120 ms
      # a claim beside 500,000 jobs, 0.4 after ANALYZE; a named queue's 48 ms). DISCARD PLANS every REPLAN makes the
      # next ones from the table as it is then (0.4 ms a claim before any ANALYZE), for ~0.5 ms of planning.
      REPLAN = 5.0
      RETURNED = "id, queue, class_name, arguments, attempts, max_attempts, active_job_id, crashes, concurrency_key"
      # RETURNED's integer columns (ClaimedJob's members), which pg decodes to Integers: no String per value to parse.
      INTEGERS = %i[id attempts max_attempts crashes].freeze
      # When a claimed job is due: now, or by the claim's $4 (epoch seconds, NULL for none), a due time the worker woke
      # for a little ahead of (Worker::Pacer::LEAD), so that the claim's round trip is not part of its lateness; at
      # most AHEAD_AT_MOST from now.
      DUE_BY = "((now() + LEAST(GREATEST($4::float8 - EXTRACT(EPOCH FROM now())::float8, 0), #{AHEAD_AT_MOST}) * interval '1 second') AT TIME ZONE 'UTC')"

      # An outcome lands on a row this worker still holds: running, or given back to ready by a recovery (which clears
      # claimed_at, as a retry written by the worker does not) and claimed by no one since. A worker judged dead while
      # it ran the job (a network partition, a frozen host) had its finished jobs run again: its outcomes were dropped
      # as it came back, before its heartbeat could take them back (a trial: 5 of 5). Such a row gets a claimed_at again,
      # so a reclaim sent with the jobs held just before (the outcome not yet written) leaves a retry written here waiting.
      # A job recovery failed (out of crash retries) while its worker was only cut off is such a row too: the worker's
      # outcome is what happened, where it stayed failed with ProcessDied though it had succeeded (a review).
      FINISH = <<~SQL
        UPDATE bobbin_jobs AS j SET state = o.state, finished_at = o.finished_at, run_at = COALESCE(o.run_at, j.run_at),
          claimed_at = COALESCE(j.claimed_at, now() AT TIME ZONE 'UTC'),
          attempts = COALESCE(o.attempts, j.attempts), last_error_class = COALESCE(o.error_class, j.last_error_class),
          last_error_message = COALESCE(o.error_message, j.last_error_message),
          last_error_backtrace = COALESCE(o.backtrace, j.last_error_backtrace), max_attempts = COALESCE(o.max_attempts, j.max_attempts)
        FROM unnest($2::bigint[], $3::text[], $4::timestamp[], $5::timestamp[], $6::text[], $7::text[], $8::text[], $9::int[], $10::int[])
          AS o(id, state, finished_at, run_at, error_class, error_message, backtrace, attempts, max_attempts)
        WHERE j.id = o.id AND j.claimed_by = $1 AND (j.state = 'running' OR (j.state IN ('ready', 'blocked', 'failed') AND j.claimed_at IS NULL))
      SQL

      RELEASE = <<~SQL
        UPDATE bobbin_jobs SET state = #{WAITING}, attempts = GREATEST(attempts - 1, 0), claimed_at = NULL, started_at = NULL
        WHERE state = 'running' AND claimed_by = $1 AND NOT (id = ANY($2::bigint[]))
        RETURNING concurrency_key
      SQL

      INSERT = <<~SQL
        INSERT INTO bobbin_jobs (queue, class_name, arguments, priority, run_at, max_attempts, active_job_id,
                                 state, attempts, enqueued_at)
        SELECT q, c, a, p, COALESCE(r, now() AT TIME ZONE 'UTC'), m, aj, 'ready', 0, now() AT TIME ZONE 'UTC'
        FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::timestamp[], $6::int[], $7::text[])
          AS t(q, c, a, p, r, m, aj)
        RETURNING id
      SQL

      HAND_BACK = <<~SQL
        UPDATE bobbin_jobs SET state = #{WAITING}, attempts = GREATEST(attempts - 1, 0), claimed_at = NULL, started_at = NULL
        WHERE state = 'running' AND claimed_by = $1 AND id = ANY($2::bigint[])
        RETURNING concurrency_key
      SQL

      HEARTBEAT = <<~SQL
        UPDATE bobbin_processes SET last_heartbeat_at = now() AT TIME ZONE 'UTC', metadata = $2, loop_lag_ms = $3,
          max_loop_lag_ms = $4, stalls = $5
        WHERE id = $1
      SQL

      RECORD_STALLS = <<~SQL
        UPDATE bobbin_jobs AS j SET stalls = j.stalls + s.n, longest_stall_ms = GREATEST(COALESCE(j.longest_stall_ms, 0), s.ms)
        FROM unnest($1::bigint[], $2::int[], $3::float8[]) AS s(id, n, ms) WHERE j.id = s.id
      SQL

      REREGISTER = <<~SQL
        INSERT INTO bobbin_processes (id, kind, name, pid, hostname, supervisor_id, metadata, last_heartbeat_at, created_at)
        VALUES ($1, $2, $3, $4, $5, $6, $7, now() AT TIME ZONE 'UTC', now() AT TIME ZONE 'UTC') ON CONFLICT (id) DO NOTHING
      SQL

      RECLAIM = <<~SQL
        UPDATE bobbin_jobs AS j SET state = 'running', claimed_at = now() AT TIME ZONE 'UTC', attempts = h.attempts
        FROM unnest($2::bigint[], $3::int[]) AS h(id, attempts)
        WHERE j.id = h.id AND j.state IN ('ready', 'blocked') AND j.claimed_by = $1 AND j.claimed_at IS NULL
      SQL

      # An announcement (Wakeups) to every listening process. Its own transaction commits without waiting for the WAL
      # flush: a notification is not data, and NOTIFY's cluster-wide commit lock is then held for microseconds.
      NOTIFY = "SELECT 1 FROM pg_notify('#{Wakeups::Listener::CHANNEL}', $1), set_config('synchronous_commit', 'off', true)"
      NOTIFY_NAME = "bobbin_notify_v5"

      # Jobs with a concurrency limit (Concurrency::Limit) are inserted blocked; `promote` lets them through while
      # their key has a free slot. The advisory locks make promotions of one key take turns (the count of slot
      # holders must be read after the last promotion of that key committed), so no two sessions fill one slot.
      INSERT_LIMITED = <<~SQL
        INSERT INTO bobbin_jobs (queue, class_name, arguments, priority, run_at, max_attempts, active_job_id,
                                 concurrency_key, concurrency_limit, concurrency_duration, state, attempts, enqueued_at)
        SELECT q, c, a, p, COALESCE(r, now() AT TIME ZONE 'UTC'), m, aj, k, l, d, CASE WHEN k IS NULL THEN 'ready' ELSE 'blocked' END,
               0, now() AT TIME ZONE 'UTC'
        FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::timestamp[], $6::int[], $7::text[], $8::text[], $9::int[],
                    $10::float8[]) AS t(q, c, a, p, r, m, aj, k, l, d)
        RETURNING id
      SQL

      # The keys come sorted and distinct (locks taken in one order never deadlock); unnest keeps their order.
      LOCK_KEYS = "SELECT count(*) FROM (SELECT pg_advisory_xact_lock(hashtextextended('bobbin-concurrency/' || k, 0)) FROM unnest($1::text[]) AS k) AS locks"

      # Slot holders: jobs of the key that are ready (promoted, about to be claimed) or running for less than
      # their duration (a holder whose process hangs or vanished frees its slot then). The outer `state = 'blocked'`
      # is what PostgreSQL re-checks on a row another transaction changed after the ids were read (an operator's
      # discard takes no key lock): without it, that row would be made ready.
      PROMOTE = <<~SQL
        UPDATE bobbin_jobs SET state = 'ready'
        WHERE state = 'blocked' AND id = ANY(ARRAY(
          SELECT waiting.id FROM unnest($1::text[]) AS k(key)
          CROSS JOIN LATERAL (
            SELECT concurrency_limit - (
              SELECT count(*) FROM bobbin_jobs h
              WHERE h.concurrency_key = k.key AND h.state IN ('ready', 'running')
                AND (h.state = 'ready' OR h.claimed_at > (now() AT TIME ZONE 'UTC') - h.concurrency_duration * interval '1 second')
            ) AS free
            FROM bobbin_jobs WHERE state = 'blocked' AND concurrency_key = k.key AND run_at <= now() AT TIME ZONE 'UTC'
            ORDER BY priority, run_at, id LIMIT 1
          ) AS head
          CROSS JOIN LATERAL (
            SELECT id FROM bobbin_jobs WHERE state = 'blocked' AND concurrency_key = k.key AND run_at <= now() AT TIME ZONE 'UTC'
            ORDER BY priority, run_at, id LIMIT GREATEST(head.free, 0)
          ) AS waiting))
      SQL

      # One job (perform_later, Job.enqueue): a prepared statement, so the server plans it once per connection.
      INSERT_ONE = <<~SQL
        INSERT INTO bobbin_jobs (queue, class_name, arguments, priority, run_at, max_attempts, active_job_id,
                                 state, attempts, enqueued_at)
        VALUES ($1, $2, $3, $4, COALESCE($5::timestamp, now() AT TIME ZONE 'UTC'), $6, $7, 'ready', 0, now() AT TIME ZONE 'UTC')
        RETURNING id
      SQL
      INSERT_ONE_NAME = "bobbin_insert_one_v5"
      # The same, committing without waiting for the WAL flush (Configuration#durable_enqueue false): set_config's
      # local setting lasts for this statement's own transaction only, so it is used outside the app's transactions.
      INSERT_ONE_ASYNC = INSERT_ONE.sub("VALUES (", "SELECT ").sub(/\)\s*RETURNING id/, " FROM (SELECT set_config('synchronous_commit', 'off', true)) AS async\nRETURNING id")
      INSERT_ONE_ASYNC_NAME = "bobbin_insert_one_async_v5"
      # The same with its announcement ($8, the NOTIFY payload) in the same statement: with no WAL flush to wait for,
      # NOTIFY's commit lock is held for microseconds either way, and one transaction costs half of two.
      INSERT_ONE_ASYNC_NOTIFY = INSERT_ONE_ASYNC.sub("set_config('synchronous_commit', 'off', true))",
                                                     "set_config('synchronous_commit', 'off', true), pg_notify('#{Wakeups::Listener::CHANNEL}', $8))")
      INSERT_ONE_ASYNC_NOTIFY_NAME = "bobbin_insert_one_async_notify_v5"
      # What `prepare` makes on each session, by name (NOTIFY: planning it cost ~70 µs of every enqueue's round trip).
      PREPARED = { INSERT_ONE_NAME => INSERT_ONE, INSERT_ONE_ASYNC_NAME => INSERT_ONE_ASYNC,
                   INSERT_ONE_ASYNC_NOTIFY_NAME => INSERT_ONE_ASYNC_NOTIFY, NOTIFY_NAME => NOTIFY }.freeze

      # Inserts new job rows (Hashes of Store::NEW_JOB columns) on `connection`, the app's Active Record connection,
      # so an enqueue inside a transaction commits or rolls back with it. Returns the ids in order.
      def self.insert(connection, rows)
        return [ insert_one(connection, rows.first) ] if rows.size == 1 && prepared?(connection)

        connection.select_rows(INSERT, "Bobbin Enqueue", binds(rows)).map { |(id)| id.to_i }
      end

      # INSERT's parameters: one array per column of Store::NEW_JOB.
      def self.binds(rows)
        array = PG::TextEncoder::Array.new
        NEW_JOB.map { |column| array.encode(rows.map { |row| row[column] }) }
      end

      # Whether one-job inserts may use a prepared statement: the app allows them (not behind PgBouncer in transaction
      # mode, `prepared_statements: false`), and Active Record still offers the raw connection the way it does itself.
      def self.prepared?(connection)
        connection.prepared_statements? && connection.respond_to?(:with_raw_connection, true)
      end

      # Inserts one row through the prepared INSERT_ONE on Active Record's raw connection. with_raw_connection (as
      # Active Record's own statements do) first opens the app's pending transaction, so the row still joins it, and
      # turns driver errors into Active Record's. Prepared once per server session (the backend pid tells a new one).
      def self.insert_one(connection, row)
        raw_statement(connection, INSERT_ONE) do |raw|
          prepare(raw)
          raw.exec_prepared(one_name(connection), row.values_at(*NEW_JOB)) { |result| result.getvalue(0, 0).to_i }
        end
      end

      # Runs the block with `connection`'s PG::Connection as Active Record runs its own statements: the app's pending
      # transaction opened first, driver errors turned into Active Record's, and a `sql.active_record` event for
      # `sql` (query logs, APMs and the app's own subscribers see Bobbin's enqueues like any other statement).
      def self.raw_statement(connection, sql, &)
        connection.send(:log, sql, "Bobbin Enqueue") { connection.send(:with_raw_connection, &) }
      end

      # The prepared one-row INSERT to use: durable, or (durable_enqueue false, outside a transaction) not waiting for the flush.
      def self.one_name(connection)
        Bobbin.config.durable_enqueue || connection.transaction_open? ? INSERT_ONE_NAME : INSERT_ONE_ASYNC_NAME
      end

      # Prepares the one-row INSERTs on `raw` once per server session (the backend pid tells a new one; ForgetOnReset
      # a session Active Record reset). A session where an earlier try was cut short (a fiber's Timeout, a
      # lock_timeout while a migration held the table) has some of them already: those are left as they are, or
      # every enqueue on that pooled session failed from then on ("prepared statement … already exists": a trial).
      def self.prepare(raw)
        return if raw.instance_variable_get(:@bobbin_prepared) == raw.backend_pid

        there = raw.instance_variable_get(:@bobbin_preparing) == raw.backend_pid ? prepared_on(raw) : []
        raw.instance_variable_set(:@bobbin_preparing, raw.backend_pid)
        PREPARED.each { |name, sql| raw.prepare(name, sql) unless there.include?(name) }
        raw.instance_variable_set(:@bobbin_prepared, raw.backend_pid)
      end

      # The names of the statements `prepare` makes that `raw`'s session already has.
      def self.prepared_on(raw)
        raw.exec_params("SELECT name FROM pg_prepared_statements WHERE name = ANY($1::text[])",
                        [ PG::TextEncoder::Array.new.encode(PREPARED.keys) ]).column_values(0)
      end

      # Active Record's `reset!` (of a connection the pool took back from a dead thread, or unpinned) sends DISCARD ALL:
      # the session keeps its backend pid but loses every prepared statement, ours too. Forgetting them with it keeps
      # the next enqueue on that connection from failing (and every one after it) on a statement that is gone.
      module ForgetOnReset
        def reset!
          super
        ensure
          @raw_connection&.instance_variable_set(:@bobbin_prepared, nil)
        end
      end
      ActiveSupport.on_load(:active_record_postgresqladapter) { prepend ForgetOnReset }

      # True when the server has closed `raw`'s session while it sat idle (a restart, a failover, pg_terminate_backend,
      # an idle timeout): its goodbye waits on the socket. Reading without blocking finds it: the server's FATAL message
      # takes one read and the end of the stream after it another (a reset fails the first).
      def self.closed?(raw)
        2.times { raw.consume_input }
        raw.status == PG::CONNECTION_BAD
      rescue PG::ConnectionBad, PG::UnableToSend
        true
      end

      # Lets an enqueue outside a transaction look, before it sends anything, for a goodbye on the app's pooled
      # connection (see `closed?`): Active Record trusts a connection used in the last verify_timeout seconds (2 by
      # default) without a check, so after a short PostgreSQL restart or failover the next enqueue on a pooled
      # connection that sat idle through it failed (ConnectionFailed), though it had sent nothing.
      module ReopenClosed
        def bobbin_reopen_if_closed
          reconnect! if @raw_connection && !transaction_open? && PostgreSQL.closed?(@raw_connection)
        end
      end
      ActiveSupport.on_load(:active_record_postgresqladapter) { include ReopenClosed }

      # Like `insert` outside a transaction, and announces the rows with NOTIFY `payload` in the same round trip:
      # libpq's pipeline sends both statements at once, each its own transaction, so the INSERT's durable commit
      # never holds NOTIFY's cluster-wide lock. Returns the ids; raises the INSERT's error, if any, as Active Record would.
      def self.insert_announcing(connection, rows, payload)
        one = rows.size == 1 && prepared?(connection)
        return insert_one_announcing(connection, rows.first, payload) if one && !Bobbin.config.durable_enqueue

        raw_statement(connection, rows.size == 1 ? INSERT_ONE : INSERT) do |raw|
          prepare(raw) if one
          raw.enter_pipeline_mode
          begin
            one ? raw.send_query_prepared(one_name(connection), rows.first.values_at(*NEW_JOB)) : raw.send_query_params(INSERT, binds(rows))
            raw.pipeline_sync
            one ? raw.send_query_prepared(NOTIFY_NAME, [ payload ]) : raw.send_query_params(NOTIFY, [ payload ])
            raw.pipeline_sync
            inserted = segment(raw)
            segment(raw)&.clear
          rescue PG::Error => error
            raise lost(raw, error)
          ensure
            leave_pipeline(connection, raw, $!)
          end
          ids = inserted.check.column_values(0).map(&:to_i) # a failed one stays readable: Active Record's error reads it
          inserted.clear
          ids
        end
      end

      # A pipeline's result read from a session the server ended raises a plain PG::Error; as the ConnectionBad it is,
      # Active Record reports a lost connection (ConnectionFailed: the job may or may not be stored), not a bad statement.
      def self.lost(raw, error)
        raw.status == PG::CONNECTION_BAD && !error.is_a?(PG::ConnectionBad) ? PG::ConnectionBad.new(error.message) : error
      end

      # Leaves pipeline mode. On a session that ended mid-pipeline libpq refuses ("cannot exit pipeline mode while busy",
      # a plain PG::Error that Active Record would report as a bad statement): `failure`, the error that ended it, is
      # the one to raise, so the caller sees a lost connection. A session still waiting for the answers (the enqueue
      # cut short by a fiber's timeout or stop) stays in pipeline mode, where the next statement of whoever the pool
      # gave it to failed ("PQsendQuery not allowed in pipeline mode": a trial): it is closed, and the next statement
      # opens another.
      def self.leave_pipeline(connection, raw, failure)
        raw.exit_pipeline_mode
      rescue PG::Error
        raise unless failure

        connection.disconnect!
      end

      # One job and its NOTIFY in one statement that commits without waiting for the WAL flush (durable_enqueue false);
      # returns [id].
      def self.insert_one_announcing(connection, row, payload)
        raw_statement(connection, INSERT_ONE_ASYNC_NOTIFY) do |raw|
          prepare(raw)
          [ raw.exec_prepared(INSERT_ONE_ASYNC_NOTIFY_NAME, [ *row.values_at(*NEW_JOB), payload ]) { |result| result.getvalue(0, 0).to_i } ]
        end
      end

      # True when `insert_announcing` can run on `connection`: no transaction open there, and a raw connection.
      def self.pipelined?(connection)
        !connection.transaction_open? && connection.respond_to?(:with_raw_connection, true)
      end

      # The first result of a pipeline segment, read through to its sync point; the others are cleared (see `exec`).
      def self.segment(raw)
        first = nil
        until (result = raw.get_result)&.result_status == PG::PGRES_PIPELINE_SYNC
          first ? result&.clear : first = result
        end
        result.clear
        first
      end

      # Like `insert`, for rows some of which carry a concurrency limit: those are inserted blocked (Store.insert
      # promotes them in the same transaction).
      def self.insert_limited(connection, rows)
        array = PG::TextEncoder::Array.new
        binds = LIMITED_JOB.map { |column| array.encode(rows.map { |row| row[column] }) }
        connection.select_rows(INSERT_LIMITED, "Bobbin Enqueue", binds).map { |(id)| id.to_i }
      end

      # Turns blocked jobs of `keys` ready while their key has a free slot; returns how many (see PROMOTE).
      def self.promote(connection, keys)
        return 0 if keys.empty?

        binds = [ PG::TextEncoder::Array.new.encode(keys.uniq.sort) ]
        connection.transaction(requires_new: true) do
          connection.select_rows(LOCK_KEYS, "Bobbin Promote", binds)
          connection.exec_update(PROMOTE, "Bobbin Promote", binds)
        end
      end

      # Sends `payload` to every listening process, on `connection` (Active Record's), outside any transaction.
      def self.notify(connection, payload)
        connection.select_value(NOTIFY, "Bobbin Notify", [ payload ])
      end

      # `adapter` is an Active Record adapter this store owns; `selection` is a QueueSelection.
      def initialize(adapter, selection)
        @adapter = adapter
        @selection = selection
        @claim_sql = claim_sql
        @next_run_at_sql = next_run_at_sql
        @array = PG::TextEncoder::Array.new
        @returned = PG::TypeMapByColumn.new(ClaimedJob.members.map do |member|
          next PG::TextDecoder::Float.new if member == :due

          PG::TextDecoder::Integer.new if INTEGERS.include?(member)
        end)
        @prepared = @adapter.prepared_statements? ? {}.compare_by_identity : nil
        @session = nil
        @clock_offset = 0.0
      end

      # The database's clock less this host's, in seconds, as the last next_run_at measured it (to within half its round
      # trip). The database judges when a job is due, by its own clock: a worker on a host 1 s ahead woke for a
      # scheduled job 1 s early, found nothing due, looked for jobs due after its own time, and left the job to the next
      # poll (a review).
      attr_reader :clock_offset

      # Marks up to `limit` due jobs running for `process_id` and returns them, in one statement; suspects (jobs
      # in flight at repeated crashes, see Recovery) are left out unless `suspects`. `through` (epoch seconds on the
      # database's clock, or nil): jobs due by then count as due, claimed ahead of their run_at (ClaimedJob#due).
      def claim(process_id, limit, suspects: true, through: nil)
        exec(@claim_sql, [ process_id, limit, suspects, through ]) do |result|
          result.type_map = @returned
          jobs = Array.new(result.ntuples) { |row| ClaimedJob.new(*result.tuple_values(row)) }
          read = Bobbin.monotonic
          jobs.each { |job| job.due += read if job.due } # seconds until its run_at, as answered (claimed ahead)
        end
      end

      # Returns the claimed jobs `ids` to ready untouched (their attempt given back); returns the concurrency key of each
      # job it returned (nil for one without), for the worker to let them through.
      def hand_back(process_id, ids)
        exec(HAND_BACK, [ process_id, @array.encode(ids) ]) { |result| result.column_values(0) }
      end

      # Puts back the process row of a live process that was pruned as dead (`row`: Hash of its columns).
      def reregister(process_id, row)
        exec(REREGISTER, [ process_id, *row.values_at(*PROCESS_COLUMNS) ], &:cmd_tuples)
      end

      # Takes back those of `held` jobs (`{ id => attempts }`) that recovery returned to ready (it clears claimed_at; a
      # retry written by this worker keeps it) and nobody has claimed since, at the attempt they run as (recovery may
      # have given it back); returns how many.
      def reclaim(process_id, held)
        exec(RECLAIM, [ process_id, @array.encode(held.keys), @array.encode(held.values) ], &:cmd_tuples)
      end

      # Writes the outcomes of many jobs in one statement; only rows still claimed by `process_id` change.
      def finish(process_id, outcomes)
        columns = Outcome::WRITTEN.map { |member| @array.encode(outcomes.map(&member)) }
        exec(FINISH, [ process_id, *columns ], &:cmd_tuples)
      end

      # Returns the jobs `process_id` holds, except those in `keep`, to ready, giving back the interrupted attempt;
      # returns the concurrency key of each job it returned (nil for one without).
      def release(process_id, keep = [])
        exec(RELEASE, [ process_id, @array.encode(keep) ]) { |result| result.column_values(0) }
      end

      # Records that `process_id` is alive, with its live numbers and (fiber pools) loop lag, longest lag and stalls.
      def heartbeat(process_id, metadata_json, health = [ nil, nil, nil ])
        exec(HEARTBEAT, [ process_id, metadata_json, *health ], &:cmd_tuples).positive?
      end

      # Adds stalls to job rows: `{ id => [count, longest_ms] }`.
      def record_stalls(stalls)
        counts, longest = stalls.values.transpose
        exec(RECORD_STALLS, [ @array.encode(stalls.keys), @array.encode(counts), @array.encode(longest) ], &:cmd_tuples)
      end

      # The earliest run_at (epoch seconds) among this selection's ready jobs of unpaused queues due after `after`
      # (epoch seconds); nil when none. Both on the database's clock; measures clock_offset on the way.
      def next_run_at(after)
        sent = ::Process.clock_gettime(::Process::CLOCK_REALTIME)
        exec(@next_run_at_sql, [ after ]) do |result|
          @clock_offset = result.getvalue(0, 1).to_f - (sent + ::Process.clock_gettime(::Process::CLOCK_REALTIME)) / 2
          result.getvalue(0, 0)&.to_f
        end
      end

      # Announces `notice` (a Wakeups::Notice) to every listening process.
      def announce(notice)
        exec(NOTIFY, [ notice.to_json ], &:cmd_tuples)
      end

      # Lets blocked jobs of `keys` through to their free slots (after their holders finished); returns how many.
      def promote(keys) = self.class.promote(@adapter, keys)

      # Reopens the connection after an outage.
      def reconnect! = @adapter.reconnect!

      # When a stopping worker stops waiting for answers (see Guarded#deadline).
      attr_writer :deadline

      # True when the server has closed this session while it sat idle (see `closed?`).
      def dropped? = PostgreSQL.closed?(@adapter.raw_connection)

      # Closes the connection.
      def close = @adapter.disconnect!

      private
        # Runs one of this store's statements. Each is prepared once per server session unless the app turned
        # prepared statements off (PgBouncer in transaction mode): planning the claim costs more than running it
        # (~230 of ~500 µs), and an idle worker woken per job claims once per job. Returns what the block makes of
        # the result, which pg then clears: its libpq memory (2 KB and more, which pg reports to Ruby's GC) is freed
        # at once, not when a collection finds the result, so it does not add up to Ruby's malloc limits (a claim per
        # job; malloc past them since the last major collection forces one).
        def exec(sql, binds, &handle)
          raw = @adapter.raw_connection
          set_up(raw) unless @session == raw.backend_pid
          replan(raw) if @prepared && Bobbin.monotonic >= @replan_at
          result = if @prepared
            name = @prepared[sql] ||= statement_name(sql).tap { |new_name| answer(raw) { raw.send_prepare(new_name, sql) }.clear }
            answer(raw) { raw.send_query_prepared(name, binds) }
          else
            answer(raw) { raw.send_query_params(sql, binds) }
          end
          handle ? handled(result, &handle) : result
        rescue PG::DuplicatePstatement, PG::InvalidSqlStatementName => error
          raise unless @prepared && raw.transaction_status == PG::PQTRANS_IDLE # nothing ran: safe to send it again

          unprepared(error)
          exec(sql, binds, &handle)
        end

        # The block's answer for `result`, which is cleared then (see `exec`).
        def handled(result)
          yield result
        ensure
          result.clear
        end

        # Sends a statement (the block) and waits for its answer at most half of process_alive_threshold. A session
        # whose server, or a pooler or proxy on the way, stopped answering while the network still acknowledges (a
        # frozen PgBouncer, a hung middlebox: no keepalive or tcp_user_timeout fires) left the worker's heartbeat,
        # claims and outcome writes waiting without a word until other hosts declared it dead (a trial). It is now an
        # outage like a lost connection: the session is closed (its late answer is never read) and the next call
        # opens another. Bobbin's statements take milliseconds, and their lock waits at most Store.lock_wait.
        # A stopping worker's deadline (see Guarded#deadline) ends the wait sooner: it waits a second at a time.
        def answer(raw)
          yield
          within = Bobbin.config.process_alive_threshold / 2.0
          started = Bobbin.monotonic
          until raw.block([ within, 1.0 ].min)
            waited = Bobbin.monotonic - started
            due = @deadline && Bobbin.monotonic >= @deadline
            next unless waited >= within || due

            @adapter.disconnect!
            raise PG::ConnectionBad, "PostgreSQL did not answer within #{format('%g', due ? waited.round(1) : within)}s " \
                                     "(#{due ? "and the worker's stop is due" : 'half of process_alive_threshold'}): " \
                                     "a server, pooler or network that stopped answering without closing the connection?"
          end
          raw.get_last_result
        end

        # A name the statement's text decides. Through a pooler in transaction mode (before PgBouncer 1.21) sessions
        # share server connections and the statements prepared on them; numbered per process, another process's
        # "bobbin_store_0" ran with this one's parameters (a trial: "invalid input syntax for type integer").
        def statement_name(sql) = "bobbin_#{Digest::SHA256.hexdigest(sql)[0, 24]}"

        # Prepared statements do not stay on this session: a pooler in transaction mode hands it other server
        # connections. This store's statements go unprepared from now on, with one line saying what to set.
        def unprepared(error)
          @prepared = nil
          Bobbin.logger.warn("bobbin: a prepared statement was missing or already there (#{error.message.lines.first.strip}): " \
                             "a pooler in transaction mode? This worker's own statements go unprepared from now on; set " \
                             "prepared_statements: false for this database (?prepared_statements=false in its URL), or use " \
                             "PgBouncer 1.21+ with max_prepared_statements")
        end

        # Readies a new server session (the backend pid tells one) on its first statement, not when the store opens:
        # a session lost between a worker's registration and its first claim is then an outage its claim loop rides
        # out, not a crash at boot. The session runs only Bobbin's own statements. Without statistics (a new or
        # freshly emptied table) the planner would seq-scan and sort the whole ready set for every claim; the ordered
        # partial index is always right for ORDER BY … LIMIT n, so sorting is taken off the table. A plan that must
        # still sort then costs over JIT's threshold, and compiling it took ~100 ms a statement: JIT is off too. A lock
        # held by another session is waited for only Store.lock_wait (its statement raises Locked, and is tried again).
        def set_up(raw)
          @prepared&.clear
          answer(raw) { raw.send_query("SET enable_sort = off; SET jit = off; SET lock_timeout = '#{Store.lock_timeout}'#{GENERIC if @selection.prefixes.any?}") }.clear
          @session = raw.backend_pid
          @replan_at = Bobbin.monotonic + REPLAN
        end

        # Drops the session's cached plans (see REPLAN); its prepared statements stay.
        def replan(raw)
          answer(raw) { raw.send_query("DISCARD PLANS") }.clear
          @replan_at = Bobbin.monotonic + REPLAN
        end

        # The claim commits without waiting for the WAL flush (set_config's local setting, a one-time filter): a job
        # starts ~0.3 ms sooner, and a busy worker's claims stop costing a flush each. What a crash of PostgreSQL
        # itself can lose is a claim not yet flushed by a later durable commit (an enqueue's, an outcome batch's, or the
        # WAL writer's within 3 × wal_writer_delay): that job is ready again after recovery and runs again — at least
        # once, as after a worker's crash. A restart (fast shutdown) flushes everything.
        # RETURNING gives the rows in the table's order: the outer ORDER BY hands them to the worker, which starts them
        # in that order, as they were chosen (lower priority first).
        def claim_sql
          ranks = @selection.ranks
          <<~SQL
            WITH claimed AS (
              UPDATE bobbin_jobs SET state = 'running', claimed_by = $1, attempts = attempts + 1,
                claimed_at = now() AT TIME ZONE 'UTC', started_at = GREATEST(now() AT TIME ZONE 'UTC', run_at)
              WHERE id = ANY(ARRAY(#{ranks ? ranked_choice : entry_choice(@selection.to_s, queue_condition)}))
                AND (SELECT set_config('synchronous_commit', 'off', true)) = 'off'
              RETURNING #{RETURNED}, priority, run_at
            )
            SELECT #{RETURNED}, CASE WHEN run_at > now() AT TIME ZONE 'UTC' THEN EXTRACT(EPOCH FROM run_at - (clock_timestamp() AT TIME ZONE 'UTC'))::float8 END
            FROM claimed ORDER BY #{"#{rank_of(ranks)}, " if ranks}priority, run_at, id
          SQL
        end

        # Up to $2 due jobs of unpaused queues that `condition` selects, locked, lower priority (then older) first.
        def choice(condition)
          <<~SQL.strip
            SELECT id FROM bobbin_jobs
            WHERE state = 'ready' AND run_at <= #{DUE_BY} AND (crashes < #{Recovery::SUSPECT} OR $3) #{condition}
              AND queue <> ALL(ARRAY(SELECT queue FROM bobbin_pauses))
            ORDER BY priority, run_at, id LIMIT $2 FOR UPDATE SKIP LOCKED
          SQL
        end

        # The choice of one entry of the list (a name, a prefix wildcard or "*"): a wildcard's is `prefix_choice`.
        def entry_choice(entry, condition)
          entry.end_with?("*") && entry != "*" ? prefix_choice(@selection.like_pattern(entry), condition) : choice(condition)
        end

        # A wildcard's choice. Its queues' due jobs are not together in any index that is ordered by priority, so
        # `choice` walked bobbin_jobs_claim (priority, run_at, id) and dropped every other queue's row on the way: with
        # 300,000 due jobs in other queues, 40 ms a claim where a named queue's took 0.4 (a review). Sorting the
        # wildcard's own jobs instead reads all of them, as many when the backlog is theirs. So: the queues with
        # ready jobs that the pattern takes (one seek each in bobbin_jobs_claim_by_prefix, whose text_pattern_ops bound a
        # LIKE prefix under any collation), each queue's first $2 due jobs in order, and the first $2 of those, locked.
        # A candidate locked or taken by another worker meanwhile leaves the batch short: only then does `choice`'s walk
        # fill it, passing over the candidates. The candidates are locked by id: their state is checked in a form no
        # index on it serves, so no plan reads every ready job to find them (one planned without statistics did, as the
        # table grew: each claim read all of them).
        def prefix_choice(pattern, condition)
          <<~SQL.strip
            WITH RECURSIVE #{prefix_queues("names", pattern)}, candidates AS MATERIALIZED (
              SELECT due.id FROM names CROSS JOIN LATERAL (
                SELECT id, priority, run_at FROM bobbin_jobs
                WHERE state = 'ready' AND queue = names.queue AND run_at <= #{DUE_BY} AND (crashes < #{Recovery::SUSPECT} OR $3) #{condition}
                ORDER BY priority, run_at, id LIMIT $2
              ) AS due
              WHERE names.queue IS NOT NULL AND names.queue <> ALL(ARRAY(SELECT queue FROM bobbin_pauses))
              ORDER BY due.priority, due.run_at, due.id LIMIT $2
            ), taken AS MATERIALIZED (
              SELECT id, priority, run_at FROM bobbin_jobs WHERE id = ANY(ARRAY(SELECT id FROM candidates))
                AND COALESCE(state, '') = 'ready' AND run_at <= #{DUE_BY}
              FOR UPDATE SKIP LOCKED
            )
            (SELECT id FROM taken ORDER BY priority, run_at, id)
            UNION ALL
            SELECT id FROM (#{choice("#{condition} AND (SELECT count(*) FROM taken) < (SELECT count(*) FROM candidates) AND NOT (id = ANY(ARRAY(SELECT id FROM candidates)))")}) AS rest
            LIMIT $2
          SQL
        end

        # A recursive CTE `name` of the queues with ready jobs that LIKE `pattern` takes (and a last NULL row): a loose
        # scan of bobbin_jobs_claim_by_prefix, one seek per queue.
        def prefix_queues(name, pattern)
          like = "queue LIKE #{literal(pattern)}"
          <<~SQL.strip
            #{name}(queue) AS (
              (SELECT queue FROM bobbin_jobs WHERE state = 'ready' AND #{like} ORDER BY queue USING ~<~ LIMIT 1)
              UNION ALL
              SELECT (SELECT queue FROM bobbin_jobs WHERE state = 'ready' AND #{like} AND queue ~>~ #{name}.queue ORDER BY queue USING ~<~ LIMIT 1)
              FROM #{name} WHERE #{name}.queue IS NOT NULL
            )
          SQL
        end

        # An ordered queue list: each entry's choice, the first entry's before the next (PostgreSQL runs UNION ALL's
        # branches in turn and stops once the LIMIT is met, so a later entry's rows are not even locked then).
        # FOR UPDATE is not allowed in a UNION's branches themselves: each is a subquery.
        def ranked_choice
          conditions = @selection.rank_conditions { |entry| queue_term(entry) }
          branches = @selection.ranks.zip(conditions).each_with_index.map do |(entry, condition), index|
            "SELECT id FROM (#{entry_choice(entry, condition)}) AS rank#{index}"
          end
          "SELECT id FROM (#{branches.join(' UNION ALL ')}) AS ranked LIMIT $2"
        end

        # The place of a claimed row's queue in an ordered list: the batch starts in that order.
        def rank_of(ranks)
          "CASE #{ranks.each_with_index.map { |entry, index| "WHEN #{queue_term(entry)} THEN #{index}" }.join(' ')} END"
        end

        def queue_term(entry)
          return "TRUE" if entry == "*"

          entry.end_with?("*") ? "queue LIKE #{literal(@selection.like_pattern(entry))}" : "queue = #{literal(entry)}"
        end

        # Walks bobbin_jobs_state_run_at (state, run_at, id) from the first ready row due after $1, and stops at the
        # first row of a selected, unpaused queue. With a wildcard that walk read the later jobs of every other queue
        # (37 ms each time an idle worker looked, beside 300,000 scheduled jobs): the earliest of each selected queue's
        # next job instead, in bobbin_jobs_state_queue (state, queue, run_at), its queues found as the claim finds them.
        def next_run_at_sql
          return prefix_next_run_at_sql if @selection.prefixes.any? && !@selection.all?

          <<~SQL
            SELECT (
              SELECT EXTRACT(EPOCH FROM run_at)::float8 FROM bobbin_jobs
              WHERE state = 'ready' AND run_at > (to_timestamp($1::float8) AT TIME ZONE 'UTC') #{queue_condition}
                AND queue <> ALL(ARRAY(SELECT queue FROM bobbin_pauses))
              ORDER BY run_at LIMIT 1
            ), EXTRACT(EPOCH FROM clock_timestamp())::float8
          SQL
        end

        def prefix_next_run_at_sql
          patterns = @selection.like_patterns.each_with_index.map { |pattern, index| [ "prefix#{index}", pattern ] }
          queues = patterns.map { |name, _| "SELECT queue FROM #{name} WHERE queue IS NOT NULL" }
          queues << "SELECT unnest(ARRAY[#{@selection.names.map { |queue| literal(queue) }.join(', ')}]::text[])" if @selection.names.any?
          <<~SQL
            WITH RECURSIVE #{patterns.map { |name, pattern| prefix_queues(name, pattern) }.join(', ')}
            SELECT EXTRACT(EPOCH FROM MIN(next.run_at))::float8, EXTRACT(EPOCH FROM clock_timestamp())::float8
            FROM (#{queues.join(' UNION ALL ')}) AS selected(queue)
            CROSS JOIN LATERAL (
              SELECT run_at FROM bobbin_jobs
              WHERE state = 'ready' AND queue = selected.queue AND run_at > (to_timestamp($1::float8) AT TIME ZONE 'UTC')
              ORDER BY run_at LIMIT 1
            ) AS next
            WHERE selected.queue <> ALL(ARRAY(SELECT queue FROM bobbin_pauses))
          SQL
        end

        # The queue filter, with the worker's queues written into the statement, not passed as a parameter: the plan
        # PostgreSQL caches for a prepared statement (its generic plan, used from the sixth run on) then knows which
        # queues it selects. With them as a parameter it walked the ready jobs of every queue in priority order and
        # dropped those of other queues: 17 ms a claim, not 0.6, with 20,000 jobs waiting in a queue the worker
        # does not take (a trial's big table: 83 ms a claim, a quarter of the throughput).
        def queue_condition
          return "" if @selection.all?

          terms = []
          terms << "queue IN (#{@selection.names.map { |name| literal(name) }.join(', ')})" if @selection.names.any?
          @selection.like_patterns.each { |pattern| terms << "queue LIKE #{literal(pattern)}" }
          "AND (#{terms.join(' OR ')})"
        end

        # A string constant that reads the same whatever standard_conforming_strings says (queue names hold no NUL).
        def literal(text) = "E'#{text.gsub(/[\\']/) { |char| char * 2 }}'"
    end
  end
end
