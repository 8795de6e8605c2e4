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

      # Share of vm.max_map_count fibers may take, with what the process maps already: near the limit, creating
      # fibers slows to a crawl and the last ones fail (32,000 fibers hung at 65,530).
      MAP_SHARE = 0.9

      # io-event's selectors, best first (io-event's own order).
      SELECTORS = %i[URing EPoll KQueue Select].freeze

      # The io-event selector the loop runs on: IO_EVENT_SELECTOR when set (io-event's own switch), else the best this
      # build of io-event has (URing where it was built with liburing, else EPoll). A name it lacks raises
      # ConfigurationError here rather than NameError in the loop.
      def self.selector
        IO::Event::Selector.default
      rescue NameError
        built = SELECTORS.select { |name| IO::Event::Selector.const_defined?(name) }
        raise ConfigurationError, "IO_EVENT_SELECTOR=#{ENV['IO_EVENT_SELECTOR']} is not a selector of this io-event " \
                                  "(it has #{built.join(', ')}; unset it for the best of them)"
      end

      # Raises ConfigurationError when this machine cannot give `capacity` fibers their stacks, or io-event the
      # selector IO_EVENT_SELECTOR names.
      def self.check!(capacity)
        selector
        check_stacks!(capacity)
      end

      # Like check!, before a supervisor starts `pools` (Pool) in `mode`: a worker process of fork mode runs one pool,
      # the one process of async mode all of them. Checked in each worker process only, a pool too large for the
      # machine crashed every worker as it started, and the supervisor restarted them for ever (a trial).
      def self.check_pools!(pools, mode)
        fibers = per_process(pools, mode)
        check!(fibers) if fibers.positive?
      end

      # The most fibers one worker process of `pools` in `mode` runs.
      def self.per_process(pools, mode)
        pools = pools.select { |pool| pool.mode == :fibers }
        mode.to_sym == :async ? pools.sum { |pool| pool.size * pool.processes } : pools.map(&:size).max.to_i
      end

      # Raises ConfigurationError when this machine cannot give `capacity` more fibers their stacks (vm.max_map_count).
      def self.check_stacks!(capacity)
        limit = File.exist?(MAP_COUNT) ? File.read(MAP_COUNT).to_i : nil
        return if limit.nil?

        room = (limit * MAP_SHARE).floor - File.foreach("/proc/self/maps").count
        return if capacity * MAPPINGS_PER_FIBER <= room

        raise ConfigurationError, "fibers: #{capacity} needs about #{capacity * MAPPINGS_PER_FIBER} more memory mappings but " \
                                  "vm.max_map_count is #{limit}: lower fibers (at most #{room / MAPPINGS_PER_FIBER} here) or raise it " \
                                  "(sysctl -w vm.max_map_count=#{capacity * 4})"
      end

      # The stall detector watching this pool's loop (nil when stall_threshold is off).
      attr_reader :detector

      # `stall_threshold`: seconds a job may hold the loop before it is reported (false: no detector); `on_stall`
      # gets each StallDetector::Stall. `offload`: threads for offload-safe C calls (Offload). `on_interrupt` is called
      # when the loop is interrupted (EventLoop), before its tasks are cancelled; by default it interrupts the running jobs.
      def initialize(capacity, on_done:, stall_threshold: false, on_stall: ->(_stall) { }, offload: 0, on_interrupt: nil)
        self.class.check!(capacity)
        super(capacity, on_done: on_done)
        @in_job = {} # the tasks running their job's own code (interruptible); only the loop's thread reads or writes it
        @detector = StallDetector.new(stall_threshold, jobs: method(:job), on_stall: on_stall) if stall_threshold
        @offload = offload
        @on_interrupt = on_interrupt || method(:interrupt_all)
      end

      # :fibers
      def mode = :fibers

      # Runs `body` inside an event loop of its own (with the job fibers, the stall detector and, on Ruby >= 3.4,
      # offload threads for offload-safe C calls); returns when all of them are done. Inside an existing loop
      # (embedded), runs there.
      def run(&body)
        return in_loop(Async::Task.current, &body) if Async::Task.current?

        @loop_failed = nil
        Fiber.blocking do
          EventLoop.new(interrupt: @on_interrupt, worker_pool: worker_pool).run(finished: false) { |task| in_loop(task, &body) }.wait
        rescue Exception # rubocop:disable Lint/RescueException -- only noted, and raised on
          # An exception raised into this thread from outside (a job's watchdog thread's Thread#raise) ends the loop under
          # its jobs, which the scheduler's close below cancels: as beside a job's Thread.exit, they count as interrupted
          # and go back to ready with their attempt. They were failed for good with Async::Cancel (a review).
          @loop_failed = true
          interrupt_beside
          raise
        ensure
          Fiber.set_scheduler(nil)
        end
      end

      # With `fibers`, ends the fibers of jobs that ignored their interrupt (a job that rescues every exception), as a thread
      # pool kills their threads: `Fiber#kill` unwinds one through its `ensure` blocks only. Without it, as in a process
      # of its own, which exits instead (a job that holds the loop and never yields cannot be reached from the loop). A
      # worker an app runs in its own process has no such exit: the loop ran that fiber for ever, and the worker's
      # `run` never returned after its stop. Called on the loop: a killed fiber that ends returns to the loop, not to its
      # killer, so the caller is scheduled to go on first.
      def kill_stuck(fibers: false)
        return unless fibers

        tasks = @lock.synchronize { @killing = true; @running.keys }
        tasks.each do |task|
          next unless (fiber = task.fiber)&.alive?

          Fiber.scheduler.push(Fiber.current)
          fiber.kill
        rescue FiberError # not killable from here: it stays stuck, and is reported so
          nil
        end
      end

      # The job's own code, the one stretch of a job's fiber that a stop's interrupt (an Async::Cancel at the fiber's next
      # wait) may cut: a fiber that waits anywhere else (a contended lock as its outcome is handed on, a subscriber to
      # perform.bobbin) is left to finish (see `interrupt`). A job interrupted before its code began stops here.
      def interruptible(id)
        task = Async::Task.current
        @in_job[task] = true
        task.stop(cause: Shutdown.new) if interrupted?(id) # raises here: its fiber is the current one
        before = task.children? ? task.children.to_a : NONE_STARTED # most jobs start none: nothing to look through
        yield.tap { await_started(task, before) if task.children? }
      ensure
        @in_job.delete(task) # no lock: a wait for one here would be a wait the stop could land in
      end

      # The tasks of the job's slot before it began, when it had none (see interruptible).
      NONE_STARTED = [].freeze

      # The tasks a job started and left running (`Async { }`: a stream fanned out, a write at its end) are part of its
      # work, as they are of a script's `Sync { }`: its outcome waits for them, and an exception one ends with is the
      # job's. Its row read succeeded while they ran, and a stop then cut them, so their work was lost and never ran
      # again (a trial). Transient tasks (a client's background reader) are not waited for, as Async's own wait_all skips them.
      def await_started(task, before)
        while (started = task.children.to_a.find { |child| !child.transient? && !child.finished? && !before.include?(child) })
          started.wait_all
        end
      end

      private
        def in_loop(task, &body)
          @killing = false
          open_line
          start_fibers(task)
          @detector&.start(task)
          body.call
        ensure
          @detector&.stop
          @queue.close
          stop_left_running
        end

        # Stops the tasks jobs started and left running (`Async { ... }` in a job, a client's background task), children
        # of their slot's: the loop runs until every task is done, and one that never ended kept a worker that had
        # stopped, and logged so, from ever exiting (a drain from ever returning). One that ignores its stop (it rescues
        # every exception and carries on) gets STOP_GRACE to end, as an interrupted job does, then its fiber is killed
        # as kill_stuck kills a job's: it kept the worker from exiting for as long as it ran (a stream: for ever), its
        # job handed back and run again beside it (a review).
        def stop_left_running
          left = @slots.to_a.flat_map { |slot| left_under(slot) }
          left.each(&:stop)
          deadline = Bobbin.monotonic + Worker::STOP_GRACE
          sleep(0.05) while left.any? { |task| task.fiber&.alive? } && Bobbin.monotonic < deadline
          left.reverse_each do |task| # the deepest first: a killed task's children would be left to the loop
            next unless (fiber = task.fiber)&.alive?

            Fiber.scheduler.push(Fiber.current)
            fiber.kill
          rescue FiberError
            nil
          end
        end

        def left_under(task) = task.children.to_a.flat_map { |child| [ child, *left_under(child) ] }

        def ended!(id) = @detector&.ended(id, Thread.current[StallDetector::STARTED])

        # async's own pool where io-event has one (Ruby >= 4.0), else Bobbin's; none when offload is 0.
        def worker_pool
          return nil unless @offload.positive?

          Async::Scheduler::WorkerPool ? true : Offload.new(@offload)
        end

        def start_fibers(task)
          @slots = Array.new(@capacity) { task.async { guarded_loop(task) } }
        rescue FiberError => error
          raise ConfigurationError, "could not create #{@capacity} fibers (#{error.message}); lower fibers: for this pool"
        end

        # A job that ended its own fiber (Fiber#kill: no exception, only `ensure` blocks run; Worker#perform recorded
        # the job) ended the slot's loop with it: another fiber takes its place, starting clean, so the pool keeps its
        # size. One such job per slot left a pool of 1 claiming jobs it never ran (a review). A loop ended by an
        # exception (the stop at shutdown), by the closed line or by kill_stuck is not replaced.
        def guarded_loop(task, storage = Fiber.current.storage)
          work_loop(storage)
          done = true
        ensure
          return if done || $! || @queue.closed? || @killing

          @slots.reject!(&:finished?)
          @slots << task.async do
            start_clean(storage)
            guarded_loop(task, storage)
          end
        end

        # A fiber takes queued jobs without waiting, so jobs that never wait (noop, CPU) would run back to back and
        # keep the loop from turning until the line is empty: the claim loop could send its next claim only then, and
        # every claim's round trip left the pool idle. Between two jobs the fiber lets the loop turn once.
        def work_loop(storage)
          while (item = @queue.pop)
            run_one(*item)
            start_clean(storage)
            Fiber.scheduler.yield unless @queue.empty?
          end
        end

        # One fiber runs job after job, so what a job left in fiber storage (`Fiber[]`: a request id, a trace context),
        # in fiber-locals (`Thread.current[]`) or in Rails' per-fiber state (ActiveSupport::IsolatedExecutionState at
        # isolation level :fiber, which fiber pools require: Active Record's connected_to stack, where a job's
        # `connecting_to(role: :reading)` sent later jobs of its fiber to the replica, a trial) would be the next job's.
        # Each job starts as in a fiber of its own instead, as an Async task per job would: the slot's storage as it
        # began, no fiber-locals, no Rails state.
        def start_clean(storage)
          locals = Thread.current
          locals.keys.each { |key| locals[key] = nil }
          Fiber.current.storage&.each_key { |key| Fiber[key] = storage&.[](key) } # nil until a fiber's first Fiber[]=
          ActiveSupport::IsolatedExecutionState.clear if ActiveSupport::IsolatedExecutionState.isolation_level == :fiber
        end

        # A job's Thread.exit or Thread.current.kill ends the whole thread, not only the job's fiber: Ruby unwinds the
        # fiber, then the loop, whose close cancels every other fiber on it. No Ruby code can keep such a kill to one fiber
        # (a `throw` out of an `ensure` ends the unwinding, but the thread stays marked as dying: every later kill of it,
        # and the next Thread.exit, does nothing). The jobs beside it did nothing wrong: they count as interrupted, as at a
        # shutdown, so their Async::Cancel leaves them claimed and the worker's end hands them back to ready with their
        # attempt (Worker#loop_lost); they were recorded failed with Async::Cancel, for good with no retries left.
        def run_one(id, block)
          super
          returned = true
        ensure
          interrupt_beside unless returned || $! || Thread.current.status != "aborting" # a job's end, unwinding, with no exception
        end

        def interrupt_beside = @lock.synchronize { @running.each_value { |id| @interrupted[id] = true } }

        def current_runner = Async::Task.current

        # Raises Async::Cancel (Async::Stop) inside the job's fiber at its current wait, caused by a Shutdown: that
        # cause is what tells an Active Job job it was interrupted (InterruptedJobs), not discarded. Only while the job
        # runs its own code: looked at here, on the loop, where no fiber moves between the look and the raise.
        def interrupt(task) = (task.stop(cause: Shutdown.new) if @in_job.key?(task))
    end
  end
end
