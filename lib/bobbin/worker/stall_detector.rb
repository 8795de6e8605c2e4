# frozen_string_literal: true

module Bobbin
  class Worker
    # Watches a fiber pool's event loop from a thread of its own and names the job that holds it.
    #
    # Inside the loop a ticker fiber stamps the time every `threshold / 4` (its lateness is the loop lag). A
    # watchdog thread looks every `threshold / 4`: when the stamp is older than half the threshold it notes which
    # job the loop is running (each job fiber carries its job id as a fiber-local) and starts counting fiber
    # switches; when the stamp is older than the threshold and the same job ran all along without a switch, that
    # job holds the loop: its backtrace is taken there and then, while it is stuck. The switch that ends it gives
    # the duration. Time spent in GC, waiting for a CPU, or running the process's other threads (which hold the GVL)
    # meanwhile does not count against the job, and the job must have held the loop alone for half the threshold
    # after it was first seen (so a loop slowed by many short jobs blames none of them); a stall just over the
    # threshold may go unreported. The hot path pays two fiber-local writes per job; switches are traced only while
    # a stall is suspected.
    #
    # A C call that keeps the GVL (a libc sleep, a blocking read through an extension that does not let go of it, a
    # C parser busy for seconds) lets no other thread run, the watchdog included, so no look sees it; the watchdog's
    # first look comes once the loop thread lets go of the GVL, at its next blocking call. A job that ran from its
    # start, or from its last wait, to its end without the loop turning, for the threshold or more, is named as it
    # ends (`ended`, on the loop: a clock read per job and one per wait), with the clocks of the look before it and at
    # its end for what to excuse (GC, waiting for a CPU, other threads) and no line (none was seen). Such a call in a
    # job that waits after it (a query, an HTTP call) shows as loop lag on the process row, and names no job.
    class StallDetector
      # The fiber-locals a job fiber keeps its job id and start (monotonic seconds) in while it runs the job.
      JOB = :bobbin_job_id
      STARTED = :bobbin_job_started
      # One finished stall: which job, how long (ms), and where it was stuck.
      Stall = Data.define(:id, :class_name, :queue, :duration_ms, :location, :backtrace, :at, :wall_ms)
      # Stalls the process row keeps for the dashboard.
      RECENT = 5
      # A stall still going on after this many seconds is logged once before it ends.
      ONGOING = 0.5

      # A job's own tasks (`Async { }`, an Async::Barrier's fan-out, a client's background task) run in fibers of their
      # own, which had no job id: one that held the loop for a second was no job's to name, and no stall was reported
      # (a review). A task started from a job's fiber carries that job's id, and its own start, from its first line.
      module JobTasks
        def initialize(*, **, &block)
          if block && (job = Thread.current[JOB])
            task = block
            block = proc do |*arguments|
              Thread.current[STARTED] = Bobbin.monotonic
              Thread.current[JOB] = job
              task.call(*arguments)
            end
          end
          super(*, **, &block)
        end
      end

      # `jobs` answers the claimed job for an id (nil when gone); `on_stall` gets each Stall once it ends.
      def initialize(threshold, jobs:, on_stall:)
        @threshold = threshold
        @interval = [ threshold / 4.0, 0.005 ].max
        @jobs = jobs
        @on_stall = on_stall
        @stalls = 0
        @recent = []
        @lag = @max_lag = 0.0
        @lock = Mutex.new
      end

      # Starts the ticker as a child of `task` (the loop's top task) and the watchdog thread.
      def start(task)
        @loop_thread = Thread.current
        @beat = Bobbin.monotonic
        ResumeStamps.on(Fiber.scheduler)
        Async::Task.prepend(JobTasks) unless Async::Task < JobTasks
        @ticker = task.async(transient: true) { tick while sleep(@interval) }
        @watchdog = Thread.new { watch }.tap { |thread| thread.name = "bobbin-stall-watch" }
      end

      # Forgets the lag so far: the loop held by the worker's own boot (its heap settling) is no job's, and shown as
      # the process's worst lag it set off alerts on the gauge of a worker that had run nothing. Called on the loop.
      def booted
        @beat = Bobbin.monotonic
        @lock.synchronize { @lag = @max_lag = 0.0 }
      end

      # Stops both.
      def stop
        @stopped = true
        @watchdog&.join
        @ticker&.stop
        reset
      end

      # Job `id`, started at `started` (monotonic), ends; called on the loop, in its fiber. When it ran from its start,
      # or from its last wait (ResumeStamps), to its end for the threshold or more, and the loop's ticker has not
      # stamped the time since, it held the loop all along, out of the watchdog's sight: the next look reports it.
      # Only that last stretch is judged: the ticker alone cannot tell a job's own hold from other fibers' turns while
      # it waited (a ticker due after 2,000 woken fibers stamps nothing for their 100 ms, and a noop job that waited
      # on a lock among them was named). And only when no look came in it: a watchdog that could look saw the loop
      # thread let go of the GVL, so no call kept it, and what held the loop was the looks' to judge (a loaded host
      # kept a job that had just woken from its sleep off the CPU for 160 ms, and it was named).
      def ended(id, started)
        return unless started && @suspect&.fetch(:id) != id

        since = [ started, Thread.current[ResumeStamps::RESUMED] || started ].max
        return unless since > @beat && !(@last_look && @last_look > since)

        now = Bobbin.monotonic
        return if now - since < @threshold

        # The clocks now, on the loop: the look that reports it may come much later, and what the process's threads
        # did meanwhile (a loaded host: seconds) is no part of this stall, to excuse or not. Those of the last look
        # done: the look under way may have begun before the job did, and be reading them only now (see `remember`).
        @unseen = { id: id, job: @jobs.call(id), since: since, ended: now, clocks: @previous, clocks_at_end: clocks }
      end

      # True while a job is known to hold the loop past the threshold (read from other threads: one boolean).
      def stalled? = @confirmed == true

      # The job known to hold the loop past the threshold now, { id:, job:, since: (monotonic) }, else nil (read from
      # other threads: the heartbeat's, to say what keeps a stop from running).
      def holder
        suspect = @suspect
        suspect if @confirmed && suspect
      end

      # Loop lag now and the longest seen (ms), stalls so far and the recent ones, for the process row.
      def health
        lag = @beat ? [ @lag, Bobbin.monotonic - @beat - @interval ].max.clamp(0, nil) : 0.0
        @lock.synchronize do # the longest includes one going on now (the row showed lag 1841.6, max 4.3)
          { loop_lag_ms: (lag * 1000).round(1), max_loop_lag_ms: ([ @max_lag, lag ].max * 1000).round(1), stalls: @stalls,
            recent_stalls: @recent.map { |stall| stall.to_h.except(:backtrace) } }
        end
      end

      private
        def tick
          now = Bobbin.monotonic
          @lag = (now - @beat - @interval).clamp(0, nil)
          @max_lag = @lag if @lag > @max_lag
          @beat = now
        end

        # Looks until stopped, and once more then: a stall that ended just before its worker stopped (a drain whose
        # last job held the loop) is reported, not lost with the watchdog (a loaded host's watchdog slept past both).
        def watch
          until @stopped
            sleep(@interval)
            check
          end
        rescue StandardError => error
          Bobbin.logger.error("bobbin: stall detector stopped: #{error.class}: #{error.message}")
        end

        # One look: idle → suspecting (trace on) → stuck (confirmed) → reported once a switch or the next job ends it.
        def check
          ended_unseen
          job = @loop_thread[JOB]
          seen(job)
          let_go(job) if @suspect && (@switched_at || job != @suspect[:id])
          age = Bobbin.monotonic - @beat
          if @suspect.nil?
            suspect(job) if job && age >= @threshold / 2
          elsif !@confirmed
            confirm if age >= @threshold
          else
            ongoing
          end
          remember
        end

        # The clocks of this look (a suspect's, when it took them), for a job `ended` finds held the loop until the
        # next. Reading them lets go of the GVL, and a job whose C call keeps it may run whole meanwhile, from its start
        # to its end: with none kept after a look that suspected another job, such a stall went unreported (a loaded
        # host, 4 drains of 30).
        def remember
          @previous = @suspect ? @suspect[:clocks] : clocks
        end

        # Reports the job `ended` found holding the loop since its start, measured from the previous look.
        def ended_unseen
          unseen = @unseen
          return unless unseen

          @unseen = nil
          before = unseen[:clocks] || @previous
          return unless before # no clocks from before it to excuse what was no job's doing: not blamed

          report(unseen.merge(at: unseen[:since], clocks: before), [], unseen[:ended])
        end

        # When the running job changed between two looks, it started holding the loop somewhere between them: the
        # midpoint is the estimate (so jobs that held the loop one after another in one turn are not charged each
        # other's time).
        def seen(job)
          now = Bobbin.monotonic
          @current_since = since_between(@last_look, now) if job != @current_job
          @current_job = job
          @last_look = now
        end

        # A job that started after the last look started holding the loop then (its own recorded start); one resumed
        # between the looks, at their midpoint.
        def since_between(last_look, now)
          started = @loop_thread[STARTED]
          return started if started && (last_look.nil? || started > last_look)

          last_look ? (last_look + now) / 2 : now
        end

        # The suspect let go of the loop: at the switch, or when its fiber went straight on to its next job. It held
        # the loop if a later look confirmed it, or if it kept the loop for a whole watch interval after the first
        # (a thread that holds the GVL lets the watchdog look only every 100 ms or so).
        def let_go(job)
          started = @loop_thread[STARTED]
          ended = @switched_at || (job && started && started > @suspect[:at] ? started : Bobbin.monotonic)
          report(@suspect, @backtrace, ended) if @confirmed || ended - @suspect[:at] >= @interval
          reset
        end

        # The loop has not turned for half the threshold while `job` runs: note where it is now, while it runs,
        # and count switches from now on. What needs the loop thread paused comes first: reading /proc (`clocks`)
        # lets go of the GVL, and a job busy in Ruby runs on meanwhile.
        def suspect(job)
          since = [ @beat, @loop_thread[STARTED] || @beat, @current_since ].max
          at = Bobbin.monotonic
          @backtrace = stack
          @trace = TracePoint.new(:fiber_switch) { @switched_at ||= Bobbin.monotonic }
          @trace.enable(target_thread: @loop_thread)
          return reset if @loop_thread[JOB] != job # it switched before the trace was on

          @suspect = { id: job, job: @jobs.call(job), since: since, at: at, clocks: clocks }
        end

        # The same job ran without a switch past the threshold: where it is stuck now.
        def confirm
          @confirmed = true
          @backtrace = stack
        end

        def stack = Array(@loop_thread.backtrace_locations).first(30).map(&:to_s)

        # A stall still going on after ONGOING seconds is logged once, so a job that never returns is named too. Its
        # time so far is counted as the stall's end counts it, without the loop thread's waits for a CPU or the GVL (a
        # trial on a loaded host read "0.9s so far", then "held the event loop 696ms").
        def ongoing
          held = Bobbin.monotonic - @suspect[:since]
          return if @ongoing_logged || held < ONGOING

          @ongoing_logged = true
          job = @suspect[:job]
          waited = excused_since(@suspect[:clocks], clocks).last / 1000
          Bobbin.logger.warn("bobbin: #{job&.class_name} #{@suspect[:id]} has held the event loop for #{(held - waited).round(1)}s so far " \
                             "at #{location(@backtrace)}#{" (#{held.round(1)}s on the clock, the rest waiting for a CPU)" if waited >= 0.1}")
        end

        def reset
          @trace&.disable
          @suspect = @trace = @switched_at = nil
          @confirmed = @ongoing_logged = false
        end

        # GC decides nothing (a collection that fell in a quick job is no stall of its), but within a stall it counts:
        # the job's own allocations set it off, and a job building strings for 5 s was reported as holding the loop 1 s.
        def report(suspect, backtrace, ended)
          gc, waits = excused_since(suspect[:clocks], suspect[:clocks_at_end] || clocks)
          duration = (ended - suspect[:since]) * 1000 - waits
          return if duration - gc < @threshold * 1000 || (ended - suspect[:at]) * 1000 - waits - gc < @threshold * 500

          job = suspect[:job]
          stall = Stall.new(id: suspect[:id], class_name: job&.class_name, queue: job&.queue, duration_ms: duration.round(1),
                            location: location(backtrace), backtrace: backtrace, at: Time.now.utc.iso8601(3),
                            wall_ms: ((ended - suspect[:since]) * 1000).round(1))
          @lock.synchronize { @stalls += 1; @recent = [ stall, *@recent ].first(RECENT) }
          @on_stall.call(stall)
        end

        # The first frame of the stuck fiber's backtrace in the app's own code (not a gem's, Bobbin's or Ruby's): the line
        # that made the blocking call; the backtrace itself shows the library it went into.
        def location(backtrace)
          LibraryFrames.first_own(backtrace) || backtrace.first ||
            "a line no look saw (a C call that kept the GVL until the job ended)"
        end

        # Milliseconds between `before` and `now` (two `clocks` readings) that may be no job's doing: GC, then the waits — the loop
        # thread waiting for a CPU on a busy machine (Linux's schedstat), and the other threads of this process on a
        # CPU (a thread running Ruby holds the GVL the loop needs: a thread-pool lane job, Bobbin's outcome writer on
        # SQLite). None when `before` was read after `now` (a look's, across its own let-go of the GVL: see `remember`).
        def excused_since(before, now)
          others = now[:others].sum { |tid, ms| ms - before[:others].fetch(tid, 0) }
          [ now[:gc] - before[:gc], now[:queued] - before[:queued] + others ].map { |ms| ms.clamp(0, nil) }
        end

        def clocks
          others = (Thread.list - [ @loop_thread, @watchdog, Thread.current ]).filter_map(&:native_thread_id) # read on either
          { gc: GC.stat(:time), queued: queued(@loop_thread.native_thread_id), others: others.to_h { |tid| [ tid, cpu_time(tid) ] } }
        end

        # A thread's time waiting for a CPU, in ms (0 where Linux does not say). One file: each read lets go of the
        # GVL, and a job busy in Ruby on the loop takes it back for its whole time slice (100 ms).
        def queued(tid)
          File.read("/proc/self/task/#{tid}/schedstat").split[1].to_i / 1_000_000.0
        rescue SystemCallError
          0
        end

        # A thread's time on a CPU, in ms, from its CPU-time clock (the id Linux's pthread_getcpuclockid gives): a
        # clock_gettime keeps the GVL. Read from /proc, a look with a dozen threads took seconds while a job busy in
        # Ruby held the loop (see `queued`), and the stall it was looking at went unnamed until it ended.
        def cpu_time(tid)
          ::Process.clock_gettime((~tid << 3) | 6, :float_millisecond)
        rescue SystemCallError
          0
        end
    end
  end
end
