# frozen_string_literal: true

require "async"

module Bobbin
  class Worker
    # Runs jobs as fibers on one event loop (async): `capacity` long-lived fibers, each taking the next job
    # from the line and yielding at I/O. Fibers are made once at boot, like a thread pool's threads: creating
    # one costs tens of microseconds (fresh stack pages), far more than handing it a job.
    class FiberExecutor < Executor
      # Memory mappings a fiber needs (its stack and guard page), checked against vm.max_map_count.
      MAPPINGS_PER_FIBER = 2
      MAP_COUNT = "/proc/sys/vm/max_map_count"

      # Raises ConfigurationError when this machine cannot give `capacity` fibers their stacks.
      def self.check!(capacity)
        limit = File.exist?(MAP_COUNT) ? File.read(MAP_COUNT).to_i : nil
        return if limit.nil? || capacity * MAPPINGS_PER_FIBER + 1_000 <= limit

        raise ConfigurationError, "fibers: #{capacity} needs about #{capacity * MAPPINGS_PER_FIBER + 1_000} memory mappings " \
                                  "but vm.max_map_count is #{limit}: lower fibers (at most #{(limit - 1_000) / MAPPINGS_PER_FIBER}) " \
                                  "or raise it (sysctl -w vm.max_map_count=#{capacity * 4})"
      end

      def initialize(capacity, on_done:)
        self.class.check!(capacity)
        super
      end

      # :fibers
      def mode = :fibers

      # Runs `body` inside the event loop with the job fibers started; returns when all of them are done.
      def run(&body)
        Sync do |task|
          start_fibers(task)
          body.call
        ensure
          @queue.close
        end
      end

      private
        def start_fibers(task)
          @capacity.times { task.async { work_loop } }
        rescue FiberError => error
          raise ConfigurationError, "could not create #{@capacity} fibers (#{error.message}); lower fibers: for this pool"
        end

        def current_runner = Async::Task.current

        # Raises Async::Stop inside the job's fiber at its current wait.
        def interrupt(task) = task.stop
    end
  end
end
