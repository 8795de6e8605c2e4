# frozen_string_literal: true

module Bobbin
  module Operator
    # Which jobs an operator means: every criterion optional, all of them ANDed. `state` is one of STATES
    # ("scheduled" and "ready" split the stored ready state by run_at); `search` looks for a substring in the
    # arguments and the last error's class and message; `stalled` keeps the jobs that held a fiber pool's event loop
    # past its stall threshold at least once. Built from a Hash of strings or symbols (CLI options,
    # query parameters), so unknown keys and bad values are refused with a message naming them.
    class Filter
      STATES = %w[ready scheduled blocked running succeeded failed discarded].freeze
      TIMES = %i[enqueued_after enqueued_before finished_after finished_before].freeze
      KEYS = (%i[state queue class_name process_id active_job_id search stalled] + TIMES).freeze
      # The longest search. Escaped for JSON and LIKE a character takes at most 7 bytes (a control character as JSON's
      # \\u0001, its backslash doubled), so 4,000 stay within SQLite's LIKE pattern limit of 50,000 bytes.
      SEARCH_CHARACTERS = 4_000
      # Ids both databases keep (a 64-bit integer).
      ID_RANGE = (-(2**63)..((2**63) - 1))

      attr_reader(*KEYS)

      # A Time, or an ISO 8601 time, in years 1 to 9999 (raises ArgumentError otherwise): the databases' range, within which a
      # time is stored and compared. Year 300000 parsed, then failed in PostgreSQL (a 500 on the dashboard, a
      # backtrace from the CLI).
      def self.parse_time(value)
        time = value.is_a?(Time) ? value.getutc : Time.iso8601(value.to_s).utc
        (1..9999).cover?(time.year) ? time : raise(ArgumentError, "out of range")
      end

      # A Filter from `params` (a Filter is returned as it is); blank values are ignored.
      def self.from(params)
        return params if params.is_a?(Filter)

        criteria = (params || {}).to_h.transform_keys(&:to_sym)
        criteria.each { |key, value| text!(key, value) if value.is_a?(String) }
        new(**criteria.reject { |_, value| value.nil? || value.to_s.strip.empty? })
      end

      # A criterion as a query or form gives it: bytes that are not UTF-8 failed the dashboard's page with a 500 (an
      # encoding error, not the ArgumentError it answers with a 400), and a NUL alone was blank, so the page listed every
      # job and its "discard all matching" would have acted on them all (a trial).
      def self.text!(key, value)
        raise ArgumentError, "#{key} must be UTF-8 text, not #{value.b.inspect}" unless value.dup.force_encoding(Encoding::UTF_8).valid_encoding?
        raise ArgumentError, "#{key} must not contain a NUL byte" if value.include?("\0")
      end

      # An id as text gives it: a decimal integer within the 64-bit range both databases keep (one above it failed a page
      # with a 500, Active Model's RangeError; a trial). Raises ArgumentError otherwise.
      def self.id(text)
        id = Integer(text.to_s, 10)
        raise ArgumentError, "out of range" unless ID_RANGE.cover?(id)

        id
      end

      def initialize(**criteria)
        unknown = criteria.keys - KEYS
        raise ArgumentError, "unknown job filter #{unknown.join(', ')} (known: #{KEYS.join(', ')})" if unknown.any?

        @state = criteria[:state]&.to_s
        raise ArgumentError, "unknown state #{@state.inspect} (one of #{STATES.join(', ')})" if @state && !STATES.include?(@state)

        @queue, @class_name, @active_job_id, @search = criteria.values_at(:queue, :class_name, :active_job_id, :search).map { |v| v&.to_s }
        # SQLite refused a longer one's LIKE pattern: a 500 on the dashboard, a backtrace from the CLI (a review).
        raise ArgumentError, "search is at most #{SEARCH_CHARACTERS} characters, got #{@search.size}" if @search && @search.size > SEARCH_CHARACTERS
        @process_id = number(:process_id, criteria[:process_id])
        @stalled = flag(:stalled, criteria[:stalled])
        TIMES.each { |key| instance_variable_set(:"@#{key}", time(key, criteria[key])) }
      end

      # The criteria given, as a Hash of strings (for links and forms).
      def to_h = KEYS.filter_map { |key| send(key)&.then { |value| [ key, value.is_a?(Time) ? iso8601(value) : value.to_s ] } }.to_h

      # This filter with `changes` (keys as in KEYS).
      def merge(changes) = Filter.new(**to_h.transform_keys(&:to_sym).merge(changes.transform_keys(&:to_sym)).compact)

      # The jobs this filter selects, as an Active Record relation (at `now` for scheduled/ready).
      def scope(now = Time.now.utc)
        relation = state_scope(now)
        return any_state(relation) if state.nil? && (queue || class_name)

        relation = relation.where(queue: queue) if queue
        relation = relation.where(class_name: class_name) if class_name
        narrowed(relation)
      end

      private
        # A queue's or a class's jobs in any state: every state named, so the (state, queue, run_at) and (state,
        # class_name) indexes can find them, and the queue and class written into the statement, so PostgreSQL plans
        # for that queue's own size (a bind parameter's generic plan would be one plan for a busy queue and a rare
        # one). Without them a queue with few jobs (its name clicked on the Queues page) was looked for by walking
        # every job newest first: 0.5 s at 3,000,000 jobs, 0.1 ms with (a trial).
        def any_state(relation)
          table = JobRecord.arel_table
          relation = relation.where(state: JobRecord::STATES)
          relation = relation.where(table[:queue].eq(Arel::Nodes.build_quoted(queue))) if queue
          relation = relation.where(table[:class_name].eq(Arel::Nodes.build_quoted(class_name))) if class_name
          narrowed(relation)
        end

        # The criteria after state, queue and class.
        def narrowed(relation)
          table = JobRecord.arel_table
          relation = relation.where(claimed_by: process_id) if process_id
          relation = relation.where(active_job_id: active_job_id) if active_job_id
          relation = relation.where(table[:stalls].gt(0)) if stalled
          relation = relation.where(enqueued_at: enqueued_after..) if enqueued_after # times as ranges: bind parameters
          relation = relation.where(enqueued_at: ...enqueued_before) if enqueued_before
          relation = relation.where(finished_at: finished_after..) if finished_after
          relation = relation.where(finished_at: ...finished_before) if finished_before
          search ? relation.where(search_condition) : relation
        end

        def state_scope(now)
          case state
          when nil then JobRecord.all
          when "scheduled" then JobRecord.scheduled(now)
          when *JobRecord::WAITING then JobRecord.where(state: state, run_at: ..now)
          else JobRecord.where(state: state)
          end
        end

        # A substring anywhere in the arguments or the last error (case-sensitive on PostgreSQL; SQLite's LIKE
        # ignores ASCII case). The arguments are stored as JSON, where a quote, a backslash or a newline is escaped:
        # they are searched for the text as given (a fragment of their JSON) and as JSON writes it, so `C:\imports` or
        # `"Q3"` finds the job whose argument holds it (it found nothing). A scan of the rows the other criteria leave:
        # narrow by state or queue on big tables. The patterns are bind parameters, so each search is not a new
        # statement prepared on the server.
        def search_condition
          in_json = (JSON.generate(search)[1...-1] rescue search) # bytes JSON cannot write: as given
          [ contains(:arguments, search), *(contains(:arguments, in_json) unless in_json == search),
            contains(:last_error_message, search), contains(:last_error_class, search) ].reduce(:or)
        end

        def contains(column, text)
          pattern = "%#{JobRecord.sanitize_sql_like(text)}%"
          JobRecord.arel_table[column].matches(JobRecord.predicate_builder.build_bind_attribute(column.to_s, pattern), "\\", true)
        end

        # true for true/"true"/"1"/"yes"; nil (no criterion) for false/"false"/"0"/"no".
        def flag(key, value)
          case value.to_s.downcase
          when "", "false", "0", "no" then nil
          when "true", "1", "yes" then true
          else raise ArgumentError, "#{key} must be true or false, not #{value.inspect}"
          end
        end

        def number(key, value)
          value.nil? ? nil : Filter.id(value)
        rescue ArgumentError
          raise ArgumentError, "#{key} must be a number, not #{value.inspect}"
        end

        # A time as a link or a form carries it: its fraction too, else the form's bulk action covered jobs of the
        # same second that the page did not list (a review).
        def iso8601(time) = time.iso8601(time.subsec.zero? ? 0 : 6)

        def time(key, value)
          value.nil? ? nil : Filter.parse_time(value)
        rescue ArgumentError
          raise ArgumentError, "#{key} must be an ISO 8601 time in years 1 to 9999 (2026-01-31T12:00:00Z), not #{value.inspect}"
        end
    end
  end
end
