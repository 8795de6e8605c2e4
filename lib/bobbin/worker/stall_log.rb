# frozen_string_literal: true

module Bobbin
  class Worker
    # What becomes of each stall the detector reports: a `stall.bobbin` event, one log line (at most one a second;
    # the ones left out are counted in the next), and a count on the job's row (stalls, longest_stall_ms), written
    # by the heartbeat thread within a second. A class that keeps stalling the loop is told about `runs_on: :thread`.
    class StallLog
      # Stalls of one class after which the log line suggests the thread lane.
      REPEAT = 3

      def initialize(process_id, logger: Bobbin.logger)
        @process_id = process_id
        @logger = logger
        @lock = Mutex.new
        @pending = {}
        @by_class = Hash.new(0)
        @skipped = 0
        @logged_at = nil
      end

      # Records `stall` (a StallDetector::Stall).
      def <<(stall)
        Instrumentation.instrument(:stall, stall.to_h.merge(process_id: @process_id))
        repeats = @lock.synchronize do
          count, longest = @pending.fetch(stall.id, [ 0, 0 ])
          @pending[stall.id] = [ count + 1, [ longest, stall.duration_ms ].max ]
          @by_class[stall.class_name] += 1
        end
        log(stall, repeats)
      end

      # Writes the job rows' stall counts through `store`; keeps them for the next try when the database is away.
      def flush(store)
        pending = @lock.synchronize { @pending.tap { @pending = {} } }
        store.record_stalls(pending) if pending.any?
      rescue Store::Unavailable
        @lock.synchronize { @pending = pending.merge(@pending) { |_id, (a, b), (c, d)| [ a + c, [ b, d ].max ] } }
      end

      private
        def log(stall, repeats)
          now = Bobbin.monotonic
          skipped = @lock.synchronize do
            if @logged_at && now - @logged_at < 1
              @skipped += 1
              nil
            else
              @logged_at = now
              @skipped.tap { @skipped = 0 }
            end
          end
          return if skipped.nil?

          @logger.warn("bobbin: #{stall.class_name || 'a job'} #{stall.id} held the event loop #{stall.duration_ms.round}ms " \
                       "at #{stall.location}#{on_the_clock(stall)}#{hint(stall, repeats)}#{" (#{skipped} more stalls not logged)" if skipped.positive?}")
        end

        # The loop was held longer than the job is blamed for where it waited for a CPU (a busy host) or for another
        # thread of the process: every other fiber waited that long too, and the line read as half the stall (a trial).
        def on_the_clock(stall)
          wall = stall.wall_ms.to_f
          " (#{wall.round}ms on the clock, the rest waiting for a CPU or another thread)" if wall - stall.duration_ms >= 100
        end

        def hint(stall, repeats)
          return "" if repeats < REPEAT || stall.class_name.nil?

          "; #{stall.class_name} has stalled the loop #{repeats} times: if it calls blocking code, " \
            "give it `runs_on: :thread` (bobbin_options, or bobbin_runs_on :thread for Active Job)"
        end
    end
  end
end
