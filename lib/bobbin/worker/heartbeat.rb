# frozen_string_literal: true

module Bobbin
  class Worker
    # Every heartbeat_interval: tells the database this process is alive and how busy it is, and (the elected
    # worker among those without a supervisor) runs the host's Maintenance, also at boot and within a second while
    # it is behind. Every second: stops the worker if its supervisor is gone or its stop is overdue, puts back its signal
    # handlers if a job replaced them, and writes the
    # stalls its jobs caused to their rows, and beats while a job holds the event loop. Runs on a thread of its own,
    # so a job that blocks the event loop cannot make its live process look dead.
    class Heartbeat
      TICK = 1.0

      # `recurring`: whether the housekeeping it may do includes enqueuing recurring tasks (not while draining).
      def initialize(worker, store, supervisor_pid: nil, title: true, maintain: false, recurring: true, interval: Bobbin.config.heartbeat_interval)
        @maintain = maintain
        @recurring = recurring
        @title = title
        @worker = worker
        @store = store
        @supervisor_pid = supervisor_pid
        @interval = interval
        @outage = OutageLog.new("bobbin worker #{worker.process_id}: heartbeat")
        @reclaims = OutageLog.new("bobbin worker #{worker.process_id}: taking back its recovered jobs")
        @lost = OutageLog.new("bobbin worker #{worker.process_id}: returning the jobs of its lost claims")
        @signal = Thread::Queue.new
      end

      # Beats until `stop`.
      def run
        title
        beat_now # the row's registration is its last beat until this one: no interval more of silence at boot
        maintain_at = maintain
        last = Bobbin.monotonic
        until (signal = @signal.pop(timeout: [ TICK, @interval ].min)) == :stop
          break @worker.loop_lost unless @worker.loop_alive?

          begin
            orphaned! if @supervisor_pid && ::Process.ppid != @supervisor_pid
            @worker.exit_if_stop_overdue
            @worker.guard_signals
            @worker.stop_if_database_replaced
            @worker.stall_log&.flush(@store)
            if signal == :beat || Bobbin.monotonic - last >= @interval || stall_to_show?
              last = Bobbin.monotonic
              beat
            end
            maintain_at = maintain if Bobbin.monotonic >= maintain_at
          rescue StandardError => error
            failed(error)
          end
        end
      ensure
        @clock&.stop
        Maintenance.forget("worker #{@worker.process_id}") if @maintain
      end

      # Makes `run` return.
      def stop = @signal << :stop

      # Beats now, not at the next interval: the process row shows a change of state (quiet) at once. Safe in a trap.
      def beat_now = @signal << :beat

      private
        def title
          status = @worker.status
          return status unless @title

          ::Process.setproctitle("bobbin worker #{status[:name]} [#{status[:queues]}] #{status[:busy]}/#{status[:capacity]}")
          status
        end

        # Beats; a live worker pruned as dead registers again, and every beat takes back the held jobs a
        # recovery returned to ready (the pruner may delete the row and recover a moment after a beat).
        def beat
          status = title
          metadata = ProcessRecord.metadata_json(status)
          registered = @store.heartbeat(@worker.process_id, metadata, status.values_at(:loop_lag_ms, :max_loop_lag_ms, :stalls))
          @store.reregister(@worker.process_id, @worker.registration.merge(metadata: metadata)) unless registered
          Recovery.beat!
          held = @worker.held_attempts
          kept = held.empty? ? 0 : reclaim(held)
          release_lost
          @outage.succeeded
          return if registered && kept.zero?

          Bobbin.logger.warn("bobbin worker #{@worker.process_id}: pruned as dead while alive; " \
                             "#{registered ? '' : 'registered again and '}took back #{kept} of its jobs")
        rescue Store::Unavailable => error
          Recovery.unreachable! # every process's beats failed too: silences are not trusted for a while
          @outage.failed(error)
        end

        # Takes back held jobs a recovery returned to ready; returns how many. A table lock makes it wait (logged as its
        # own task: the beat itself went through) until the next beat.
        def reclaim(held)
          @store.reclaim(@worker.process_id, held).tap { @reclaims.succeeded }
        rescue Store::Locked => error
          @reclaims.failed(error)
          0
        end

        # Returns to ready the rows claimed for this worker that it never took (Worker#release_lost). A table lock makes
        # it wait, logged as its own task, until the next beat.
        def release_lost
          @worker.release_lost(@store).tap { @lost.succeeded }
        rescue Store::Locked => error
          @lost.failed(error)
        end

        # True while a job holds the event loop past the stall threshold, and once more after it let go: the process
        # row (the dashboard's processes page) shows the loop's lag each second of a stall, and its end, not up to a
        # heartbeat_interval late.
        def stall_to_show?
          stalled = @worker.detector&.stalled? || false
          (stalled || @stalled).tap { @stalled = stalled }
        end

        # The elected worker keeps house: the heartbeat's services now, the Clock's on their own timing. Returns when
        # to look again: after Maintenance's own wait when elected, else at the next beat.
        def maintain
          return Bobbin.monotonic + @interval unless @maintain && Maintenance.quietly { Maintenance.elected?(@worker.process_id) }

          wait = Maintenance.run("worker #{@worker.process_id}")
          @clock ||= Maintenance::Clock.start("worker #{@worker.process_id}", scheduler: (Recurring::Scheduler.new if @recurring))
          Bobbin.monotonic + wait
        rescue ActiveRecord::ActiveRecordError => error
          Maintenance.skipped("worker #{@worker.process_id}", error)
          Bobbin.monotonic + @interval
        end

        # An error that is not an outage (those are handled where they happen): logged, and the next tick goes on.
        # A heartbeat thread that ended would leave a live worker claiming jobs while others judge it dead.
        def failed(error)
          OutageLog.error("bobbin worker #{@worker.process_id}: heartbeat", error, "trying again in #{[ TICK, @interval ].min}s")
        end

        def orphaned!
          Bobbin.logger.warn("bobbin worker #{@worker.process_id}: supervisor #{@supervisor_pid} is gone; stopping")
          @supervisor_pid = nil
          @worker.stop
        end
    end
  end
end
