# frozen_string_literal: true

module Bobbin
  module Store
    # Bobbin's hot-path SQL for SQLite: each batch is one IMMEDIATE transaction on a connection the worker owns.
    class SQLite
      # An outcome lands on a row this worker still holds: running, or given back to ready by a recovery (which clears
      # claimed_at, as a retry written by the worker does not) and claimed by no one since. A worker judged dead while
      # it ran the job (a network partition, a frozen host) had its finished jobs run again: its outcomes were dropped
      # as it came back, before its heartbeat could take them back (a trial: 5 of 5). Such a row gets a claimed_at again,
      # so a reclaim sent with the jobs held just before (the outcome not yet written) leaves a retry written here waiting.
      # A job recovery failed (out of crash retries) while its worker was only cut off is such a row too: the worker's
      # outcome is what happened, where it stayed failed with ProcessDied though it had succeeded (a review).
      FINISH = <<~SQL
        UPDATE bobbin_jobs SET state = ?, finished_at = ?, run_at = COALESCE(?, run_at), attempts = COALESCE(?, attempts),
          last_error_class = COALESCE(?, last_error_class), last_error_message = COALESCE(?, last_error_message),
          last_error_backtrace = COALESCE(?, last_error_backtrace), max_attempts = COALESCE(?, max_attempts),
          claimed_at = COALESCE(claimed_at, ?)
        WHERE id = ? AND claimed_by = ? AND (state = 'running' OR (state IN ('ready', 'blocked', 'failed') AND claimed_at IS NULL))
      SQL

      RELEASE = <<~SQL
        UPDATE bobbin_jobs SET state = #{WAITING}, attempts = MAX(attempts - 1, 0), claimed_at = NULL, started_at = NULL
        WHERE state = 'running' AND claimed_by = ? AND id NOT IN (SELECT value FROM json_each(?))
        RETURNING concurrency_key
      SQL

      INSERT = <<~SQL
        INSERT INTO bobbin_jobs (queue, class_name, arguments, priority, run_at, max_attempts, active_job_id,
                                 state, attempts, enqueued_at)
        SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3, COALESCE(value ->> 4, ?1), value ->> 5,
               value ->> 6, 'ready', 0, ?1
        FROM json_each(?2)
        RETURNING id
      SQL

      HAND_BACK = <<~SQL
        UPDATE bobbin_jobs SET state = #{WAITING}, attempts = MAX(attempts - 1, 0), claimed_at = NULL, started_at = NULL
        WHERE state = 'running' AND claimed_by = ? AND id IN (SELECT value FROM json_each(?))
        RETURNING concurrency_key
      SQL

      HEARTBEAT = "UPDATE bobbin_processes SET last_heartbeat_at = ?, metadata = ?, loop_lag_ms = ?, max_loop_lag_ms = ?, stalls = ? WHERE id = ?"

      RECORD_STALL = "UPDATE bobbin_jobs SET stalls = stalls + ?, longest_stall_ms = MAX(COALESCE(longest_stall_ms, 0), ?) WHERE id = ?"

      REREGISTER = <<~SQL
        INSERT OR IGNORE INTO bobbin_processes (id, kind, name, pid, hostname, supervisor_id, metadata, last_heartbeat_at, created_at)
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
      SQL

      RECLAIM = <<~SQL
        UPDATE bobbin_jobs SET state = 'running', claimed_at = ?, attempts = held.value ->> 1
        FROM json_each(?) AS held
        WHERE bobbin_jobs.id = held.value ->> 0 AND state IN ('ready', 'blocked') AND claimed_by = ? AND claimed_at IS NULL
      SQL

      # Jobs with a concurrency limit are inserted blocked; PROMOTE lets them through while their key has a free
      # slot. SQLite runs one writer at a time, so counting a key's holders and promoting cannot interleave.
      INSERT_LIMITED = <<~SQL
        INSERT INTO bobbin_jobs (queue, class_name, arguments, priority, run_at, max_attempts, active_job_id,
                                 concurrency_key, concurrency_limit, concurrency_duration, state, attempts, enqueued_at)
        SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3, COALESCE(value ->> 4, ?1), value ->> 5, value ->> 6,
               value ->> 7, value ->> 8, value ->> 9, CASE WHEN value ->> 7 IS NULL THEN 'ready' ELSE 'blocked' END, 0, ?1
        FROM json_each(?2)
        RETURNING id
      SQL

      # Slot holders: jobs of the key that are ready (promoted, about to be claimed) or running for less than
      # their duration (a holder whose process hangs or vanished frees its slot then). The limit is the first waiting
      # job's, as on PostgreSQL: with each row's own, a later job of a looser limit (a deploy that changed `to:`)
      # went ahead of the key's older waiting jobs here and not there (a review).
      PROMOTE = <<~SQL
        UPDATE bobbin_jobs SET state = 'ready'
        WHERE id IN (
          SELECT id FROM (
            SELECT id, concurrency_key AS key,
                   first_value(concurrency_limit) OVER (PARTITION BY concurrency_key ORDER BY priority, run_at, id) AS lim,
                   row_number() OVER (PARTITION BY concurrency_key ORDER BY priority, run_at, id) AS place
            FROM bobbin_jobs
            WHERE state = 'blocked' AND run_at <= ?1 AND concurrency_key IN (SELECT value FROM json_each(?2))
          ) AS waiting
          WHERE place <= lim - (
            SELECT count(*) FROM bobbin_jobs h
            WHERE h.concurrency_key = waiting.key AND h.state IN ('ready', 'running')
              AND (h.state = 'ready' OR julianday(h.claimed_at) > julianday(?1) - h.concurrency_duration / 86400.0)))
      SQL

      # Inserts new job rows (Hashes of Store::NEW_JOB columns) on `connection`, the app's Active Record connection,
      # so an enqueue inside a transaction commits or rolls back with it. Returns the ids in order.
      def self.insert(connection, rows)
        json = JSON.generate(rows.map { |row| row.values_at(*NEW_JOB) })
        run(connection, :select_rows, INSERT, "Bobbin Enqueue", [ Store.timestamp(Time.now), json ]).map(&:first)
      end

      # `connection.public_send(method, sql, name, binds)` for an Active Record connection. Active Record before 8.0
      # drops a SQLite statement's binds when prepared statements are off (`prepared_statements: false`, or query log
      # tags, `config.active_record.query_log_tags_enabled`): every enqueue inserted nothing from a NULL list and returned
      # no id, and a retry_on retry vanished (a review). Then the values go into the text (`?N`), quoted.
      def self.run(connection, method, sql, name, binds)
        unless connection.prepared_statements
          sql = sql.gsub(/\?(\d+)/) { connection.quote(binds.fetch(Integer($1) - 1).then { |bind| bind.is_a?(ActiveModel::Attribute) ? bind.value_for_database : bind }) }
          binds = []
        end
        connection.public_send(method, sql, name, binds)
      end

      # Like `insert`, for rows some of which carry a concurrency limit: those are inserted blocked (Store.insert
      # promotes them in the same transaction).
      def self.insert_limited(connection, rows)
        json = JSON.generate(rows.map { |row| row.values_at(*LIMITED_JOB) })
        run(connection, :select_rows, INSERT_LIMITED, "Bobbin Enqueue", [ Store.timestamp(Time.now), json ]).map(&:first)
      end

      # Turns blocked jobs of `keys` ready while their key has a free slot; returns how many (see PROMOTE).
      def self.promote(connection, keys)
        return 0 if keys.empty?

        connection.transaction(requires_new: true) do
          run(connection, :exec_update, PROMOTE, "Bobbin Promote", [ Store.timestamp(Time.now), JSON.generate(keys.uniq) ])
        end
      end

      # `adapter` is an Active Record adapter this store owns; `selection` is a QueueSelection.
      def initialize(adapter, selection)
        @adapter = adapter
        @selection = selection
        @claim_sql = claim_sql
        @next_run_at_sql = next_run_at_sql
      end

      # Marks up to `limit` due jobs running for `process_id` and returns them, in one statement; suspects (jobs
      # in flight at repeated crashes, see Recovery) are left out unless `suspects`. `through` (epoch seconds, or nil):
      # jobs due by then count as due, claimed ahead of their run_at (ClaimedJob#due).
      def claim(process_id, limit, suspects: true, through: nil)
        time = Time.now
        now = Store.timestamp(time)
        due_by = through && through > time.to_f ? Store.timestamp(Time.at([ through, time.to_f + AHEAD_AT_MOST ].min).round(6)) : now # as a float it may read 1 µs less
        rows = transaction { execute(@claim_sql, [ process_id, now, suspects ? 1 : 0, limit, due_by ]) }
        # RETURNING gives the table's order: they start as chosen
        rows = rows.sort_by { |row| [ @selection.rank(row["queue"]), row["priority"], row["run_at"], row["id"] ] }
        rows.map do |row|
          ClaimedJob.new(row["id"], row["queue"], row["class_name"], row["arguments"], row["attempts"],
                         row["max_attempts"], row["active_job_id"], row["crashes"], row["concurrency_key"], (ahead(row["run_at"]) if row["run_at"] > now))
        end
      end

      # Returns the claimed jobs `ids` to ready untouched (their attempt given back); returns the concurrency key of each
      # job it returned (nil for one without), for the worker to let them through.
      def hand_back(process_id, ids)
        transaction { execute(HAND_BACK, [ process_id, JSON.generate(ids) ]).map { |row| row["concurrency_key"] } }
      end

      # Puts back the process row of a live process that was pruned as dead (`row`: Hash of its columns).
      def reregister(process_id, row)
        now = Store.timestamp(Time.now)
        transaction { execute(REREGISTER, [ process_id, *row.values_at(*PROCESS_COLUMNS), now, now ]) && db.changes }
      end

      # Takes back those of `held` jobs (`{ id => attempts }`) that recovery returned to ready (it clears claimed_at; a
      # retry written by this worker keeps it) and nobody has claimed since, at the attempt they run as (recovery may
      # have given it back); returns how many.
      def reclaim(process_id, held)
        transaction { execute(RECLAIM, [ Store.timestamp(Time.now), JSON.generate(held.to_a), process_id ]) && db.changes }
      end

      # Writes the outcomes of many jobs in one transaction; only rows still claimed by `process_id` change.
      def finish(process_id, outcomes)
        now = Store.timestamp(Time.now)
        transaction do
          statement = db.prepare(FINISH)
          outcomes.sum do |o|
            statement.execute(o.state, o.finished_at, o.run_at, o.attempts, o.error_class, o.error_message, o.backtrace, o.max_attempts, now, o.id, process_id)
            db.changes
          end
        ensure
          statement&.close
        end
      end

      # Returns the jobs `process_id` holds, except those in `keep`, to ready, giving back the interrupted attempt;
      # returns the concurrency key of each job it returned (nil for one without).
      def release(process_id, keep = [])
        transaction { execute(RELEASE, [ process_id, JSON.generate(keep) ]).map { |row| row["concurrency_key"] } }
      end

      # Records that `process_id` is alive, with its live numbers and (fiber pools) loop lag, longest lag and stalls.
      def heartbeat(process_id, metadata_json, health = [ nil, nil, nil ])
        transaction { execute(HEARTBEAT, [ Store.timestamp(Time.now), metadata_json, *health, process_id ]) && db.changes.positive? }
      end

      # Adds stalls to job rows: `{ id => [count, longest_ms] }`.
      def record_stalls(stalls)
        transaction { stalls.sum { |id, (count, longest)| execute(RECORD_STALL, [ count, longest, id ]) && db.changes } }
      end

      # The earliest run_at (epoch seconds) among this selection's ready jobs of unpaused queues due after `after`
      # (epoch seconds); nil when none.
      def next_run_at(after) = db.get_first_value(@next_run_at_sql, [ Store.timestamp(Time.at(after)) ])

      # The database's clock less this process's: none, SQLite's "now" is the process's own (PostgreSQL#clock_offset).
      def clock_offset = 0.0

      # Announces `notice` to this process's workers (other processes' Wakeups::Watcher sees inserts for itself).
      def announce(notice) = Wakeups.deliver(notice.queues, notice.at, paused: notice.paused)

      # Lets blocked jobs of `keys` through to their free slots (after their holders finished); returns how many.
      def promote(keys) = self.class.promote(@adapter, keys)

      # Reopens the connection after an outage.
      def reconnect! = @adapter.reconnect!

      # Unused: SQLite's waits end with its busy timeout (see Guarded#deadline).
      attr_writer :deadline

      # Closes the connection.
      def close = @adapter.disconnect!

      # An embedded database is never closed under the worker.
      def dropped? = false

      private
        def db = @adapter.raw_connection

        def execute(sql, binds)
          db.execute(sql, binds)
        end

        def transaction
          db.execute("BEGIN IMMEDIATE")
          result = yield
          db.execute("COMMIT")
          result
        rescue Exception # rubocop:disable Lint/RescueException -- roll back on anything, then re-raise it
          db.execute("ROLLBACK") if db.transaction_active?
          raise
        end

        # ?1 the process, ?2 now, ?3 whether suspects may be claimed, ?4 how many, ?5 when a job counts as due (now, or
        # a due time the worker woke a little ahead of).
        def claim_sql
          <<~SQL
            UPDATE bobbin_jobs SET state = 'running', claimed_by = ?1, attempts = attempts + 1, claimed_at = ?2, started_at = MAX(?2, run_at)
            WHERE id IN (#{@selection.ranks ? ranked_choice : choice(queue_condition)})
            RETURNING id, queue, class_name, arguments, attempts, max_attempts, active_job_id, crashes, concurrency_key, priority, run_at
          SQL
        end

        # When a job claimed ahead of `run_at` (as stored) may start (ClaimedJob#due): its run_at by this host's clock,
        # which judged it due, as a Bobbin.monotonic time. The monotonic clock is read second: a pause between the two
        # reads (a GC, another thread's turn) makes the job start that much later, not earlier (read the other way round,
        # a test's job once began 3 ms before its run_at, on a loaded machine).
        def ahead(run_at)
          left = Store.epoch(run_at) - ::Process.clock_gettime(::Process::CLOCK_REALTIME)
          Bobbin.monotonic + left
        end

        # Up to ?4 jobs of unpaused queues that `condition` selects and due by ?5, lower priority (then older) first.
        def choice(condition, columns = "id")
          <<~SQL.strip
            SELECT #{columns} FROM bobbin_jobs
            WHERE state = 'ready' AND run_at <= ?5 AND (crashes < #{Recovery::SUSPECT} OR ?3) #{condition}
              AND queue NOT IN (SELECT queue FROM bobbin_pauses)
            ORDER BY priority, run_at, id LIMIT ?4
          SQL
        end

        # An ordered queue list: each entry's choice, the first entry's before the next.
        def ranked_choice
          branches = @selection.rank_conditions { |entry| queue_term(entry) }.each_with_index.map do |condition, index|
            "SELECT * FROM (#{choice(condition, "id, #{index} AS rank, priority, run_at")})"
          end
          "SELECT id FROM (#{branches.join(' UNION ALL ')} ORDER BY rank, priority, run_at, id LIMIT ?4)"
        end

        def next_run_at_sql
          <<~SQL
            SELECT (julianday(run_at) - 2440587.5) * 86400.0 FROM bobbin_jobs
            WHERE state = 'ready' AND run_at > ? #{queue_condition} AND queue NOT IN (SELECT queue FROM bobbin_pauses)
            ORDER BY run_at LIMIT 1
          SQL
        end

        # The queue filter, with the worker's queues written into the statement (as PostgreSQL's is).
        def queue_condition
          return "" if @selection.all?

          terms = []
          terms << "queue IN (#{@selection.names.map { |name| literal(name) }.join(', ')})" if @selection.names.any?
          @selection.prefixes.each { |prefix| terms << "queue GLOB #{literal(@selection.glob_pattern(prefix))}" }
          "AND (#{terms.join(' OR ')})"
        end

        def queue_term(entry)
          return "1" if entry == "*"

          entry.end_with?("*") ? "queue GLOB #{literal(@selection.glob_pattern(entry))}" : "queue = #{literal(entry)}"
        end

        def literal(text) = "'#{text.gsub("'", "''")}'"
    end
  end
end
