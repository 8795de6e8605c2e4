# frozen_string_literal: true

module Bobbin
  module Operator
    # One page of jobs in keyset order: the query starts after the last row of the page before (a `cursor`), never
    # at an OFFSET, so page 500 costs what page 1 costs and rows inserted meanwhile neither repeat nor shift
    # rows between pages. The order follows the state: waiting jobs by when they run, finished ones newest
    # first, anything else by id, newest first. Each (column, id) order is an index (schema version 7).
    class Page
      ORDERS = { "ready" => [ :run_at, :asc ], "scheduled" => [ :run_at, :asc ], "blocked" => [ :run_at, :asc ],
                 "succeeded" => [ :finished_at, :desc ], "failed" => [ :finished_at, :desc ], "discarded" => [ :finished_at, :desc ] }.freeze
      # Columns a list shows; the arguments' text and backtrace stay for the job page.
      LIST_COLUMNS = %i[id queue class_name state priority run_at attempts max_attempts crashes claimed_by enqueued_at started_at finished_at
                        last_error_class last_error_message active_job_id concurrency_key concurrency_limit].freeze

      attr_reader :jobs, :next_cursor, :filter

      # The page of `filter`'s jobs after `cursor` (nil: the first page), at most `limit` rows.
      def self.load(filter, cursor: nil, limit: 50, columns: LIST_COLUMNS)
        filter = Filter.from(filter)
        column, direction = ORDERS.fetch(filter.state, [ :id, :desc ])
        relation = filter.scope.select(columns | [ column, :id ])
        relation = relation.where(after(column, direction, parse(cursor, column))) if cursor
        ordered = relation.order(column => direction, id: direction)
        rows = filter.state == "scheduled" ? scheduled_first(ordered, limit + 1) : ordered.limit(limit + 1).to_a
        new(filter, rows.first(limit), rows.size > limit ? encode(rows[limit - 1], column) : nil)
      end

      # The first `count` rows of `ordered`, scheduled jobs by run_at and id. They are stored in two states (ready and
      # blocked, run_at ahead): one statement over both read the whole range in (state, run_at) order and sorted it,
      # 0.5 s at 1,000,000 scheduled jobs (a trial). Each state's index range is in run_at order already, so each is
      # read up to `count` rows and the two are merged here.
      def self.scheduled_first(ordered, count)
        JobRecord::WAITING.flat_map { |state| ordered.where(state: state).limit(count).to_a }.sort_by { |row| [ row.run_at, row.id ] }.first(count)
      end

      def initialize(filter, jobs, next_cursor)
        @filter = filter
        @jobs = jobs
        @next_cursor = next_cursor
      end

      # Rows strictly after the cursor's (value, id) in the page's direction. The inclusive bound on the column
      # alone is what lets the index start at the cursor (an OR of the two conditions alone is a filter over every
      # row before it, so a deep page would cost its depth); the OR then drops the cursor's own row and its ties.
      def self.after(column, direction, (value, id))
        table = JobRecord.arel_table
        beyond, reach = direction == :asc ? %i[gt gteq] : %i[lt lteq]
        return table[:id].public_send(beyond, id) if column == :id

        table[column].public_send(reach, value).and(table[column].public_send(beyond, value).or(table[:id].public_send(beyond, id)))
      end

      # "value,id": the time with microseconds (the precision both databases keep), or the id alone.
      def self.encode(row, column)
        column == :id ? row.id.to_s : "#{row.public_send(column).utc.iso8601(6)},#{row.id}"
      end

      def self.parse(cursor, column)
        return [ nil, Filter.id(cursor) ] if column == :id

        time, id = cursor.to_s.split(",", 2)
        [ Filter.parse_time(time), Filter.id(id) ]
      rescue ArgumentError, TypeError
        raise ArgumentError, "bad page cursor #{cursor.inspect}"
      end

      private_class_method :after, :encode, :parse
    end
  end
end
