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

      %i[claim finish release hand_back heartbeat reregister reclaim promote next_run_at announce record_stalls].each do |name|
        define_method(name) { |*args, **options| call(name, *args, **options) }
      end

      # Closes the underlying connection.
      def close = @lock.synchronize { @store.close }

      private
        def call(name, *args, **options)
          @lock.synchronize do
            reconnect if @broken
            @store.public_send(name, *args, **options)
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
