# frozen_string_literal: true

require_relative "connection_budget"
require_relative "worker/waker"
require_relative "worker/shutdown"
require_relative "worker/executor"
require_relative "worker/execution"
require_relative "worker/outcome_buffer"
require_relative "worker/resume_stamps"
require_relative "worker/stall_detector"
require_relative "worker/stall_log"
require_relative "worker/offload"
require_relative "worker/event_loop"
require_relative "worker/fiber_executor"
require_relative "worker/thread_executor"
require_relative "worker/lanes"
require_relative "worker/heartbeat"
require_relative "worker/claimer"
require_relative "worker/pacer"
require_relative "worker/backtraces"

module Bobbin
  # One worker pool in one process: claims jobs in batches as its slots free up (plus the few it will start
  # within a claim's round trip) and runs them as fibers or threads.
  #
  #   Bobbin::Worker.new(queues: ["llm", "default"], fibers: 500).start   # until TERM/INT
  #   Bobbin::Worker.new(queues: ["*"], threads: 10).run_until_empty       # drains, then returns
  #
  # A fiber pool also watches its event loop for stalls (`stall_threshold:`), runs `runs_on: :thread` jobs on a
  # thread lane (`thread_lane:` threads) and hands offload-safe C calls to threads (Bobbin.config.offload_threads).
  class Worker
    # Seconds an interrupted job gets to unwind before the process gives up on it and exits.
    STOP_GRACE = 5
    # Seconds past shutdown_timeout + STOP_GRACE after which a process whose stop cannot run at all (a job holds the
    # event loop and never yields) exits from its heartbeat thread.
    STOP_OVERDUE = 2
    # Jobs a stop's log line names when it interrupts them; more are counted.
    NAMED_UP_TO = 20
    # Exit status of a worker process that had to exit with jobs that would not stop.
    EXIT_STUCK = 3
    # The signal that makes a worker (or a supervisor's every worker) quiet: Sidekiq's, so deploy scripts carry over.
    QUIET_SIGNAL = "TSTP"

    # Workers of this process that are stopping. No Mutex: `stop` runs in signal handlers, where a Mutex may not
    # be taken; a Hash update is atomic under the GVL.
    @stopping = {}

    class << self
      # True once a worker in this process has begun shutting down (Active Job continuations checkpoint then).
      def stopping? = @stopping.any?

      # Records that `worker` is stopping (true) or gone (false).
      def mark_stopping(worker, stopping) = stopping ? @stopping[worker] = true : @stopping.delete(worker)

      # Full collections before the first claim rather than among the first jobs, once per process. What boot made
      # to last (with the executor's fibers) is still young: the first minor collections among jobs would mark it and
      # promote it (about 24,000 objects on the bench's VM), and p99 pickup in the first two seconds at 2,000 jobs/s
      # was several times the steady one. Ruby promotes an object that survived three collections. (A major one
      # would also come soon after the first claim: Ruby runs one when old objects reach twice what its last left.)
      def settle_heap
        return if @settled == ::Process.pid

        @settled = ::Process.pid
        3.times { GC.start }
      end
    end

    attr_reader :selection, :executor, :process_id, :name, :claimer, :detector

    # The status a process this worker owns exits with: 0, or Store::DatabaseFile::EXIT_REPLACED.
    attr_reader :exit_status

    def initialize(queues: [ "*" ], fibers: nil, threads: nil, polling_interval: nil, notified_polling_interval: nil,
                   shutdown_timeout: nil, stall_threshold: nil, thread_lane: nil, name: nil, supervisor: nil)
      Setting.given("Bobbin::Worker.new", polling_interval: polling_interval, notified_polling_interval: notified_polling_interval,
                                          shutdown_timeout: shutdown_timeout, stall_threshold: stall_threshold, thread_lane: thread_lane)
      raise ConfigurationError, "a worker needs exactly one of fibers: N or threads: N" unless fibers.nil? ^ threads.nil?

      size = Integer(fibers || threads)
      raise ConfigurationError, "#{fibers ? 'fibers' : 'threads'} must be at least 1, got #{size}" if size < 1

      @selection = Store::QueueSelection.new(queues)
      @waker = Waker.new
      @executor = fibers ? fiber_executor(size, stall_threshold, thread_lane) : ThreadExecutor.new(size, on_done: method(:job_done))
      @pacer = Pacer.new(polling_interval || Bobbin.config.polling_interval,
                         notified_polling_interval || Bobbin.config.notified_polling_interval)
      @shutdown_timeout = shutdown_timeout || Bobbin.config.shutdown_timeout
      @exit_status = 0
      @name = name || "#{@executor.mode}-#{size}"
      @supervisor = supervisor
      @claiming = Mutex.new # held from a claim's statement until its jobs are the executor's (see release_lost)
      @stuck = [] # boot resets it; a run refused before booting (unworkable!) still finishes
    end

    # Runs in the foreground until TERM, INT or HUP (graceful) or QUIT (immediate); TSTP makes it quiet, TTIN logs where
    # each running job is (Backtraces). Owns the process: when jobs refuse to stop, it exits with EXIT_STUCK and
    # leaves them to be recovered once it is gone. `held_signals` came before these traps (a forked worker booting).
    # A second INT (Ctrl-C again) stops a lone worker at once; a second TERM or HUP does not, nor anything again under a
    # supervisor: systemd, a terminal and foreman signal the whole process group and the supervisor forwards the same
    # stop, so repeats are the one stop arriving twice. A supervisor signalled again hurries its workers with QUIT.
    def start(held_signals: [])
      handlers = { "TERM" => -> { stop(signal: "TERM") }, "HUP" => -> { stop(signal: "HUP") }, "INT" => -> { stop(signal: "INT", again: @supervisor.nil?) },
                   "QUIT" => -> { stop(timeout: 0, signal: "QUIT") }, QUIET_SIGNAL => -> { quiet },
                   Backtraces::SIGNAL => -> { Backtraces.log_later([ self ]) } }
      @signal_guard = SignalGuard.new("bobbin worker", handlers.transform_values { |handler| proc { handler.call } })
      held_signals.each { |signal| handlers[signal]&.call }
      @owns_process = true
      # A service's lines go out as they happen: Ruby buffers stdout that is a pipe or a file (systemd, Docker), and a
      # script's worker said nothing until it exited (`bobbin start` sets this too).
      $stdout.sync = true
      run
    ensure
      @signal_guard&.restore
      @signal_guard = nil
    end

    # Puts back this worker's signal handlers if other code replaced them (SignalGuard); nothing unless `start` put them in.
    def guard_signals = @signal_guard&.check

    # Runs in the foreground until `stop`, leaving signals to the caller (the supervisor's async mode).
    def run = work(drain: false)

    # Runs until no job is due and none is running, then returns.
    def run_until_empty = work(drain: true)

    # Asks the worker to stop claiming and shut down (safe from a signal handler); `signal` is named in the log. A
    # timeout given while a stop waits for running jobs shortens that wait (QUIT after TERM); with `again`, a signal
    # asked twice stops it at once, as QUIT does (a second Ctrl-C waited out the whole shutdown_timeout all the same).
    def stop(timeout: nil, signal: nil, again: false)
      if again && @stopping
        timeout = 0
        @hurried = signal
      end
      @stop_signal ||= signal
      @shutdown_timeout = timeout if timeout
      # When the wait for running jobs ends: the first stop's, or sooner, a shorter timeout given later (QUIT after TERM)
      # counting from now. Counted from the first stop, a QUIT 8 s into a TERM's wait found the stop overdue at once
      # and exited 3, cutting jobs' unwinding short and charging them a crash (a review).
      @wait_ends = [ @wait_ends || Float::INFINITY, Bobbin.monotonic + @shutdown_timeout ].min
      # Its database calls end by then too, answered or not (a frozen server held a TERM ~60 s: a review). A claim under
      # way is not waited for at all (a second at most): its answer is no longer wanted, and on a frozen server it held
      # the stop's start ~28 s, so running jobs got none of shutdown_timeout and were never interrupted (a trial). The
      # stop's own statements on the claimer's store (the hand-back) get stop_due_at again as the stop begins (shut_down).
      @writer&.deadline = stop_due_at
      @claimer&.store&.deadline = @stop_began ? stop_due_at : Bobbin.monotonic
      @stopping = true
      # Only while it runs: a worker stopped before its run, or after it ended, was listed as stopping for good, and every
      # continuable job of the process stopped at its first checkpoint from then on (a review). `work` lists one asked before.
      Worker.mark_stopping(self, true) if @working
      @waker.wake
    end

    # Stops claiming for good and hands back the jobs claimed ahead that have not started; the running ones finish,
    # and the worker stays (heartbeat, outcomes) until `stop`. Before a deploy, as Sidekiq's TSTP: no job starts
    # here that a stop would then interrupt. Safe from a signal handler.
    def quiet
      @quiet = true
      @waker.wake
      @heartbeat&.beat_now # the process row says quiet now, not a heartbeat_interval later
    end

    # True once `quiet` was asked.
    def quiet? = @quiet == true

    # True once `stop` was asked.
    def stop_asked? = @stopping == true

    # True when its stop left jobs running that ignored their interrupt (a thread pool's job in a C call its kill cannot
    # stop): an async supervisor returns them to ready and exits, as for a worker thread that does not stop.
    def stuck? = !@stuck.nil? && @stuck.any?

    # Stops this worker's heartbeat for good (an async supervisor leaving a worker thread that will not stop: its
    # beats would take back the jobs the supervisor returns to ready).
    def stop_heartbeat
      @heartbeat&.stop
      @heartbeat_thread&.join(Heartbeat::TICK * 5)
    end

    # Live numbers for the process row, process title and dashboard (a fiber pool's loop health among them). `busy` is
    # the jobs running, `queued` those claimed and waiting in line: counted together, `bobbin processes` showed a fiber
    # pool with lane jobs waiting "101/100" busy (a trial).
    def status
      queued = @executor.queued
      { mode: @executor.mode, quiet: quiet?, capacity: @executor.capacity, busy: [ @executor.busy - queued, 0 ].max, queues: @selection.to_s, name: @name,
        claims: @claimer&.claims, last_claim_at: @claimer&.last_claim_at, listening: Wakeups.listening?, queued: queued,
        **Operator::ProcessView.resources, **@detector&.health.to_h }
    end

    # Where the stalls the detector reports go (nil before boot and for thread pools).
    attr_reader :stall_log

    # Seconds between safety polls while notifications do not reach this worker.
    def polling_interval = @pacer.polling_interval

    # Hears that jobs are ready in `queues` (nil: any) or become due at `at` (epoch seconds); called by Wakeups from
    # any thread. Wakes the claim loop when they concern this worker's queues, not all paused, and it has room (or
    # must sleep less). `resumed`: the queues were paused until now, and the next due time the worker knows left their
    # jobs out (a job scheduled into a paused queue, due after its resume, ran at the next poll).
    def notice(queues, at, resumed: false)
      return unless queues.nil? || queues.any? { |queue| @selection.match?(queue) && !Wakeups.paused?(queue) }

      @pacer.stale! if resumed || (queues.nil? && at.nil?) # "anything may have changed": a listener (re)connected, or went late
      if at
        sooner = @pacer.sooner?(at)
        @pacer.note(at)
        @waker.wake if sooner
      else
        @unheard = true # until the next claim: a freed slot looks if none has since
        @waker.wake if room?
      end
    end

    # A job ended and freed its slot. The claim loop looks again only when work may be waiting for that slot: the last
    # claim filled every slot, or did not look (no room, or the database failed it), the loop sleeps for want of room
    # (a job may fall due meanwhile), a notice came since it was sent, a crash suspect held its fellows back,
    # notifications do not reach this process (it polls), or the worker is stopping or draining. Otherwise new work announces itself, and a claim per finished job would be an empty claim
    # per job: twice the claims of an idle worker, and a claim in flight that the next job waits for.
    def job_done
      @waker.wake if @unheard || @full || @stopping || @draining || !Wakeups.listening? || @claimer.look_again?
    end

    # Ids of the jobs this worker holds: handed to the executor, or finished with an unwritten outcome.
    def held_ids = held_attempts.keys

    # The same, with the attempt each ran or runs as (`{ id => attempts }`): a reclaim restores it.
    def held_attempts = @executor.held_attempts.merge(@outcomes.pending_attempts)

    # True while this worker holds job `id` (as held_ids, without building the list).
    def held?(id) = running?(id) || @outcomes.pending?(id)

    # True while job `id` is handed to this worker's executor (running, or queued for a slot).
    def running?(id) = !@executor.job(id).nil?

    # Called by the heartbeat (`store`: its own): returns to ready the rows claimed for this worker that it does not
    # hold, and returns how many. A claim whose answer never reached the worker but which committed on the server (a
    # session given up on while its statement was still to run, as when the server froze; a connection lost after the
    # commit; an exception between the commit and the executor) left its jobs running, claimed by a live process, which
    # recovery never touches: they stayed so until the worker restarted. Never while a claim of this worker is under
    # way on its live session (its jobs are not the executor's yet): the claim loop then does it itself once that
    # claim's jobs are the executor's (with work waiting it claims back to back, and a beat would seldom find it
    # between two claims). A claim on a session the worker gave up on commits once or never, and is released by the
    # first beat after. One statement on the partial index of running jobs (bobbin_jobs_running), which reads this
    # worker's running rows only and, with none lost, writes nothing. `store`: nil for the claimer's.
    def release_lost(store = nil)
      # A stop's own release hands them back, said as a stop's (a beat's, mid-stop, said "lost"), also a shutdown for a
      # failed claim loop, where no stop was asked; so does the end of a fiber pool's loop, whose jobs leave the executor
      # as it cancels them. A crash's counts it: a beat's did not (a trial's job was never blamed).
      return 0 if @claimer.nil? || @stopping || @stop_began || @loop_interrupted || @executor.loop_failed?
      unless @claiming.try_lock
        @lost_wanted = true
        return 0
      end

      begin
        @lost_wanted = false
        released = @claimer.release_all(keep: held_ids, store: store, reason: "lost")
      ensure
        @claiming.unlock
      end
      return released if released.zero?

      Bobbin.logger.warn("bobbin worker #{@process_id}: #{released} #{'job'.pluralize(released)} it claimed without taking " \
                         "#{released == 1 ? 'it' : 'them'} (a claim whose answer was lost) returned to ready")
      @waker.wake if room?
      released
    end

    # Writes the outcomes known so far (after a write under way); false when the database is unavailable.
    def flush_outcomes = !@outcomes.flush.nil?

    # The columns of this worker's process row (to register again if it was pruned while alive).
    attr_reader :registration

    # Called by the heartbeat thread: a worker that owns its process and whose stop is overdue (a job holds the
    # event loop and never yields, so the shutdown itself cannot run) exits with EXIT_STUCK, leaving the jobs it
    # still runs to be recovered once it is gone.
    # A worker on its own (`bobbin work`) whose SQLite file was moved, deleted or replaced stops, and its process exits
    # EXIT_REPLACED to be started again on the file at the path (a supervisor does this for its workers).
    def stop_if_database_replaced
      return unless @database_file&.replaced?

      Bobbin.logger.error("bobbin worker #{@process_id}: #{Store::DatabaseFile.replaced(@database_file.path)}: stopping, to be started again on the file " \
                          "there now; #{Store::DatabaseFile::BEFORE_RESTART}")
      @database_file = nil
      @exit_status = Store::DatabaseFile::EXIT_REPLACED
      stop
    end

    # False once the thread running this worker's loop has ended under it: in a fiber pool a job's Thread.exit or
    # Thread#kill ends that whole thread, and nothing of the worker's past the job's own fiber runs (on a process's
    # main thread it is `exit`, a failure like any other).
    def loop_alive? = @loop_thread.nil? || @loop_thread.alive?

    # Called on the heartbeat thread once the loop's thread is gone: its heartbeat went on for a worker that ran
    # nothing, and the row, pruned as dead, was registered again beside its replacement (async mode, a review). The
    # outcomes it has are written and its row removed; the jobs that ended with the thread are a dead process's to
    # recover, or (a fiber pool's jobs, cancelled beside the one that ended the thread: FiberExecutor#run_one) to hand back.
    # A loop ended by an exception (raised into its thread from outside, past the claim loop's own rescue) is said as such:
    # it was blamed on a job's Thread.exit, after the crash's own line (a review).
    def loop_lost
      say_loop_ended
      @outcomes.stop
      @outcomes.flush
      finish(stuck_loop: true)
      @claimer&.close # its thread gone, so is any hold on the claimer's session: not left open for the process's life
    end

    # When a stop is done with: its wait for running jobs, then STOP_GRACE for the interrupted ones to unwind (monotonic;
    # nil before a stop). Its database calls end by then, answered or not.
    def stop_due_at = @wait_ends && @wait_ends + STOP_GRACE

    # Also says, once, a stop that a job holding the event loop keeps from running: the stop logs on the loop, and a
    # TERM so held left no line at all, then "did not stop within 5s of their interrupt" for a job never interrupted.
    def exit_if_stop_overdue
      stop_held
      return unless @owns_process && stop_due_at && Bobbin.monotonic - stop_due_at > STOP_OVERDUE
      return abandon(@executor.held_ids) if @interrupted

      holder = @detector&.holder
      abandon(@executor.held_ids, "were never interrupted: #{holder ? "#{held_by(holder)} held the event loop" : "the event loop did not run"} " \
                                  "from the stop#{" (#{@stop_signal})" if @stop_signal} on, so neither the stop nor an interrupt could run there")
    end

    private
      # Called on the heartbeat thread: a stop asked while a job holds the event loop (the detector has confirmed it) and
      # not begun there is said from here, once, naming the job.
      def stop_held
        return if !@stopping || @stop_began || @stop_held_said || !(holder = @detector&.holder)

        @stop_held_said = true
        overdue = " the process exits #{format('%g', @shutdown_timeout + STOP_GRACE + STOP_OVERDUE)}s after the stop, leaving it to be recovered" if @owns_process
        Bobbin.logger.warn("bobbin worker #{@process_id} stopping#{" on #{@stop_signal}" if @stop_signal}: #{held_by(holder)} holds the event loop, " \
                           "where the stop runs; it waits for the job to let go (one that never does cannot be interrupted#{";#{overdue}" if overdue})")
      end

      # "HogJob 42 (for 3.1s)": the job the detector found holding the loop.
      def held_by(holder) = "#{holder[:job]&.class_name || 'job'} #{holder[:id]} (for #{(Bobbin.monotonic - holder[:since]).round(1)}s)"

      # Fibers on an event loop watched by a StallDetector, with a thread lane beside it unless thread_lane is 0.
      def fiber_executor(size, threshold, lane)
        threshold = Bobbin.config.stall_threshold if threshold.nil?
        lane = Bobbin.config.thread_lane if lane.nil?
        fibers = FiberExecutor.new(size, on_done: method(:job_done), stall_threshold: threshold, offload: Bobbin.config.offload_threads,
                                         on_stall: ->(stall) { @stall_log&.<<(stall) }, on_interrupt: method(:loop_interrupted))
        @detector = fibers.detector
        return fibers if lane.zero?

        Lanes.new(fibers, ThreadExecutor.new(lane, on_done: method(:job_done)), thread_job: ->(job) { @execution.thread_job?(job) })
      end

      def work(drain:)
        @working = true
        Worker.mark_stopping(self, true) if @stopping # a stop asked before the run
        @draining = drain
        unworkable!(drain ? "run_until_empty" : "run")
        ConnectionBudget.check!(@executor.mode, @executor.capacity)
        boot
        @loop_thread = Thread.current
        @loop_error = nil
        @loop_interrupted = false
        @looping = true # an error from here on ended a running loop (loop_crashed?); one at boot did not
        @executor.run do
          # Beating before the heap settles: a slow boot on a loaded host (these collections) was silence to prune.
          services = [ Thread.new { @outcomes.run }, @heartbeat_thread = Thread.new { @heartbeat.run } ]
          Worker.settle_heap unless @stopping # a stop asked during boot: no job will run, and its collections took seconds
          @detector&.booted
          serve(drain, services)
        end
      rescue Exception => error # rubocop:disable Lint/RescueException -- only noted (for loop_lost's line), and raised on
        @loop_error = error # not `$!` in the ensure: that is also a caller's exception when `run` is called from a rescue
        raise
      ensure
        # A job's Thread.exit or Thread#kill ends a fiber pool's thread (this one) under its loop, perhaps with a claim's
        # statement in flight: the heartbeat finishes for it once the thread is gone (loop_lost). Finished here as well,
        # the two raced, and a beat between this removal of the row and the heartbeat's look registered it again, for good.
        # Not when the process exits under the worker: Ruby is killing the heartbeat too, which then finished nothing.
        finish unless Thread.current.status == "aborting" && @heartbeat_thread&.alive? && Thread.main.alive?
        @working = @looping = false
        Worker.mark_stopping(self, false) # a stop asked as it finished
        @stopping = false # a worker can run again; a stop asked before or during its boot holds (not reset there)
        @wait_ends = nil
        @stop_began = @interrupted = @stop_held_said = false
        @crash = nil
      end

      # A worker claims jobs on connections of its own. Started inside a transaction its caller holds open (a test's;
      # Rails' transactional tests hold one around every test, on a connection they pin), it found none of the jobs
      # enqueued in it (PostgreSQL) or waited on its write lock (SQLite: 25 s, then it returned having run nothing);
      # an in-memory SQLite database is a different, empty one on each connection.
      def unworkable!(call)
        if Record.connection_pool.with_connection(&:transaction_open?)
          raise ConfigurationError, "Bobbin::Worker##{call} inside an open transaction: the worker claims jobs on connections of its own, which do " \
                                    "not see what the transaction has not committed; commit first (a Rails test that runs a worker needs " \
                                    "`self.use_transactional_tests = false`)"
        end
        database = Record.connection_db_config.database.to_s
        return unless Record.connection_db_config.adapter == "sqlite3" && (database == ":memory:" || database.match?(/\Afile:.*(:memory:|mode=memory)/))

        raise ConfigurationError, "Bobbin::Worker##{call} on an in-memory SQLite database: each connection has one of its own, so the worker's " \
                                  "would be empty; use a file (Bobbin.connect(\"sqlite3:tmp/jobs.sqlite3\"))"
      end

      def boot
        @finished = @quieted = false
        @stuck = []
        Record.with_connection { |connection| Schema.check!(connection) }
        record = DatabaseProblem.lasting! { ProcessRecord.register(kind: "worker", name: @name, metadata: status, supervisor_id: @supervisor&.fetch(:id)) }
        Record.load_schemas
        @database_file = Store::DatabaseFile.open if @supervisor.nil? && @owns_process
        @process_id = record.id
        @registration = record.attributes.symbolize_keys.slice(*Store::PROCESS_COLUMNS)
        Instrumentation.instrument(:start_process, process_event)
        @claimer = Claimer.new(self, own_store, @executor)
        Wakeups.subscribe(self)
        @writer = own_store
        @writer.on_back = method(:database_back)
        @outcomes = OutcomeBuffer.new(@writer, @process_id, on_written: method(:outcomes_written))
        @execution = Execution.new(interrupted: @executor.method(:interrupted?), interruptible: @executor.method(:interruptible))
        @stall_log = StallLog.new(@process_id) if @detector
        @heartbeat = Heartbeat.new(self, @writer, supervisor_pid: @supervisor&.fetch(:pid), title: !@supervisor&.fetch(:async),
                                                  maintain: @supervisor.nil?, recurring: !@draining) # a drain adds no jobs of its own
        @heartbeat.beat_now if quiet? # made quiet while booting: the row says so at once
        Bobbin.logger.info("bobbin worker #{@process_id} (pid #{::Process.pid}) started: #{@name}, queues #{@selection}")
        FiberSafety.warnings.each { |line| Bobbin.logger.warn("bobbin worker #{@process_id}: #{line}") } if @detector
        if @executor.mode == :fibers && FiberSafety.connect_through_scheduler!
          # Worded apart from the stall lines ("held the event loop"), which people and tests grep for.
          Bobbin.logger.info("bobbin worker #{@process_id}: Socket.tcp_fast_fallback = false in this process (Ruby's Happy Eyeballs " \
                             "connect does not yield to the fiber scheduler: each connect by host name would stop every fiber)")
        end
      end

      # The heartbeat or an outcome got through after an outage: the claim loop claims now, not at its next try, and the
      # listener reconnects now, not at its own (a job enqueued as the database came back waited for either).
      def database_back
        @waker.wake
        Wakeups.reachable!
      end

      # A store on a session of the worker's own (the claimer's, the writer's).
      def own_store = Store.open(@selection).tap { |store| store.on_new_session = method(:close_idle_job_connections) }

      # One of the worker's own sessions was lost and replaced (an outage, a restart, a session closed while idle): the
      # jobs' idle pooled connections most likely went with it. They are closed now, before the claim or outcome that
      # found the loss goes on: Active Record trusts a connection used in the last verify_timeout seconds without a
      # check, and a job's first statement outside a transaction (an upsert) on one the restart had closed failed the job.
      # A worker whose every slot was busy through a restart claimed nothing then, reconnected quietly, and failed its
      # next jobs that way. Connections in use stay: their jobs see the loss themselves.
      def close_idle_job_connections
        ActiveRecord::Base.connection_handler.connection_pool_list(:all).each(&:flush!)
      rescue StandardError => error
        Bobbin.logger.warn("bobbin worker #{@process_id}: closing the jobs' idle database connections failed: #{error.class}: #{error.message}")
      end

      # A crash suspect's place frees when its outcome is written (Claimer#suspect_free?): the claim loop looks again.
      def outcomes_written = (@waker.wake if @claimer.quarantining?)

      # Claims until stopped, then shuts down. A claim loop that fails (a bug, or a database error that is not an
      # outage) shuts down the same way before the error goes on: running jobs finish, outcomes are written, and only
      # jobs that never started go back to ready. An exception raised into the loop's thread from outside (Ctrl-C into
      # `run`, which leaves signals to its caller; a Timeout around it) is the caller's stop, at once: the running jobs
      # are interrupted and go back to ready with their attempt before it goes on. A thread pool's jobs ran on unowned
      # (killed a second later, and failed for it), and a fiber pool's were failed with the Async::Cancel async gives
      # every task on Interrupt (EventLoop).
      def serve(drain, services)
        claim_loop(drain)
      rescue StandardError => error
        if raised_elsewhere?(error)
          @crash = error
          Bobbin.logger.error("bobbin worker #{@process_id}: stopping, another thread raised into its claim loop: #{error_said(error)}; " \
                              "its jobs go back to ready as a crashed worker's")
        else
          Bobbin.logger.error("bobbin worker #{@process_id}: stopping, its claim loop failed: #{Store.reason(error)}")
        end
        ThreadErrors.report(error, task: "bobbin worker #{@process_id}: claim loop")
        shut_down(services)
        raise
      rescue Exception => error # rubocop:disable Lint/RescueException -- the caller's stop; raised on once it is done
        # Not: an exception raised into a stop already under way (its own ensure finishes the worker), nor the end of the
        # thread or loop under the worker (a job's Thread.exit, or an exception that ended the loop: the loop's close
        # cancels this task too, and the heartbeat finishes for it, Worker#loop_lost).
        raise if @stop_began || Thread.current.status == "aborting" || (error.is_a?(Async::Cancel) && !@loop_interrupted)

        Bobbin.logger.warn("bobbin worker #{@process_id}: #{raised_into(error)} raised into the thread running its loop; " \
                           "stopping at once, its running jobs go back to ready")
        stop(timeout: 0)
        shut_down(services)
        raise
      else
        shut_down(services)
      end

      # A fiber pool's loop got an Interrupt, and async is about to cancel every task on it (EventLoop; also called once
      # the loop has nothing left): the running jobs, a thread lane's too, are named and interrupted first, as at a
      # stop's timeout, so that they go back to ready rather than fail with that Async::Cancel.
      def loop_interrupted
        @loop_interrupted = true
        return if @executor.runners.empty?

        interrupting
        @executor.interrupt_all
      end

      # The exception that stopped the loop from outside, as the log names it: what async cancelled its tasks for (an
      # Interrupt) rather than the Async::Cancel each got.
      def raised_into(error)
        error = error.cause while error.is_a?(Async::Cancel) && error.cause.is_a?(Exception)
        error.is_a?(Interrupt) ? "Interrupt (Ctrl-C: `run` leaves signals to its caller)" : error.class.name
      end

      def claim_loop(drain)
        wait = method(:wait)
        until @stopping
          if @quiet
            rest_quietly
            next
          end
          if @outcomes.failing? # jobs claimed now would end with outcomes kept in memory: healthy workers take them
            wait(1.0)
            next
          end
          @unheard = false # the claim sees what was announced so far, if it looks (job_done checks that it did)
          @full = false
          through = @pacer.horizon(@claimer.database_now) # woken LEAD ahead of a due time: its jobs are claimed now
          jobs = @claiming.synchronize { @claimer.next_jobs(wait: wait, through: through).each { |job| @executor.post(job) { perform(job) } } }
          @pacer.claimed_through(through) if through
          release_lost_wanted if @lost_wanted
          next if @claimer.backlog? || @claimer.unavailable?
          break if drain && jobs.empty? && @executor.busy.zero? && drained?

          idle unless drain && @executor.busy.zero?
        end
      end

      # The heartbeat's release_lost, which found a claim under way: the claim's jobs are the executor's now. With the
      # database gone, the next beat tries again (and the claimer's next claim reconciles).
      def release_lost_wanted
        release_lost
      rescue Store::Unavailable
        nil
      end

      # A quiet worker claims nothing. Once, it hands back the jobs it claimed ahead (queued, not started), so other
      # workers run them now (while the database is down: it tries again each second); then it waits for the stop.
      def rest_quietly
        unless @quieted
          @executor.drop_queued
          released = @claimer.release_all(keep: held_ids, reason: "quiet")
          @quieted = true
          Bobbin.logger.info("bobbin worker #{@process_id} quiet: claiming no more jobs; #{@executor.busy} running go on here until they end (a TERM still gives them shutdown_timeout), " \
                             "#{released} claimed ahead handed back")
        end
        wait(1.0)
      rescue Store::Unavailable => error
        Bobbin.logger.warn("bobbin worker #{@process_id} quiet: could not hand back its queued jobs yet (#{error.message}); retrying")
        wait(1.0)
      end

      # Runs `job` and hands its outcome to the writer (a failure, should working it out raise). A job that ends its
      # own thread or fiber (Thread.exit, Thread#kill, Fiber#kill: no exception, only `ensure` blocks run) fails or
      # retries as if it had raised, instead of staying claimed with no outcome; a thread the executor killed (a job
      # that ignored its interrupt at shutdown) is released instead.
      def perform(job)
        hold(job) if job.due
        outcome = begin
          @execution.call(job)
        rescue StandardError => error # Bobbin's own handling of the job's end failed; the executor's interrupt passes
          raise if @executor.interrupted?(job.id)

          @execution.unhandled(job, error)
        end
        @outcomes << outcome
      ensure
        # Blocking: a killed fiber that waits (its log line, written to a pipe through the fiber scheduler) is ended there
        # by its kill, and the outcome was never handed on (a trial: the row stayed running, then ran again).
        # A job the process's exit killed (its main thread gone) did not end its own thread: it is handed back at the
        # worker's finish, or recovered as a crashed process's (it failed as Bobbin::ThreadKilled, blamed for the exit).
        Fiber.blocking { @outcomes << @execution.killed(job) } if outcome.nil? && $!.nil? && !@executor.interrupted?(job.id) && Thread.main.alive?
      end

      # A job claimed ahead of its run_at (Pacer::LEAD) starts at it, not before (ClaimedJob#due).
      def hold(job)
        left = job.due - Bobbin.monotonic
        sleep(left) if left.positive?
      end

      # Nothing more to claim now: sleep until woken (new work, a freed slot, a stop), a job falls due, or the next poll.
      # Without room, due times wait for a freed slot, which wakes the loop: a job already due would not be claimed.
      # (`@full` is set before room is looked at: a slot freed from then on wakes it. A claim that took fewer jobs than
      # it asked for, the prefetch, yet filled every slot, left the freed slot to wake nobody, and a job due meanwhile
      # waited for the next poll.)
      def idle
        @full = true
        return wait(@pacer.poll_interval) unless room?

        @full = false
        @pacer.refresh(@claimer.database_now) { @claimer.next_run_at }
        wait([ @pacer.idle_wait(@claimer.database_now), @claimer.quarantine_left ].compact.min)
      end

      def room? = @executor.busy < @executor.capacity

      # True once everything is written and nothing was written since the last empty claim (a retry may be due).
      def drained?
        return false unless @outcomes.flush

        (@outcomes.written == @drain_mark).tap { @drain_mark = @outcomes.written }
      end

      # Stop claiming; let jobs finish for shutdown_timeout; interrupt the rest and give them STOP_GRACE to
      # unwind; write outcomes; return to ready only the jobs that have really stopped.
      def shut_down(services)
        @stop_began = true
        @claimer&.store&.deadline = stop_due_at # see stop
        @executor.drop_queued
        stopping if @stopping
        wait_until_idle
        if @executor.busy.positive?
          Bobbin.logger.info("bobbin worker #{@process_id}: #{@hurried} again, interrupting the running jobs now") if @hurried
          interrupting
          @interrupted = true
          @executor.interrupt_all
          wait_until_idle(STOP_GRACE)
          @executor.kill_stuck(fibers: !@owns_process && @supervisor.nil?) # a process of its own (or an async supervisor) exits instead
        end
        @outcomes.stop
        @heartbeat.stop
        # A service still waiting on the database once the stop is due is left behind: a lone worker's heartbeat keeps
        # house on Active Record's session, which a frozen server never answers (the stop waited for it for ever).
        services.each { |service| service.join(stop_due_at && [ stop_due_at - Bobbin.monotonic, 1 ].max) || service.kill }
        @detector&.stop # its last look reports a job that held the loop until just now: counted on its row below, not lost
        @stall_log&.flush(@writer)
        @stuck = @executor.held_ids
        release_unfinished
        abandon(@stuck) if @stuck.any?
      end

      # Names the jobs a stop interrupts, which run again from the start: a ten-minute job cut at 541 s, again and
      # again over a day of deploys, showed only as a count (a trial).
      def interrupting
        jobs = @executor.runners.filter_map { |_runner, id| @executor.job(id) }
        named = jobs.first(NAMED_UP_TO).map { |job| "#{job.class_name} #{job.id}" }.join(", ")
        more = " and #{jobs.size - NAMED_UP_TO} more" if jobs.size > NAMED_UP_TO
        Bobbin.logger.warn("bobbin worker #{@process_id}: interrupting #{jobs.size} running #{'job'.pluralize(jobs.size)} (#{named}#{more}); " \
                           "they go back to their queue and run again from the start")
      end

      # Says a stop began, and why when a signal asked it: a job's `Process.kill("TERM", Process.pid)` stopped a worker
      # with nothing in the log but its "stopped" line (a trial).
      def stopping
        busy = @executor.busy
        waiting = busy.zero? ? "no job running" : "waiting up to #{format("%g", @shutdown_timeout)}s (shutdown_timeout) for #{busy} running #{'job'.pluralize(busy)}"
        Bobbin.logger.info("bobbin worker #{@process_id} stopping#{" on #{@stop_signal}" if @stop_signal}: #{waiting}")
      end

      # Writes the outcomes still held and returns the unfinished jobs to ready. With the database gone, it tries
      # again until shutdown_timeout after the stop began (a job that finished must not run again for want of a few
      # seconds' patience), then stops all the same and says what becomes of its jobs: they stay claimed by this
      # process, and recovery returns them to ready once its last heartbeat is process_alive_threshold old (those
      # whose outcome was not written run again).
      def release_unfinished
        unwritten = flush_outcomes_until(@wait_ends || Bobbin.monotonic + @shutdown_timeout) ? 0 : @outcomes.pending_ids.size
        unwritten_jobs = "#{unwritten} #{'finished job'.pluralize(unwritten)} whose outcome could not be written"
        released = @crash ? recover_crashed(@crash) : @claimer.release_all(keep: unreleasable) # ready, or blocked behind their limit (a trial)
        Bobbin.logger.info("bobbin worker #{@process_id} stopped; #{released} unfinished jobs handed back to run again" \
                           "#{"; #{unwritten_jobs} stay claimed until recovery returns them to ready" if unwritten.positive?}" \
                           "#{"; #{@stuck.size} still running after their interrupt (below)" if @stuck.any?}")
      rescue Store::Unavailable => error
        Bobbin.logger.error("bobbin worker #{@process_id} stopped with the database unavailable (#{error.message}): its unfinished jobs" \
                            "#{" and #{unwritten_jobs}" if unwritten.positive?} " \
                            "stay claimed until recovery returns them to ready, process_alive_threshold after its last heartbeat")
      end

      # Writes the held outcomes, trying again while the database is unavailable until `deadline`; true once written.
      def flush_outcomes_until(deadline)
        delay = 0.1
        until @outcomes.flush
          return false if Bobbin.monotonic + delay > deadline

          if delay == 0.1
            held = @outcomes.pending_ids.size
            Bobbin.logger.warn("bobbin worker #{@process_id} stopping: waiting up to #{(deadline - Bobbin.monotonic).round}s (shutdown_timeout) " \
                               "for the database, to write the outcomes of #{held} #{'finished job'.pluralize(held)}")
          end
          sleep(delay)
          delay = [ delay * 2, 1.0 ].min
        end
        true
      end

      # Waits while jobs run, up to `seconds`, or the shutdown_timeout as it is now (a later QUIT sets it to 0).
      def wait_until_idle(seconds = nil)
        began = Bobbin.monotonic
        while @executor.busy.positive? && (left = began + (seconds || @shutdown_timeout) - Bobbin.monotonic) > 0
          wait([ left, 0.05 ].min)
        end
      end

      # Jobs that ignore their interrupt cannot be returned to ready while they run. A process of its own exits
      # now, its row left in place as a killed worker's is: its supervisor recovers them as it sees the exit (else
      # the host's next process, its pid being gone, or another host once the row is silent). An embedded worker
      # leaves them claimed, its row beating until they end (outlive_stuck; an async supervisor's worker: its
      # supervisor returns them, and exits).
      def abandon(stuck, why = "did not stop within #{STOP_GRACE}s of their interrupt")
        @stuck = stuck
        Bobbin.logger.error("bobbin worker #{@process_id}: jobs #{stuck.join(', ')} #{why}; #{if @owns_process then 'exiting so they can be recovered' elsif @supervisor then 'they stay claimed' else 'they stay claimed, its row beating until they end' end}")
        return unless @owns_process

        finish(stuck_loop: true)
        ::Process.exit!(EXIT_STUCK)
      end

      # `stuck_loop`: called off a loop that will not run again (the heartbeat thread, its stop overdue). The claim
      # loop may be parked inside one of its store's calls, holding that store's lock for good, so the release goes
      # through the writer's store and the claimer's is left to the process's exit.
      def finish(stuck_loop: false)
        return if @finished

        @finished = true
        Worker.mark_stopping(self, false)
        # Past the stop's deadline the listener is not waited for: stuck on a server that does not answer, its wait added
        # 3 s to a worker's exit (a review).
        Wakeups.unsubscribe(self, within: (0 if stop_due_at && Bobbin.monotonic > stop_due_at))
        released = loop_crashed? ? recover_crashed(@loop_error) : @claimer&.release_all(keep: unreleasable, store: (@writer if stuck_loop))
        return outlive_stuck if @stuck.any? && !@owns_process && @supervisor.nil? && !stuck_loop
        return exited_under_it(released) unless Thread.main.alive?

        # A crash's finish comes with the heartbeat still beating: a beat after the row's removal registered it again, and
        # the row outlived the process (CI). A stop's shut_down has stopped it already; loop_lost runs on it.
        stop_heartbeat unless stuck_loop || Thread.current == @heartbeat_thread
        deregister if @process_id && @stuck.empty? # the row names who holds them
        [ (@claimer unless stuck_loop), @writer ].compact.each(&:close)
      rescue StandardError => error
        Bobbin.logger.warn("bobbin worker #{@process_id}: could not deregister (others will recover its jobs): #{error.message}")
      end

      # True when an error ended the loop from outside the claim loop's own rescue, with no stop under way: raised into
      # its thread (a job's thread with Thread.abort_on_exception), or out of the event loop itself. Interrupt and the
      # like are the caller's stop, not a crash; so is an error at boot (the database down as it starts: a warning, not a
      # crash, and no job claimed yet).
      def loop_crashed? = @looping && @loop_error.is_a?(StandardError) && !@stop_began

      # The jobs in flight at such a crash go back as a crashed process's do, counting it (Recovery), so that a job that
      # keeps ending its worker this way is caught and blamed (as a suspect only: the error's thread may have outlived
      # its job, so a job alone in flight is not blamed for it). Handed back as at a stop, they never counted: one job and
      # the 50 beside it crashed the worker at each restart, for good, none of them ever run (a trial). Outcomes first.
      # A thread pool's claim loop runs on the thread such an error is raised into: it stops as when it fails (its jobs
      # given shutdown_timeout), and its unfinished jobs go back so too (release_unfinished).
      # With the database away they stay claimed, for the recovery of a crashed process (its supervisor's, at its exit).
      def recover_crashed(error)
        say_loop_ended if error.equal?(@loop_error) # the heartbeat, stopped before the row goes, does not say it (loop_lost)
        @outcomes&.stop
        @outcomes&.flush
        Recovery.recover(@process_id, "worker #{@process_id} (pid #{::Process.pid}) crashed (#{error_said(error)})", except: unreleasable, lone: false)
      rescue ActiveRecord::ActiveRecordError => failure
        Bobbin.logger.warn("bobbin worker #{@process_id}: could not return its jobs as it crashed (#{Store.reason(failure)}); recovery will")
        0
      end

      # True when `error` was raised in another thread and passed into this one (Thread.abort_on_exception hands the
      # error itself to the main thread): its backtrace is that thread's, without this claim loop in it.
      def raised_elsewhere?(error) = error.backtrace_locations&.none? { |location| location.base_label == "claim_loop" }

      def say_loop_ended
        why = @loop_error ? "by #{error_said(@loop_error)}" : "(a job's Thread.exit or Thread#kill)"
        Bobbin.logger.error("bobbin worker #{@process_id}: the thread running its loop ended #{why}; " \
                            "stopping, the jobs it ran #{@loop_error ? 'go' : 'beside that one go'} back to ready")
      end

      # An error in one line.
      def error_said(error) = "#{error.class}: #{Printable.printable(error.message.to_s.lines.first.to_s.strip[0, 200])}"

      # An embedded worker (no process of its own to exit, no supervisor) whose jobs outlived their interrupt, on threads
      # its kill could not end: its row stays and beats while they run, as a forked worker's process stays until they
      # end. Removed as it returned, the row left them claimed by no process, and the next recovery anywhere ran them
      # again beside their first run (a review). Once they end they go back to ready and the row goes.
      def outlive_stuck
        @claimer.close
        @loop_thread = nil # the heartbeat beats for the jobs now, not for a loop
        @writer.deadline = nil # and for as long as they run: a session lost meanwhile is opened again
        heartbeat = Heartbeat.new(self, @writer, title: false)
        beating = Thread.new { heartbeat.run }
        Thread.new do
          sleep(Heartbeat::TICK) while @executor.held_ids.intersect?(@stuck)
          heartbeat.stop
          beating.join
          released = @claimer.release_all(store: @writer)
          deregister
          Bobbin.logger.info("bobbin worker #{@process_id}: its jobs that outlived their interrupt ended; #{released} handed back, its row removed")
        rescue StandardError => error
          Bobbin.logger.warn("bobbin worker #{@process_id}: could not deregister (others will recover its jobs): #{error.message}")
        ensure
          @writer.close
        end
      end

      # The process exits with this embedded worker still running (a script that returned without `stop`): Ruby has killed
      # its threads, and none can be started (its row's removal waits on one). The jobs it could hand back went back to
      # ready; its row stays, with any job still claimed, for the host's next Bobbin process to recover as a crashed
      # process's. One line, not a ThreadError backtrace from each pool thread and "could not deregister: can't alloc thread".
      def exited_under_it(released)
        left = unreleasable.size
        Bobbin.logger.warn("bobbin worker #{@process_id}: the process exited while it ran (stop it and let #run return first); " \
                           "#{released.to_i} unfinished #{'job'.pluralize(released.to_i)} handed back, its row#{" and #{left} #{'job'.pluralize(left)} still claimed" if left.positive?} " \
                           "left for recovery as a crashed process's")
      end

      # Jobs a release at the stop must leave claimed: those still in the executor's hands (stuck), and finished ones
      # whose outcome is not written (the database failed the flush, or a flush is still writing them).
      def unreleasable = @stuck | @executor.held_ids | (@outcomes&.pending_ids || [])

      def deregister
        ProcessRecord.deregister(@process_id)
        Instrumentation.instrument(:stop_process, process_event)
      end

      def process_event = { process_id: @process_id, kind: "worker", name: @name, pid: ::Process.pid }

      def wait(timeout) = @waker.wait(timeout)
  end
end
