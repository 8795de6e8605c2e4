# frozen_string_literal: true

module Bobbin
  class Worker
    # Runs jobs on a fixed pool of `capacity` threads.
    class ThreadExecutor < Executor
      # :threads
      def mode = :threads

      # Starts the pool, runs `body`, then stops the pool; a thread still running a job by then is killed.
      def run(&body)
        open_line
        @killing = false
        @threads = Array.new(@capacity) { |i| start_thread("bobbin-job-#{i}") }
        body.call
      ensure
        @queue.close
        @threads&.each { |thread| thread.join(1) || thread.kill.join(1) }
      end

      # Ends the threads of jobs that ignored their interrupt; returns once they are gone. Unlike a fiber, a
      # thread can be killed for certain, so its job has really stopped before it is released.
      def kill_stuck(fibers: false)
        threads = @lock.synchronize { @killing = true; @running.keys }
        threads.each(&:kill).each { |thread| thread.join(1) }
      end

      # The job's own code, where its Shutdown lands at once (held back everywhere else: see run_one).
      def interruptible(_id, &) = Thread.handle_interrupt(Shutdown => :immediate, &)

      private
        def guarded_loop
          work_loop
          done = true
        rescue Shutdown
          done = true
        ensure
          replace(Thread.current) unless done || $! || @queue.closed? || !Thread.main.alive?
        end

        # A job ended its own thread (Thread.exit, Thread#kill, or Fiber#kill of the thread's own fiber; Worker#perform
        # recorded the job): another takes its place, so the pool keeps its size, and the dead one leaves @threads, never
        # joined (Ruby 3.4 aborts, [BUG] thread_join, joining a thread whose root fiber was killed). Threads the
        # executor killed itself (kill_stuck, at shutdown) are not replaced, nor those the process's exit kills (its main
        # thread gone, no thread can start: each printed a "can't alloc thread" ThreadError).
        def replace(dead)
          @lock.synchronize do
            index = @threads.index(dead) unless @killing
            @threads[index] = start_thread(dead.name) if index
          end
        end

        # An exception raised into a pool thread while it waits for its next job (a job's own watchdog thread, left
        # running, that calls Thread#raise on the thread the job ran on once its deadline passes) ended the thread, never
        # replaced: a pool of one claimed the next job and never ran it while heartbeating on, and the worker's stop raised
        # the error (a review). It is logged, and the thread waits on. The executor's own interrupt still ends it.
        def next_job
          @queue.pop
        rescue Shutdown
          raise
        rescue Exception => error # rubocop:disable Lint/RescueException -- raised into this thread by a job's code, after the job
          Bobbin.logger.error(Printable.printable("bobbin: #{Thread.current.name} got #{error.class} (#{error.message.to_s.lines.first.to_s.strip[0, 200]}) " \
                                                  "while it waited for a job: a Thread#raise from a thread a job left running; it goes on"))
          retry
        end

        # A pool thread named `name`. Its block is made here, where it sees no dead thread: made in `replace`, it closed
        # over `dead`, and each new thread held the one before it, so the pool kept every thread a job ever ended.
        def start_thread(name) = Thread.new { guarded_loop }.tap { |thread| thread.name = name }

        def current_runner = Thread.current

        # A job's Shutdown is held back (it is a Thread#raise, landing wherever the thread is) except in its own code
        # (`interruptible`): one sent as the job ended lands once the job is accounted for, and ends the thread's loop.
        def run_one(id, block) = Thread.handle_interrupt(Shutdown => :never) { super }

        # Raises Worker::Shutdown inside the job's thread.
        def interrupt(thread) = thread.raise(Shutdown)
    end
  end
end
