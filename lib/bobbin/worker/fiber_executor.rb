# frozen_string_literal: true

require "async"

module Bobbin
  class Worker
    # Runs jobs as fibers on one event loop (async): up to `capacity` at once, each yielding at I/O.
    class FiberExecutor
      attr_reader :capacity, :busy

      def initialize(capacity, on_done:)
        @capacity = capacity
        @on_done = on_done
        @busy = 0
        @running = {}
      end

      # :fibers
      def mode = :fibers

      # Runs `body` inside the event loop; returns when it and every job fiber are done.
      def run(&body)
        Sync do |task|
          @root = task
          body.call
        end
      end

      # Starts a background loop (flusher, heartbeat) as a fiber; returns a handle for `join`.
      def spawn_service(&block) = @root.async(&block)

      # Waits for a service started by `spawn_service` to return.
      def join(service) = service.wait

      # Runs the block as a new fiber for job `id`.
      def post(id)
        @busy += 1
        @root.async do |task|
          @running[task] = id
          yield
        ensure
          @running.delete(task)
          @busy -= 1
          @on_done.call
        end
      end

      # Free job slots.
      def free = @capacity - @busy

      # Ids of jobs running now.
      def running_ids = @running.values

      # Interrupts every job still running (they raise Async::Stop and stay claimed until released).
      def stop_all
        @running.each_key(&:stop)
      end
    end
  end
end
