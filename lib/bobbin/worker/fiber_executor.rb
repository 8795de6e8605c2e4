# frozen_string_literal: true

require "async"

module Bobbin
  class Worker
    # Runs jobs as fibers on one event loop (async): `capacity` long-lived fibers, each taking the next job
    # from a queue and yielding at I/O. Fibers are made once at boot, like a thread pool's threads: creating
    # one costs tens of microseconds (fresh stack pages), far more than handing it a job.
    class FiberExecutor
      attr_reader :capacity, :busy, :completed

      def initialize(capacity, on_done:)
        @capacity = capacity
        @on_done = on_done
        @busy = 0
        @completed = 0
        @running = {}
        @held = {}
        @queue = Thread::Queue.new
      end

      # :fibers
      def mode = :fibers

      # Runs `body` inside the event loop with the job fibers started; returns when all of them are done.
      def run(&body)
        Sync do |task|
          @root = task
          @fibers = Array.new(@capacity) { task.async { work_loop } }
          body.call
        ensure
          @queue.close
        end
      end

      # Starts a background loop (flusher, heartbeat) as a fiber; returns a handle for `join`.
      def spawn_service(&block) = @root.async(&block)

      # Waits for a service started by `spawn_service` to return.
      def join(service) = service.wait

      # Hands the block (job `id`) to the next free fiber; it waits in line when every fiber is busy.
      def post(id, &block)
        @busy += 1
        @held[id] = true
        @queue << [ id, block ]
      end

      # Ids of the jobs handed over and not yet done: running or waiting in line.
      def held_ids = @held.keys

      # Takes back the jobs still waiting in line (they stay claimed until released); returns how many.
      def drop_queued
        dropped = 0
        while (id, _block = @queue.pop(timeout: 0))
          @held.delete(id)
          dropped += 1
        end
        @busy -= dropped
        dropped
      end

      # Interrupts every job still running (they raise Async::Stop and stay claimed until released).
      def stop_all
        drop_queued
        @running.each_key(&:stop)
      end

      private
        def work_loop
          while (item = @queue.pop)
            run_one(*item)
          end
        end

        def run_one(id, block)
          task = Async::Task.current
          @running[task] = id
          block.call
        ensure
          @running.delete(task)
          @held.delete(id)
          @busy -= 1
          @completed += 1
          @on_done.call
        end
    end
  end
end
