# frozen_string_literal: true

module Bobbin
  class Worker
    # What every executor shares: a line of handed-over jobs, `capacity` runners taking from it, and the
    # accounting the claim loop and shutdown read (busy, held, interrupted). Subclasses supply the runners
    # (`run`, `current_runner`) and how to interrupt one (`interrupt`).
    class Executor
      attr_reader :capacity

      def initialize(capacity, on_done:)
        @capacity = capacity
        @on_done = on_done
        @lock = Mutex.new
        @queue = Thread::Queue.new
        @busy = 0
        @completed = 0
        @held = {}
        @running = {}
        @interrupted = {}
      end

      # Jobs handed over and not done yet: running or waiting in line.
      def busy = @lock.synchronize { @busy }

      # Jobs handed over that wait in line for a free runner (claimed ahead).
      def queued = @queue.size

      # Jobs finished since start.
      def completed = @lock.synchronize { @completed }

      # True once an exception raised into the loop from outside is ending it under its jobs (FiberExecutor#run): they
      # leave the executor as it cancels them, and are no claims lost to hand back (Worker#release_lost).
      def loop_failed? = !@loop_failed.nil?

      # Ids of the jobs handed over and not yet done.
      def held_ids = @lock.synchronize { @held.keys }

      # The same, with the attempt each runs as: `{ id => attempts }`.
      def held_attempts = @lock.synchronize { @held.transform_values(&:attempts) }

      # The claimed job `id` (a Store::ClaimedJob) while it is handed over and not yet done; nil otherwise.
      def job(id) = @lock.synchronize { @held[id] }

      # The jobs running now: [[runner (a Thread, or a fiber's Async::Task), job id]] (TTIN's dump).
      def runners = @lock.synchronize { @running.to_a }

      # Hands the block (running `job`) to the next free runner; it waits in line when every runner is busy.
      def post(job, &block)
        @lock.synchronize { @busy += 1; @held[job.id] = job }
        @queue << [ job.id, block ]
      end

      # Takes back the jobs still waiting in line (they stay claimed until released); returns how many.
      def drop_queued
        dropped = 0
        while (id, _block = @queue.pop(timeout: 0))
          @lock.synchronize { @held.delete(id); @busy -= 1 }
          dropped += 1
        end
        dropped
      end

      # Interrupts every running job (shutdown): each gets the executor's stop exception and stays claimed. A job already
      # interrupted is left to unwind: a second exception would land in its `ensure` blocks (a fiber pool's loop
      # interrupted its jobs before the stop that follows did: EventLoop).
      def interrupt_all
        drop_queued
        running = @lock.synchronize { @running.reject { |_runner, id| @interrupted.key?(id) }.each { |_runner, id| @interrupted[id] = true } }
        running.each_key { |runner| interrupt(runner) }
      end

      # True when the executor interrupted job `id` (so its stop exception is a shutdown, not the job's own).
      def interrupted?(id) = @lock.synchronize { @interrupted.key?(id) }

      # Runs the job's own code (its hooks and `perform`, for job `id`): the one stretch a stop's interrupt may cut. Once
      # it has returned the job is done, and what follows (its outcome worked out and handed to the writer, the
      # subscribers to its end) must run whole: an interrupt landing there handed a finished job back to ready, to run
      # again (a review). Subclasses keep their interrupt to this stretch.
      def interruptible(_id) = yield

      # Ends jobs that ignored their interrupt, where that can be done for certain (threads; with `fibers`, the fibers of a
      # pool that no process exit can end: see FiberExecutor#kill_stuck).
      def kill_stuck(fibers: false) = nil

      private
        # A new line for each run: the last run closed its own, and a worker may run again (run_until_empty twice).
        def open_line
          @queue = Thread::Queue.new if @queue.closed?
          @lock.synchronize { @interrupted.clear }
        end

        # Fiber-locals the stall detector reads from its own thread: which job the loop runs, since when.
        def started!(id)
          Thread.current[StallDetector::STARTED] = id && Bobbin.monotonic
          Thread.current[StallDetector::JOB] = id
        end

        # Job `id` ends, before its fiber-locals are cleared (the stall detector's check).
        def ended!(_id) = nil

        def work_loop
          while (item = next_job)
            run_one(*item)
          end
        end

        # The next job in line (`[id, block]`), waiting for one; nil once the line is closed.
        def next_job = @queue.pop

        def run_one(id, block)
          runner = current_runner
          @lock.synchronize { @running[runner] = id }
          started!(id)
          block.call
          done = true
        ensure
          # A job that killed its own fiber (no exception) is ended again at any wait of this unwinding: blocking, the
          # slot's accounting is done whole.
          done || $! ? account(id, runner) : Fiber.blocking { account(id, runner) }
        end

        # Job `id` is over: its runner free, the pool's counts updated, the worker told.
        def account(id, runner)
          ended!(id)
          started!(nil)
          @lock.synchronize do
            @running.delete(runner)
            @held.delete(id)
            @interrupted.delete(id)
            @busy -= 1
            @completed += 1
          end
          @on_done.call
        end
    end
  end
end
