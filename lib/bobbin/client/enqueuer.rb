# frozen_string_literal: true

module Bobbin
  module Client
    # Writes new jobs: one INSERT for one job or for many.
    module Enqueuer
      module_function

      # Stores one job of `job_class` with `args`; returns its id.
      def enqueue(job_class, args, run_at: nil, **overrides)
        insert([ row(job_class, args, run_at: run_at, **overrides) ]).first
      end

      # Stores `[[JobClass, [args]], ...]` (optionally `[JobClass, [args], {run_at:, queue:, priority:}]`)
      # in one multi-row INSERT; returns the ids in order.
      def enqueue_all(pairs)
        insert(pairs.map { |job_class, args, options| row(job_class, Array(args), **(options || {})) })
      end

      # Builds a row for a Bobbin::Job class, validating its arguments.
      def row(job_class, args, run_at: nil, queue: nil, priority: nil)
        unless job_class.respond_to?(:bobbin_options)
          raise ArgumentError, "#{job_class.inspect} is not a Bobbin job (include Bobbin::Job)"
        end
        options = job_class.bobbin_options
        build(class_name: job_class.name, arguments: Arguments.dump(job_class.name, args),
              queue: queue || options[:queue], priority: priority || options[:priority],
              run_at: run_at, max_attempts: options[:retries] + 1)
      end

      # Builds a row from parts already serialised (the Active Job adapter uses this); run_at nil means now.
      def build(class_name:, arguments:, queue:, priority:, run_at:, max_attempts:, active_job_id: nil)
        { queue: queue.to_s, class_name: class_name, arguments: arguments, priority: Integer(priority || 0),
          run_at: Store.timestamp(run_at&.to_time), max_attempts: max_attempts, active_job_id: active_job_id }
      end

      # Inserts rows in one statement and returns their ids.
      def insert(rows)
        return [] if rows.empty?

        Store.insert(rows)
      end
    end
  end
end
