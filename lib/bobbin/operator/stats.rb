# frozen_string_literal: true

module Bobbin
  module Operator
    # Aggregates that stay fast on big tables: each reads index ranges, never the table's rows, and finished jobs,
    # however many, cost no more than `counts`' capped reads. `queues` is exact by default and then reads every
    # waiting, running and failed job's index entry (about 0.3 s per million on PostgreSQL on a 2-core machine); the
    # dashboard asks for it capped.
    module Stats
      # Counts above this are estimated on PostgreSQL (the planner's row estimate) instead of counted.
      EXACT_UP_TO = 10_000
      # Seconds a count may take where the planner's estimate is below EXACT_UP_TO though more jobs are there: its
      # statistics predate them (see counts). A count that runs out of it stays at EXACT_UP_TO + 1, marked estimated.
      RECOUNT_BUDGET = 0.25
      # One queue's numbers: jobs due (ready), scheduled, blocked, running, failed; latency = age in seconds of
      # its oldest due job (0 when none); paused; `capped` lists the counts that stopped at a cap (at least that many).
      Queue = Data.define(:name, :ready, :scheduled, :blocked, :running, :failed, :latency, :paused, :capped) do
        def initialize(capped: [], **fields) = super
        def size = ready + scheduled + blocked
        def capped?(field) = capped.include?(field.to_sym)
      end
      # A Queue's counts, each a job state's (scheduled: waiting jobs whose run_at is ahead).
      QUEUE_COUNTS = %i[ready scheduled blocked running failed].freeze
      # The states `queues` reports: jobs waiting, running, or failed (kept until retried or discarded).
      QUEUED = %w[ready blocked running failed].freeze
      # Job counts by state; `estimated` lists the states whose count is the planner's estimate.
      Counts = Data.define(:by_state, :estimated) do
        def [](state) = by_state.fetch(state.to_s, 0)
        def estimated?(state) = estimated.include?(state.to_s)
      end

      module_function

      # Counts by state (Filter::STATES): exact up to EXACT_UP_TO per state; above it, on PostgreSQL, the planner's
      # estimate from table statistics (ANALYZE, kept fresh by autovacuum), so the overview does not count a
      # million finished rows on every refresh. SQLite counts exactly (a covering-index count). `states`: those alone.
      # An estimate below EXACT_UP_TO is statistics older than the jobs (25,000 failures in a burst, 30,000 jobs discarded
      # at once: the overview and /metrics said ≈ 10,001 for minutes, until autovacuum's ANALYZE; a trial): those are
      # counted, within RECOUNT_BUDGET.
      def counts(now = Time.now.utc, states: Filter::STATES)
        estimated = []
        by_state = states.to_h do |state|
          scope = Filter.new(state: state).scope(now)
          count = capped_count(scope)
          if count > EXACT_UP_TO && postgres?
            estimate = estimate_state(state, scope, now)
            recounted = count_within(scope, RECOUNT_BUDGET) unless estimate > EXACT_UP_TO
            estimated << state unless recounted
            count = recounted || [ estimate, count ].max
          elsif count > EXACT_UP_TO
            count = scope.count
          end
          [ state, count ]
        end
        Counts.new(by_state, estimated)
      end

      # Every queue that has waiting, running or failed jobs, or is paused, busiest (most due) first. `now` is a bind
      # parameter (the dashboard asks every few seconds: a time written into the SQL would be a new statement each time).
      # Exact counts read every such job's index entry in one grouped query. With `cap`, each count of each queue stops
      # at `cap` (Queue#capped says which did), and the reads are bounded by queues × 5 × cap index entries whatever
      # the backlog: a million jobs waiting, or failures piling up for weeks, no longer cost the dashboard's refresh.
      # Up to `grouped_up_to` jobs in those states, a capped list is counted exactly and capped after (see GROUPED_UP_TO).
      def queues(now = Time.now.utc, cap: nil, grouped_up_to: GROUPED_UP_TO)
        raise ArgumentError, "cap: must be a positive Integer or nil, got #{cap.inspect}" unless cap.nil? || (cap.is_a?(Integer) && cap.positive?)

        return exact_queues(now) unless cap
        return capped_queues(now, cap) if capped_count(JobRecord.where(state: QUEUED), grouped_up_to) > grouped_up_to

        exact_queues(now).map { |queue| capped(queue, cap) }.sort_by { |queue| [ -queue.ready, queue.name ] }
      end

      # Up to this many jobs waiting, running or failed, a capped list reads them all in one grouped query and caps the
      # counts after: the capped reads cost index seeks per queue and count (capped_queues), more than a grouped read
      # of few jobs.
      GROUPED_UP_TO = 100_000

      # `queue` with each count over `cap` shown as `cap`, and named in `capped`.
      def capped(queue, cap)
        over = QUEUE_COUNTS.select { |field| queue.public_send(field) > cap }
        queue.with(**over.to_h { |field| [ field, cap ] }, capped: over)
      end

      def exact_queues(now)
        run_at = JobRecord.arel_table[:run_at]
        due = run_at.lteq(bind("run_at", now))
        rows = JobRecord.where(state: QUEUED).group(:queue, :state)
                        .pluck(:queue, :state, Arel.sql("COUNT(*)"), Arel::Nodes::Sum.new([ Arel::Nodes::Case.new.when(due).then(1).else(0) ]),
                               Arel::Nodes::Min.new([ Arel::Nodes::Case.new.when(due).then(run_at) ]))
        paused = QueuePause.pluck(:queue).to_set
        by_queue = rows.group_by(&:first) # a lookup per queue: a scan of every row for each took 18 s at 10,000 queues (a trial)
        (by_queue.keys | paused.to_a).map { |name| queue(name, by_queue.fetch(name, []), paused.include?(name), now) }
                                     .sort_by { |queue| [ -queue.ready, queue.name ] }
      end

      # A minute's counts are kept once it ended this long ago: outcomes are written within milliseconds of the
      # finished_at they carry (the worker's clock), so this leaves room for a delayed write and clocks a little apart.
      SETTLED = 30
      # Kept counts older than this are let go.
      KEPT = 86_400
      @settled = {} # { database config => { minute (Integer, Unix time / 60) => [succeeded, failed] } }
      @settled_lock = Mutex.new # Puma's threads share them

      # Succeeded and failed jobs per minute over the last `minutes`: [[minute start (Time), succeeded, failed], …],
      # one entry per minute, oldest first. A minute's counts do not change once it is over (finished_at is written
      # as a job finishes; only retention deletes finished rows, after `retention`), so this process keeps those of
      # complete minutes and reads the (state, finished_at) index only from the first minute it does not know:
      # normally the current one, however busy the queue (counting an hour of 1.27M jobs each refresh took 2 s).
      def throughput(minutes: 60, now: Time.now.utc)
        first = now.to_i / 60 - minutes + 1
        window = (first...first + minutes)
        known = settled_counts(now)
        from = window.find { |minute| !known.key?(minute) } || window.end
        counts = from < window.end ? count_per_minute(from, window.end) : {}
        settle(counts, from, now)
        window.map { |minute| [ Time.at(minute * 60).utc, *(minute < from ? known.fetch(minute) : counts.fetch(minute, [ 0, 0 ])) ] }
      end

      # Forgets the counts kept for past minutes. For when finished rows of the last hour change: an operator retried,
      # discarded or deleted some (Operator's actions call it; another process's are not seen here), or rows were
      # written with a past finished_at (a restore, a test).
      def forget_throughput = @settled_lock.synchronize { @settled.clear }

      # { minute => [succeeded, failed] } of the jobs that finished from minute `from` up to minute `to`.
      def count_per_minute(from, to)
        minutes = (from...to).to_h { |minute| [ Time.at(minute * 60).utc.strftime("%Y-%m-%d %H:%M"), minute ] }
        counts = Hash.new { |hash, minute| hash[minute] = [ 0, 0 ] }
        JobRecord.where(state: %w[succeeded failed], finished_at: Time.at(from * 60).utc..).group(:state, Arel.sql(minute_sql)).count
                 .each { |(state, key), count| counts[minutes[key]][state == "succeeded" ? 0 : 1] = count if minutes.key?(key) }
        counts
      end

      # This database's kept counts (a copy: other threads add to them), without the minutes retention may have
      # deleted rows of since.
      def settled_counts(now)
        kept = @settled_lock.synchronize { @settled.fetch(JobRecord.connection_db_config, {}).dup }
        retention = Bobbin.config.retention
        retention ? kept.select { |minute, _| minute * 60 >= now.to_i - retention } : kept
      end

      # Keeps the counts of the minutes from `from` that ended SETTLED seconds ago, by this machine's clock too (a
      # `now` ahead of it must not settle a minute still going on).
      def settle(counts, from, now)
        over = ([ now, Time.now.utc ].min.to_i - SETTLED) / 60 # minutes before this one are over
        return if from >= over

        oldest = (Time.now.utc.to_i - KEPT) / 60
        @settled_lock.synchronize do
          settled = (@settled[JobRecord.connection_db_config] ||= {})
          (from...over).each { |minute| settled[minute] = counts.fetch(minute, [ 0, 0 ]).dup.freeze }
          settled.delete_if { |minute, _| minute < oldest }
        end
      end

      # Age in seconds of the oldest due job across `queues` (all when nil); 0 when none waits.
      def latency(queues = nil, now = Time.now.utc)
        scope = Filter.new(state: "ready").scope(now)
        scope = scope.where(queue: queues) if queues
        oldest = scope.minimum(:run_at)
        oldest ? [ now - oldest, 0 ].max : 0
      end

      # Every queue's capped counts in one statement, whatever the number of queues: the queue names found by a skip scan
      # of the (state, queue, run_at) index (one seek per state and queue, as MissionControlAdapter::QUEUE_NAMES), each
      # count a read of at most `cap` + 1 index entries, the oldest due job the first entry of its range. A statement
      # per queue and count took 12,600 statements and 2.5-5 s for each refresh of the overview at 2,000 queues (a trial).
      def capped_queues(now, cap)
        paused = QueuePause.pluck(:queue).to_set
        binds = [ bind("run_at", now), ActiveRecord::Relation::QueryAttribute.new("cap", cap + 1, ActiveModel::Type::Integer.new) ]
        rows = JobRecord.with_connection do |connection|
          postgres? ? connection.select_rows(capped_queues_sql, "Bobbin queues", binds) : Store::SQLite.run(connection, :select_rows, capped_queues_sql, "Bobbin queues", binds)
        end
        counted = rows.to_h { |name, *counts| [ name, counts ] }
        (counted.keys | paused.to_a).map do |name|
          ready, scheduled_ready, scheduled_blocked, blocked, running, failed, oldest = counted.fetch(name, [ 0, 0, 0, 0, 0, 0, nil ])
          oldest = Time.parse("#{oldest} UTC") if oldest.is_a?(String) # SQLite returns the stored text
          counts = { ready: ready, scheduled: scheduled_ready + scheduled_blocked, blocked: blocked, running: running, failed: failed }
                   .transform_values(&:to_i)
          Queue.new(name: name, **counts.transform_values { |n| [ n, cap ].min }, capped: counts.filter_map { |field, n| field if n > cap },
                    paused: paused.include?(name), latency: age(oldest, now))
        end.sort_by { |queue| [ -queue.ready, queue.name ] }
      end

      # capped_queues' statement: the time ($1) and the cap + 1 ($2) are bind parameters, numbered on both databases.
      def capped_queues_sql
        now, limit = postgres? ? %w[$1 $2] : %w[?1 ?2]
        count = ->(condition) { "(SELECT COUNT(*) FROM (SELECT 1 FROM bobbin_jobs j WHERE #{condition} AND j.queue = q.queue LIMIT #{limit}) AS c)" }
        <<~SQL
          WITH RECURSIVE states(state) AS (VALUES #{QUEUED.map { |state| "('#{state}')" }.join(', ')}),
          names(state, queue) AS (
            SELECT states.state, (SELECT MIN(queue) FROM bobbin_jobs WHERE state = states.state) FROM states
            UNION ALL
            SELECT names.state, (SELECT MIN(queue) FROM bobbin_jobs WHERE state = names.state AND queue > names.queue)
            FROM names WHERE names.queue IS NOT NULL
          )
          SELECT q.queue,
            #{count.("j.state = 'ready' AND j.run_at <= #{now}")}, #{count.("j.state = 'ready' AND j.run_at > #{now}")},
            #{count.("j.state = 'blocked' AND j.run_at > #{now}")}, #{count.("j.state = 'blocked' AND j.run_at <= #{now}")},
            #{count.("j.state = 'running'")}, #{count.("j.state = 'failed'")},
            (SELECT MIN(j.run_at) FROM bobbin_jobs j WHERE j.state = 'ready' AND j.queue = q.queue AND j.run_at <= #{now})
          FROM (SELECT DISTINCT queue FROM names WHERE queue IS NOT NULL) AS q
        SQL
      end

      def queue(name, rows, paused, now)
        by_state = rows.to_h { |_, state, count, due, oldest| [ state, [ count.to_i, due.to_i, oldest ] ] }
        ready, ready_due, oldest = by_state.fetch("ready", [ 0, 0, nil ])
        blocked, blocked_due, = by_state.fetch("blocked", [ 0, 0, nil ])
        oldest = Time.parse("#{oldest} UTC") if oldest.is_a?(String) # SQLite returns the stored text
        Queue.new(name: name, ready: ready_due, scheduled: ready - ready_due + blocked - blocked_due, blocked: blocked_due,
                  running: by_state.dig("running", 0) || 0, failed: by_state.dig("failed", 0) || 0,
                  latency: age(oldest, now), paused: paused)
      end

      # Seconds since `oldest` (a queue's oldest due job), to a tenth; 0 when there is none.
      def age(oldest, now) = oldest ? [ (now - oldest).round(1), 0 ].max : 0

      def capped_count(scope, cap = EXACT_UP_TO) = JobRecord.from(scope.select(:id).limit(cap + 1), :capped).count

      # `scope`'s count, or nil if PostgreSQL cannot count it within `seconds`.
      def count_within(scope, seconds)
        count = nil
        JobRecord.with_connection do |connection|
          connection.transaction(requires_new: true) do
            connection.execute("SET LOCAL statement_timeout = #{(seconds * 1000).ceil}")
            count = scope.count
            raise ActiveRecord::Rollback # in a caller's transaction, the savepoint's rollback undoes the SET LOCAL too
          end
        end
        count
      rescue ActiveRecord::QueryCanceled
        nil
      end

      # Brings the planner's statistics up to date after an operator changed or deleted more jobs than the counts take
      # exactly (their estimates and the claim's plans read them): deleting 217,000 of 230,000 finished jobs left the
      # overview at ≈ 229,173 until autovacuum's ANALYZE (a trial). Best effort: a role that may not ANALYZE the table
      # leaves it to autovacuum.
      def refresh_statistics(changed)
        return unless changed > EXACT_UP_TO && postgres?

        JobRecord.with_connection { |connection| connection.execute("ANALYZE #{JobRecord.quoted_table_name}") }
      rescue ActiveRecord::StatementInvalid => error
        Bobbin.logger.debug("bobbin: ANALYZE after #{changed} changed jobs: #{error.message}")
      end

      def bind(column, value) = JobRecord.predicate_builder.build_bind_attribute(column, value)

      # The planner's estimate of `state`'s jobs (`scope`). Ready, blocked and scheduled split the stored ready and
      # blocked states by run_at, and only waiting jobs have a run_at ahead: the planner, taking state and run_at as
      # independent, estimated 917 scheduled jobs where 50,000 waited among 3,000,000 (the overview and /metrics said
      # ≈ 10,001; a trial). Each side of a stored state is that state's own estimate (an equality the planner's
      # statistics know well) less its other side counted, when that side is under EXACT_UP_TO; with both sides over it,
      # see ahead_estimate.
      def estimate_state(state, scope, now)
        case state
        when *JobRecord::WAITING
          ahead = JobRecord.where(state: state).where.not(run_at: ..now)
          count = capped_count(ahead)
          [ estimate(JobRecord.where(state: state)) - (count > EXACT_UP_TO ? ahead_estimate(state, now) : count), 0 ].max
        when "scheduled"
          JobRecord::WAITING.sum do |stored|
            ahead = JobRecord.where(state: stored).where.not(run_at: ..now)
            count = capped_count(ahead)
            next count unless count > EXACT_UP_TO

            due = capped_count(JobRecord.where(state: stored, run_at: ..now))
            [ due > EXACT_UP_TO ? ahead_estimate(stored, now) : estimate(JobRecord.where(state: stored)) - due, count ].max
          end
        else estimate(scope)
        end
      end

      # The estimate of stored state `stored`'s jobs with a run_at ahead, when more than EXACT_UP_TO of them are due too.
      # Only waiting jobs have a run_at ahead, so the planner's estimate of every job with one (run_at's own histogram)
      # is the ready and blocked ones together; less the other waiting state's, counted up to EXACT_UP_TO. The planner's
      # estimate of state and run_at together, taking them as independent, said ≈ 55,772 ready and ≈ 10,001 scheduled
      # for 10,186 and 49,814 among 1,160,000 jobs (a review).
      def ahead_estimate(stored, now)
        others = (JobRecord::WAITING - [ stored ]).sum { |other| capped_count(JobRecord.where(state: other).where.not(run_at: ..now)) }
        [ estimate(JobRecord.where.not(run_at: ..now)) - others, 0 ].max
      end

      def estimate(scope)
        plan = JobRecord.with_connection { |connection| connection.select_value("EXPLAIN (FORMAT JSON) #{scope.select(:id).to_sql}") }
        JSON.parse(plan).first.dig("Plan", "Plan Rows").to_i
      end

      def minute_sql = postgres? ? "to_char(finished_at, 'YYYY-MM-DD HH24:MI')" : "strftime('%Y-%m-%d %H:%M', finished_at)"

      def postgres? = Store.postgresql?(JobRecord.connection_db_config)
    end
  end
end
