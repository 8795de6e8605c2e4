# frozen_string_literal: true

module Bobbin
  module Store
    # Serialises a store's calls (fibers and threads share it) and turns lost connections into Unavailable.
    class Guarded
      def initialize(store)
        @store = store
        @lock = Mutex.new
        @broken = false
      end

      # Each forwards its arguments with `...` and the block: no Array or Hash per call (a claim per job).
      %i[claim finish release hand_back heartbeat reregister reclaim promote next_run_at announce record_stalls].each do |name|
        class_eval("def #{name}(...) = guard(:#{name}) { @store.#{name}(...) }", __FILE__, __LINE__) # def claim(...) = guard(:claim) { @store.claim(...) }
      end

      # Closes the underlying connection.
      def close = @lock.synchronize { @store.close }

      private
        def guard(name)
          @lock.synchronize do
            reconnect if @broken
            yield
          rescue *driver_errors, *CONNECTION_ERRORS => error
            @broken = true
            raise Unavailable, "database unavailable during #{name}: #{error.class}: #{error.message.lines.first&.strip}"
          end
        end

        def reconnect
          @store.reconnect!
          @broken = false
        rescue StandardError => error
          raise Unavailable, "database still unavailable: #{error.class}: #{error.message.lines.first&.strip}"
        end

        def driver_errors
          errors = []
          errors.push(PG::ConnectionBad, PG::UnableToSend) if defined?(PG::ConnectionBad)
          errors.push(PG::AdminShutdown) if defined?(PG::AdminShutdown)
          errors.push(SQLite3::BusyException) if defined?(SQLite3::BusyException)
          errors
        end
    end
  end
end
