# frozen_string_literal: true

module Bobbin
  module Store
    # Serialises a store's calls (fibers and threads share it) and turns lost connections into Unavailable.
    #
    # A session the server closed while it sat idle (idle_session_timeout, a pooler's or proxy's idle timeout such as
    # RDS Proxy's or PgBouncer's client_idle_timeout, pg_terminate_backend) has its goodbye waiting on the socket: a
    # call after IDLE seconds of quiet looks for it first and reconnects before sending anything, so a quiet worker
    # neither logs an outage nor waits a retry for its next claim. Nothing was sent on the closed session, so
    # nothing is in doubt.
    class Guarded
      IDLE = 1.0

      def initialize(store)
        @store = store
        @lock = Mutex.new
        @broken = false
        @used_at = Bobbin.monotonic
      end

      # Each forwards its arguments with `...` and the block: no Array or Hash per call (a claim per job).
      %i[claim finish release hand_back heartbeat reregister reclaim promote next_run_at announce record_stalls].each do |name|
        class_eval("def #{name}(...) = guard(:#{name}) { @store.#{name}(...) }", __FILE__, __LINE__) # def claim(...) = guard(:claim) { @store.claim(...) }
      end

      # The monotonic time by which a stopping worker must be done with the database (nil: no hurry). Past it, a
      # statement waits at most a second more for its answer and a lost session is not opened again: a frozen server
      # held a TERM for as long as each of them (half of process_alive_threshold, then ~20 s of reconnect attempts).
      # Set from a signal handler (no lock).
      attr_reader :deadline

      def deadline=(at)
        @deadline = at
        @store.deadline = at
      end

      # Called (on the calling thread, holding no lock of this store's) after the first call that succeeds following an
      # outage: a worker's claim loop, backing off, claims then, rather than at its next try.
      attr_writer :on_back

      # Called (on the calling thread, holding this store's lock, before the call goes on) once a new session replaced a
      # lost one (an outage, or one the server closed while it sat idle): whatever closed it (a restart, a failover, an
      # idle timeout) most likely closed the idle connections of Active Record's pools too.
      attr_writer :on_new_session

      # Closes the underlying connection.
      def close = @lock.synchronize { @store.close }

      # The database's clock less this host's (a Float read, no lock).
      def clock_offset = @store.clock_offset

      private
        def guard(name)
          back = @broken # read without the lock: at worst one wake more, or one less (the claim loop's backoff still ends)
          @lock.synchronize do
            ended = false
            if @broken || dropped_while_idle?
              reconnect
              @on_new_session&.call
            end
            yield.tap { ended = true }
          rescue StandardError => error
            ended = true
            raise Locked, "#{name} #{Store.lock_waited} (CREATE INDEX without CONCURRENTLY, VACUUM FULL, ALTER TABLE, LOCK TABLE?)" if Store.locked?(error)
            unless Store.outage?(error)
              # Not the database's answer: an error raised into the thread mid-call from outside (a job's thread under
              # Thread.abort_on_exception), which may leave the statement in flight, as a call cut short does (below).
              @broken = true unless Store.database_error?(error)
              raise
            end

            @broken = true
            raise Unavailable, "database unavailable during #{name}: #{Store.reason(error)}"
          ensure
            # Cut short (a Thread#raise, its task stopped, its thread killed: no StandardError), a call may leave its statement
            # in flight, and each call after failed "another command is already in progress" (a fiber job's Thread.exit as
            # its worker claimed: the worker's release at its end failed, and its row stayed). The next opens a new session.
            @broken = true unless ended
            @used_at = Bobbin.monotonic
          end.tap { @on_back&.call if back }
        end

        def dropped_while_idle?
          return false unless Bobbin.monotonic - @used_at >= IDLE && @store.dropped?

          Bobbin.logger.debug { "bobbin: the server closed an idle session; reconnecting" }
          true
        end

        # Opens a new session, waiting for it as for a statement's answer (see PostgreSQL#answer): at most half of
        # process_alive_threshold, and past a deadline (one set meanwhile too) a second more at most (see
        # OwnConnections.bounded). A reconnect under way as a TERM came waited for ever on a frozen server's or pooler's
        # silence, and the worker with it (a review).
        def reconnect
          @broken = true
          raise Unavailable, "database still unavailable, and the worker's stop is due: no new session" if due?

          OwnConnections.bounded(Bobbin.config.process_alive_threshold / 2.0, due: method(:due?)) { @store.reconnect! }
          @broken = false
        rescue Unavailable
          raise
        rescue StandardError => error
          raise Unavailable, "database still unavailable: #{Store.reason(error)}"
        end

        def due? = !@deadline.nil? && Bobbin.monotonic >= @deadline
    end
  end
end
