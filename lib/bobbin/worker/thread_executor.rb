# frozen_string_literal: true

module Bobbin
  class Worker
    # Runs jobs on a fixed pool of `capacity` threads.
    class ThreadExecutor
      attr_reader :capacity

      def initialize(capacity, on_done:)
        @capacity = capacity
        @on_done = on_done
        @busy = 0
        @completed = 0
        @running = {}
        @held = {}
        @lock = Mutex.new
        @queue = Thread::Queue.new
      end

      # :threads
      def mode = :threads

      # Starts the pool, runs `body`, then stops the pool.
      def run(&body)
        @threads = Array.new(@capacity) { |i| Thread.new { work_loop }.tap { |t| t.name = "bobbin-job-#{i}" } }
        body.call
      ensure
        @queue.close
        @threads&.each { |thread| thread.join(1) || thread.kill }
      end

      # Starts a background loop (flusher, heartbeat) as a thread; returns a handle for `join`.
      def spawn_service(&block) = Thread.new(&block)

      # Waits for a service started by `spawn_service` to return.
      def join(service) = service.join

      # Queues the block to run on a pool thread for job `id`; it waits in line when every thread is busy.
      def post(id, &block)
        @lock.synchronize { @busy += 1; @held[id] = true }
        @queue << [ id, block ]
      end

      # Jobs queued or running.
      def busy = @lock.synchronize { @busy }

      # Jobs finished since start.
      def completed = @lock.synchronize { @completed }

      # Ids of the jobs handed over and not yet done: running or waiting in line.
      def held_ids = @lock.synchronize { @held.keys }

      # Takes back the jobs still waiting in line (they stay claimed until released); returns how many.
      def drop_queued
        dropped = 0
        while (id, _block = @queue.pop(timeout: 0))
          @lock.synchronize { @held.delete(id); @busy -= 1 }
          dropped += 1
        end
        dropped
      end

      # Interrupts every job still running (they raise Worker::Shutdown and stay claimed until released).
      def stop_all
        drop_queued
        @lock.synchronize { @running.each_key { |thread| thread.raise(Shutdown) } }
      end

      private
        def work_loop
          while (item = @queue.pop)
            id, block = item
            run_one(id, block)
          end
        end

        def run_one(id, block)
          @lock.synchronize { @running[Thread.current] = id }
          block.call
        rescue Shutdown
          nil
        ensure
          @lock.synchronize do
            @running.delete(Thread.current)
            @held.delete(id)
            @busy -= 1
            @completed += 1
          end
          @on_done.call
        end
    end
  end
end
