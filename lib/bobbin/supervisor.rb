# frozen_string_literal: true

require_relative "supervisor/fork_lock"
require_relative "supervisor/slot"

module Bobbin
  # `bobbin start`: runs every configured pool process (forked, or as threads with mode: :async), restarts any
  # that die, recovers their jobs, and stops them all on TERM/INT/HUP (graceful) or QUIT (immediate). TSTP makes every
  # worker quiet (Worker#quiet) and stops restarts, until the stop. TTIN has every worker log where its jobs are.
  class Supervisor
    # HUP (a closed terminal, a dropped ssh session) is TERM's graceful stop: Ruby's default ended every process at once,
    # the running jobs left to recovery without shutdown_timeout (a review).
    SIGNALS = %w[TERM INT HUP QUIT].freeze
    # Signals that, again during a graceful stop, are the same stop arriving twice (see wait_for_workers).
    REPEATS = %w[TERM HUP].freeze
    # Seconds past shutdown_timeout before stuck workers are killed: longer than a worker's own stop grace,
    # so a worker can write its outcomes and hand its jobs back itself.
    KILL_GRACE = Worker::STOP_GRACE + 5

    def initialize(pools = Bobbin.config.pools, mode: :fork)
      raise ConfigurationError, "mode must be fork or async, got #{mode.inspect}" unless %i[fork async].include?(mode.to_sym)

      @pools = pools
      @mode = mode.to_sym
      @slots = pools.flat_map { |pool| Array.new(pool.processes) { |index| Slot.new(pool, index) } }
      @signal_reader, @signal_writer = IO.pipe
      @unrecovered = {}
      @outage = OutageLog.new("bobbin supervisor: heartbeat")
      @recoveries = OutageLog.new("bobbin supervisor: returning the jobs of workers that exited")
    end

    # Runs until a stop signal; returns after every worker has stopped, with the status to exit with: 0, or
    # Store::DatabaseFile::EXIT_REPLACED when it stopped because its SQLite file was replaced. `held_signals` came
    # before its traps (`bobbin start` booting the app: CLI#hold_signals), and are acted on as its first.
    def start(held_signals: [])
      ConnectionBudget.check_pools!(@pools, @mode)
      Worker::FiberExecutor.check_pools!(@pools, @mode) # before forking, not in each child
      @process = DatabaseProblem.lasting! { ProcessRecord.register(kind: "supervisor", name: "supervisor", metadata: { mode: @mode, pools: @pools.map(&:to_s) }) }
      Record.load_schemas # before the workers fork, so they and the supervisor's housekeeping have them
      ConnectionBudget.warn_server(@pools, @mode, "bobbin supervisor") # PostgreSQL's max_connections cannot hold what they may open
      trap_signals
      held_signals.each { |signal| @signal_writer.write_nonblock("#{signal}\n", exception: false) }
      Instrumentation.instrument(:start_process, process_event)
      @fork_lock = ForkLock.new(forks: @mode == :fork)
      @clock = Maintenance::Clock.start("supervisor", guard: @fork_lock)
      @database_file = Store::DatabaseFile.open
      Bobbin.logger.info("bobbin supervisor #{::Process.pid} (#{@mode}) starting #{@slots.size} workers: #{@pools.map(&:to_s).join('; ')}")
      signal = supervise
      shut_down(signal)
      leave_stuck_threads if @mode == :async
      @exit_status || 0
    ensure
      wind_up
    end

    private
      def supervise
        beat_at = 0
        loop do
          start_due unless @quiet || @signal_reader.wait_readable(0) # a stop waits: no fork for it
          case (signal = next_signal(turn))
          when nil then nil
          when Worker::QUIET_SIGNAL then quiet
          when Worker::Backtraces::SIGNAL then dump
          else return signal
          end

          reap
          return database_replaced if @database_file&.replaced?

          beat_at = beat_aside(beat_at)
          @signal_guard.check
          ::Process.setproctitle("bobbin supervisor [#{@slots.count(&:running?)}/#{@slots.size} workers]")
        end
      end

      # Seconds this loop waits for a signal: a second, or a quarter of heartbeat_interval when that is shorter. Its beats
      # start on its turns: with a turn of a second and heartbeat_interval 1 s or less, two beats were more than two
      # intervals apart, which Recovery.beat! takes for this process cut off from the database, and the supervisor trusted
      # no silence: another host that died kept its jobs running for good.
      def turn = [ 1.0, Bobbin.config.heartbeat_interval / 4.0 ].min

      # Its SQLite file replaced, every process here works on in the old one: all stop (gracefully), and `bobbin start`
      # exits EXIT_REPLACED for the process manager to start it again on the file at the path.
      def database_replaced
        Bobbin.logger.error("bobbin supervisor: #{Store::DatabaseFile.replaced(@database_file.path)}: stopping every worker " \
                            "and exiting #{Store::DatabaseFile::EXIT_REPLACED}, to be started again on the file there now; " \
                            "#{Store::DatabaseFile::BEFORE_RESTART}")
        @exit_status = Store::DatabaseFile::EXIT_REPLACED
        "its database file replaced"
      end

      # Every worker stops claiming (running jobs finish) and none is restarted: the supervisor waits for the stop.
      def quiet
        return if @quiet

        @quiet = true
        Bobbin.logger.info("bobbin supervisor: #{Worker::QUIET_SIGNAL}, workers quiet: no new jobs, none restarted, until TERM")
        @slots.each(&:quiet)
      end

      # Each worker process logs its own dump; in async mode the workers are this process's threads.
      def dump
        return Worker::Backtraces.log_later(@slots.filter_map(&:worker)) if @mode == :async

        @slots.each(&:dump)
      end

      def process_event = { process_id: @process.id, kind: "supervisor", name: "supervisor", pid: ::Process.pid }

      # Starts the workers due to (re)start, each when no thread of this process is inside an SQLite call (ForkLock).
      def start_due
        @slots.each { |slot| @fork_lock.quietly { slot.start(identity) } if slot.due? }
      end

      def identity = { id: @process.id, pid: (::Process.pid if @mode == :fork), async: @mode == :async }

      def reap
        reap_adopted if @mode == :fork
        @slots.each do |slot|
          pid = slot.pid
          status = slot.exited
          next unless status

          Bobbin.logger.warn("bobbin supervisor: worker #{slot} exited (#{status})") unless @stopping
          @unrecovered[pid] = status if pid
        end
        recover_aside
      end

      # Waits for every child that has exited, not only its workers: as a container's main process (pid 1, no `tini`), or a
      # subreaper, it adopts the processes its jobs leave behind (`system("cmd &")`), and those it never waited for stayed
      # zombies, one more at each such job, until the container ran out of pids. A worker's status goes to its slot. Not in
      # async mode, whose jobs run in this process and wait for their own children.
      def reap_adopted
        while (pid, status = ::Process.wait2(-1, ::Process::WNOHANG))
          @slots.find { |slot| slot.pid == pid }&.reaped(status)
        end
      rescue Errno::ECHILD
        nil
      end

      # Returns the jobs of the workers that exited on a thread of its own, as beat_aside beats: in this loop, a recovery
      # waiting on a server that answers nothing (frozen, or a network that drops packets) held up TERM for as long, and
      # the other workers were never told to stop (a review). One round at a time; what it could not do is tried again
      # at the next turn.
      def recover_aside
        return if @unrecovered.empty? || @recovering&.alive?

        exited = @unrecovered.dup
        @recovering = Thread.new do
          @fork_lock.querying { exited.each { |pid, status| @unrecovered.delete(pid) if recover(pid, status) } }
        end
      end

      # At the stop: the recovery under way, then one more round for the workers that exited meanwhile, within `seconds`.
      def recover_before_exit(seconds)
        deadline = Bobbin.monotonic + seconds
        2.times do
          recover_aside
          break unless @recovering&.join([ deadline - Bobbin.monotonic, 0 ].max)
        end
      end

      # A worker that exited is known dead: its jobs go back now, or on every later tick while the database is down (or
      # a lock on Bobbin's tables lasts). Said as an outage is (OutageLog): a line each second for each worker that exited
      # meanwhile, each restart that found the database down adding one, made most of the log of an outage (a review).
      def recover(pid, status)
        Store.waiting_briefly_for_locks { Recovery.process_exited(pid, status, supervisor_id: @process.id) }
        @recoveries.succeeded
        true
      rescue ActiveRecord::ActiveRecordError => error
        @recoveries.failed(error) unless @stopping
        false
      end

      # Beats on a thread of its own, and returns when the next beat is due: what the last one answered, once it is
      # done. In this loop, a heartbeat waiting for the database (a lock on bobbin_processes, a frozen server) held up
      # TERM, reaping and restarts for as long: 18 s of a 20 s lock, the workers told to stop that late (a review).
      def beat_aside(beat_at)
        if @beating && !@beating.alive?
          beat_at = @beating.value
          @beating = nil
        end
        @beating = Thread.new { @fork_lock.querying { beat } }.tap { |thread| thread.report_on_exception = false } if @beating.nil? && Bobbin.monotonic >= beat_at
        beat_at
      end

      # Beats and runs the host's Maintenance (its workers leave it to the supervisor); returns when to come back:
      # within a second while the database is unavailable or retention is behind.
      def beat
        heartbeat
        Bobbin.monotonic + Maintenance.run("supervisor")
      rescue ActiveRecord::ActiveRecordError => error
        Recovery.unreachable! if Store.outage?(error)
        @outage.failed(error)
        Bobbin.monotonic + Maintenance::SOON
      end

      # Writes the heartbeat. A supervisor pruned as dead while alive (its host stalled past the threshold)
      # registers again under its id, as a worker does.
      def heartbeat
        Maintenance.quietly do
          now = ProcessRecord.now
          next unless ProcessRecord.where(id: @process.id).update_all(last_heartbeat_at: now).zero?

          ProcessRecord.insert(@process.attributes.merge("last_heartbeat_at" => now)) # skips the row should it be back meanwhile
          Bobbin.logger.warn("bobbin supervisor #{::Process.pid}: pruned as dead while alive; registered again")
        end
        Recovery.beat!
        @outage.succeeded
      end

      # What every exit does, the one past stuck threads too: stop the clock, remove the row, say so. The clock's pass
      # under way and the row's DELETE wait for the database together: one after the other, a frozen server held the
      # exit for both waits (a review). With the row left behind the database is not answering, and the clock is not
      # waited for at all.
      def wind_up
        started = Bobbin.monotonic
        @clock&.stop_soon
        removed = @process && deregister
        @clock&.stop(removed == false ? 0 : [ Maintenance::Clock::STOP_WAIT - (Bobbin.monotonic - started), 0 ].max)
        Instrumentation.instrument(:stop_process, process_event) if @process
      end

      # Removes this supervisor's row as it exits; with the database unreachable (or not answering: a frozen server
      # held the exit until it thawed) the row stays, and is pruned process_alive_threshold after its last heartbeat.
      # True once removed, false when the database did not let it.
      def deregister
        @beating&.join(1) || @beating&.kill # a beat after the delete would put the row back
        ProcessRecord.deregister(@process.id)
        true
      rescue ActiveRecord::ActiveRecordError, Store::Unavailable => error
        Bobbin.logger.warn("bobbin supervisor #{::Process.pid}: stopped with the database unavailable (#{Store.reason(error)}); " \
                           "its row is pruned #{format("%g", Bobbin.config.process_alive_threshold)}s after its last heartbeat")
        false
      end

      def shut_down(signal)
        graceful = signal != "QUIT"
        @stopping = true
        Bobbin.logger.info("bobbin supervisor: #{signal}, stopping workers #{graceful ? 'gracefully' : 'now'}")
        @slots.each { |slot| slot.stop(graceful: graceful) }
        stopped_at = Bobbin.monotonic
        wait_for_workers(stopped_at + (graceful ? Bobbin.config.shutdown_timeout : 0) + KILL_GRACE, graceful)
        kill_overdue(Bobbin.monotonic - stopped_at)
        reap
        # As long as its row's DELETE may take: KILL_GRACE, past workers that had already given up on a frozen server,
        # made its exit 10 s longer for a recovery that would not be answered either (a review). A database that answers
        # returns their jobs in milliseconds.
        recover_before_exit(ProcessRecord::DEREGISTER_WAIT)
        left_to_recovery
      end

      # Worker processes still running at the stop's deadline are killed, each named: one that never began its stop (a job
      # had trapped its TERM) was killed without a word, as if it had stopped. Async mode's threads: leave_stuck_threads.
      def kill_overdue(waited)
        overdue = @slots.select { |slot| slot.pid && slot.alive? }
        if overdue.any?
          Bobbin.logger.error("bobbin supervisor: worker #{overdue.join(', ')} still running #{waited.round}s after the stop " \
                              "(shutdown_timeout + #{KILL_GRACE}s); killing #{overdue.one? ? 'it' : 'them'}: their running jobs go back to ready")
        end
        overdue.each(&:kill)
      end

      # Waits until every worker has ended or `deadline`, beating meanwhile: a long graceful stop must not look
      # like a dead supervisor to the other hosts. Beats go on a thread of their own, so a database that does not
      # answer cannot hold the wait past its deadline.
      # QUIT meanwhile, or INT again (a second Ctrl-C), stops them now, as QUIT does. TERM or HUP again does not: systemd
      # signals every process of the unit, Puma's plugin sends its own TERM once Puma has stopped, and a closed terminal
      # sends HUP to the whole group. TTIN still has
      # every worker log where its jobs are (a slow stop is when an operator asks; it was read and dropped: a review).
      def wait_for_workers(deadline, graceful = false)
        beat_at = Bobbin.monotonic + Bobbin.config.heartbeat_interval
        until @slots.none?(&:alive?) || Bobbin.monotonic > deadline
          again = next_signal(0.05)
          dump if again == Worker::Backtraces::SIGNAL
          if graceful && SIGNALS.include?(again)
            next Bobbin.logger.info("bobbin supervisor: #{again} while stopping gracefully; QUIT (or INT again) stops workers now") if REPEATS.include?(again)

            Bobbin.logger.info("bobbin supervisor: #{again} while stopping, stopping workers now")
            @slots.each { |slot| slot.stop(graceful: false) }
            deadline = [ deadline, Bobbin.monotonic + KILL_GRACE ].min
            graceful = false
          end
          next if Bobbin.monotonic < beat_at || @beating&.alive?

          beat_at = Bobbin.monotonic + Bobbin.config.heartbeat_interval
          @beating = Thread.new do
            heartbeat
          rescue ActiveRecord::ActiveRecordError => error
            @outage.failed(error)
          end
        end
      end

      # Async mode: worker threads still running after the stop's deadline (a fiber job that ignores its interrupt)
      # cannot be killed for certain, and Ruby would wait for them at exit, for ever; nor can the job thread a worker
      # left behind as it stopped (a thread pool's job in a C call: the process waited for the call to return, its job
      # claimed by a row the worker had removed). Their jobs go back now, as a killed worker process's do (the crash
      # counts against them), and the process exits at once with Worker::EXIT_STUCK.
      def leave_stuck_threads
        stuck = @slots.select { |slot| slot.alive? || slot.worker&.stuck? }
        return if stuck.empty?

        Bobbin.logger.error("bobbin supervisor: worker #{stuck.map(&:name).join(', ')} did not stop within " \
                            "shutdown_timeout + #{KILL_GRACE}s; exiting without them, their jobs returned to ready")
        stuck.each { |slot| slot.worker&.stop_heartbeat }
        stuck.filter_map { |slot| slot.worker&.process_id }.each do |id|
          Recovery.recover(id, "its worker thread did not stop") if ProcessRecord.where(id: id).delete_all == 1
        rescue ActiveRecord::ActiveRecordError => error
          Bobbin.logger.warn("bobbin supervisor: could not return the jobs of worker #{id} (#{Store.reason(error)}); recovery will")
        end
        wind_up
        [ $stdout, $stderr ].each(&:flush)
        ::Process.exit!(Worker::EXIT_STUCK)
      end

      # Workers whose jobs could not be given back as they exited (the database unreachable): said once, plainly.
      def left_to_recovery
        return if @unrecovered.empty?

        Bobbin.logger.warn("bobbin supervisor: the jobs of the worker#{'s' if @unrecovered.size > 1} with pid #{@unrecovered.keys.join(', ')} go back to ready once the " \
                           "database is back and their rows are #{format("%g", Bobbin.config.process_alive_threshold)}s silent (another process recovers them)")
      end

      # In a worker forked from here, until its own traps are in, these handlers hold the signal for it (Slot.held).
      # Kept in by the loop (SignalGuard): in async mode jobs run in this process, and one may trap a signal.
      def trap_signals
        supervisor = ::Process.pid
        @signal_guard = SignalGuard.new("bobbin supervisor", [ *SIGNALS, Worker::QUIET_SIGNAL, Worker::Backtraces::SIGNAL ].to_h do |signal|
          [ signal, proc { ::Process.pid == supervisor ? @signal_writer.write_nonblock("#{signal}\n", exception: false) : Slot.held << signal } ]
        end)
      end

      def next_signal(timeout)
        return unless @signal_reader.wait_readable(timeout)

        @signal_reader.gets&.strip
      end
  end
end
