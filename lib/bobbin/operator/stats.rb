# frozen_string_literal: true

module Bobbin
  module Operator
    # Aggregates that stay fast on big tables: each reads index ranges, never the table's rows. Finished jobs,
    # however many, cost nothing but `counts`' capped reads; `queues` reads every waiting, running and failed job's
    # index entry (about 0.3 s per million waiting on PostgreSQL on a 2-core machine).
    module Stats
      # Counts above this are estimated on PostgreSQL (the planner's row estimate) instead of counted.
      EXACT_UP_TO = 10_000
      # One queue's numbers: jobs due (ready), scheduled, blocked, running, failed; latency = age in seconds of
      # its oldest due job (0 when none); paused.
      Queue = Data.define(:name, :ready, :scheduled, :blocked, :running, :failed, :latency, :paused) do
        def size = ready + scheduled + blocked
      end
      # Job counts by state; `estimated` lists the states whose count is the planner's estimate.
      Counts = Data.define(:by_state, :estimated) do
        def [](state) = by_state.fetch(state.to_s, 0)
        def estimated?(state) = estimated.include?(state.to_s)
      end

      module_function

      # Counts by state (Filter::STATES): exact up to EXACT_UP_TO per state; above it, on PostgreSQL, the planner's
      # estimate from table statistics (ANALYZE, kept fresh by autovacuum), so the overview does not count a
      # million finished rows on every refresh. SQLite counts exactly (a covering-index count).
      def counts(now = Time.now.utc)
        estimated = []
        by_state = Filter::STATES.to_h do |state|
          scope = Filter.new(state: state).scope(now)
          count = capped_count(scope)
          if count > EXACT_UP_TO && postgres?
            estimated << state
            count = [ estimate(scope), count ].max
          elsif count > EXACT_UP_TO
            count = scope.count
          end
          [ state, count ]
        end
        Counts.new(by_state, estimated)
      end

      # Every queue that has waiting, running or failed jobs, or is paused, busiest (most due) first. `now` is a bind
      # parameter (the dashboard asks every few seconds: a time written into the SQL would be a new statement each time).
      def queues(now = Time.now.utc)
        run_at = JobRecord.arel_table[:run_at]
        due = run_at.lteq(JobRecord.predicate_builder.build_bind_attribute("run_at", now))
        rows = JobRecord.where(state: %w[ready blocked running failed]).group(:queue, :state)
                        .pluck(:queue, :state, Arel.sql("COUNT(*)"), Arel::Nodes::Sum.new([ Arel::Nodes::Case.new.when(due).then(1).else(0) ]),
                               Arel::Nodes::Min.new([ Arel::Nodes::Case.new.when(due).then(run_at) ]))
        paused = QueuePause.pluck(:queue)
        names = (rows.map(&:first) + paused).uniq
        names.map { |name| queue(name, rows.select { |row| row[0] == name }, paused.include?(name), now) }
             .sort_by { |queue| [ -queue.ready, queue.name ] }
      end

      # Succeeded and failed jobs per minute over the last `minutes`: [[minute start (Time), succeeded, failed], …],
      # one entry per minute, oldest first. Reads the (state, finished_at) index over the window only.
      def throughput(minutes: 60, now: Time.now.utc)
        start = Time.at((now.to_i / 60 - minutes + 1) * 60).utc
        counts = JobRecord.where(state: %w[succeeded failed], finished_at: start..)
                          .group(:state, Arel.sql(minute_sql)).count
        Array.new(minutes) do |i|
          minute = start + i * 60
          key = minute.strftime("%Y-%m-%d %H:%M")
          [ minute, counts.fetch([ "succeeded", key ], 0), counts.fetch([ "failed", key ], 0) ]
        end
      end

      # Age in seconds of the oldest due job across `queues` (all when nil); 0 when none waits.
      def latency(queues = nil, now = Time.now.utc)
        scope = Filter.new(state: "ready").scope(now)
        scope = scope.where(queue: queues) if queues
        oldest = scope.minimum(:run_at)
        oldest ? [ now - oldest, 0 ].max : 0
      end

      def queue(name, rows, paused, now)
        by_state = rows.to_h { |_, state, count, due, oldest| [ state, [ count.to_i, due.to_i, oldest ] ] }
        ready, ready_due, oldest = by_state.fetch("ready", [ 0, 0, nil ])
        oldest = Time.parse("#{oldest} UTC") if oldest.is_a?(String) # SQLite returns the stored text
        Queue.new(name: name, ready: ready_due, scheduled: ready - ready_due, blocked: by_state.dig("blocked", 0) || 0,
                  running: by_state.dig("running", 0) || 0, failed: by_state.dig("failed", 0) || 0,
                  latency: oldest ? [ (now - oldest).round(1), 0 ].max : 0, paused: paused)
      end

      def capped_count(scope) = JobRecord.from(scope.select(:id).limit(EXACT_UP_TO + 1), :capped).count

      def estimate(scope)
        plan = JobRecord.connection.select_value("EXPLAIN (FORMAT JSON) #{scope.select(:id).to_sql}")
        JSON.parse(plan).first.dig("Plan", "Plan Rows").to_i
      end

      def minute_sql = postgres? ? "to_char(finished_at, 'YYYY-MM-DD HH24:MI')" : "strftime('%Y-%m-%d %H:%M', finished_at)"

      def postgres? = Store.postgresql?(JobRecord.connection_db_config)
    end
  end
end
