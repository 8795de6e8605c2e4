# frozen_string_literal: true

require_relative "fields"

module Bobbin
  module Client
    # Writes new jobs: one INSERT for one job or for many. Every row is checked before anything is written.
    module Enqueuer
      OPTIONS = %i[run_at queue priority].freeze
      # run_at when none was given: the job runs now. (An explicit nil is refused: it is usually a missing time.)
      NOW = Object.new.freeze
      # One call writes at most this many times `max_argument_bytes` of arguments (256 MB by default): its rows are one
      # statement (all or nothing), and one of 1 GB (PostgreSQL's limit for a message) failed as a lost connection
      # after 11 s at 4 GB of memory (a trial).
      BATCH_ARGUMENTS = 256

      module_function

      # Stores one job of `job_class` with `args`; returns its id.
      def enqueue(job_class, args, run_at: NOW, **overrides)
        insert([ row(job_class, args, run_at: run_at, **overrides) ]).first
      end

      # Stores `[[JobClass, [args]], ...]` (optionally `[JobClass, [args], {run_at:, queue:, priority:}]`)
      # in one multi-row INSERT; returns the ids in order. One bad row raises EnqueueError and writes nothing.
      def enqueue_all(pairs)
        unless pairs.is_a?(Enumerable) && !pairs.is_a?(Hash)
          raise EnqueueError, "Bobbin.enqueue_all takes a list of rows [[JobClass, [arguments]], ...], got #{pairs.inspect[0, 80]}"
        end

        insert(pairs.to_a.each_with_index.map { |pair, index| pair_row(pair, index + 1) })
      end

      # Builds a row for a Bobbin::Job class, validating its arguments, queue, priority and run_at.
      def row(job_class, args, run_at: NOW, queue: nil, priority: nil)
        raise EnqueueError, "#{job_class.inspect} is not a Bobbin job (include Bobbin::Job)" unless job_class.respond_to?(:bobbin_options)

        name = Fields.class_name(job_class.name)
        options = job_class.bobbin_options
        build(class_name: name, arguments: Arguments.dump(name, args), queue: queue.nil? ? options[:queue] : queue,
              priority: priority.nil? ? options[:priority] : priority, run_at: (Fields.run_at(run_at, name, required: true) unless run_at.equal?(NOW)),
              max_attempts: Fields.attempts(options[:retries]),
              concurrency: options[:concurrency] && concurrency_columns(name) { options[:concurrency].then { |limit| limit.columns(limit.key_for(args, name)) } })
      end

      # The concurrency columns the block computes; a key lambda that raises is the enqueue's error, naming the job.
      def concurrency_columns(job_name)
        yield
      rescue StandardError => error
        raise EnqueueError, "#{job_name}: the concurrency key could not be computed (#{error.class}: #{error.message.lines.first&.strip})"
      end

      # Builds a checked row from parts already serialised (the Active Job adapter uses this); run_at nil means now,
      # priority nil means 0. Raises EnqueueError for a queue, priority, run_at or max_attempts no database would keep.
      # `concurrency`: the row's concurrency columns (Concurrency::Limit#columns), if its class has a limit.
      def build(class_name:, arguments:, queue:, priority:, run_at:, max_attempts:, active_job_id: nil, concurrency: nil)
        name = Fields.class_name(class_name)
        row = { queue: Fields.queue(queue, name), class_name: name, arguments: arguments,
                priority: Fields.priority(priority.nil? ? 0 : priority, name), run_at: Store.timestamp(Fields.run_at(run_at, name)),
                max_attempts: Fields.max_attempts(max_attempts, name), active_job_id: active_job_id }
        concurrency ? row.merge(concurrency) : row
      end

      # Inserts rows in one statement and returns their ids.
      def insert(rows)
        return [] if rows.empty?

        batch_size!(rows) if rows.size > 1
        return Store.insert(rows) unless Instrumentation.listening?(:enqueue)

        Instrumentation.instrument(:enqueue, count: rows.size, queues: rows.map { |row| row[:queue] }.uniq,
                                             class_names: rows.map { |row| row[:class_name] }.uniq) do |payload|
          payload[:ids] = Store.insert(rows)
        end
      rescue ActiveRecord::StatementInvalid => error
        raise unless error.message.match?(/relation "bobbin_jobs" does not exist|no such table: bobbin_jobs/)

        # A schema-per-tenant app's `SET search_path` left on a connection hid the tables from its jobs' enqueues, and
        # the error said only to migrate (a trial).
        hidden = " (or they are not on this session's search_path: a SET search_path left on its connection, as " \
                 "schema-per-tenant apps make, hides them)" if error.message.include?("relation")
        hint = Record.with_connection { |connection| Schema.install_hint(connection) }
        raise ConfigurationError, "Bobbin's tables are missing in this database#{hidden}: " \
                                  "#{hint == Schema::INSTALL ? "call Bobbin.migrate! once after Bobbin.connect, or #{hint}" : hint}"
      end

      # Bytes of arguments one statement may carry: `times` max_argument_bytes, or its default when it is nil (no limit
      # for one job's; a statement still has PostgreSQL's).
      def statement_bytes(times) = (Bobbin.config.max_argument_bytes || Configuration::MAX_ARGUMENT_BYTES) * times

      def batch_size!(rows)
        bytes = rows.sum { |row| row[:arguments].bytesize }
        limit = statement_bytes(BATCH_ARGUMENTS)
        return if bytes <= limit

        raise EnqueueError, "#{rows.size} jobs carry #{size_of(bytes)} of arguments, more than one enqueue writes (#{size_of(limit)}, " \
                            "#{BATCH_ARGUMENTS} × max_argument_bytes): enqueue them in smaller batches (nothing was written)"
      end

      def size_of(bytes) = bytes < 1024**2 ? "#{bytes} bytes" : "#{format('%.1f', bytes / 1024.0**2)} MB"

      # One `[JobClass, args, options]` of enqueue_all, with its position in any error.
      def pair_row(pair, number)
        job_class, args, options = pair_parts(pair)
        row(job_class, args.nil? ? [] : args, **options)
      rescue EnqueueError => error
        raise error.class, "Bobbin.enqueue_all row #{number}: #{error.message}"
      end

      # The class, arguments and checked options of one row.
      def pair_parts(pair)
        unless pair.is_a?(Array) && pair.size.between?(1, 3)
          raise EnqueueError, "a row must be [JobClass, [arguments]] or [JobClass, [arguments], " \
                              "{run_at:, queue:, priority:}], got #{pair.inspect[0, 80]}"
        end
        [ pair[0], pair[1], options(pair[2], pair[0]) ]
      end

      # A row's options Hash, refusing unknown keys; {} when there is none.
      def options(options, job_class)
        return {} if options.nil?
        raise EnqueueError, "#{job_class}: options must be a Hash of #{OPTIONS.join(', ')}, got #{options.inspect[0, 80]}" unless options.is_a?(Hash)

        unknown = options.keys - OPTIONS
        raise EnqueueError, "#{job_class}: unknown option #{unknown.first.inspect} (known: #{OPTIONS.join(', ')})" if unknown.any?

        options
      end
    end
  end
end
