# frozen_string_literal: true

module Bobbin
  # Where jobs live. Each database has one class holding its hot-path SQL; the rest is Active Record.
  module Store
    # Raised when the database cannot be reached; callers wait and retry, nothing is dropped.
    class Unavailable < Error; end

    CONNECTION_ERRORS = [ ActiveRecord::ConnectionNotEstablished, ActiveRecord::ConnectionFailed ].freeze

    # Opens a store on a new connection of its own (outside the pool the jobs' code uses).
    def self.open(selection)
      db_config = Record.connection_db_config
      Guarded.new(for_adapter(db_config.adapter).new(db_config.new_connection, selection))
    end

    # Inserts new job rows with one statement on the app's connection; returns their ids. The statement goes
    # around Active Record's query cache (two identical enqueues are two jobs) and clears it (later reads see them).
    def self.insert(rows)
      Record.with_connection do |connection|
        ids = connection.uncached { for_adapter(connection.adapter_name).insert(connection, rows) }
        connection.clear_query_cache
        ids
      end
    end

    # The class holding the hot-path SQL for an adapter name.
    def self.for_adapter(name)
      case name.to_s.downcase
      when /postg/ then PostgreSQL
      when /sqlite/ then SQLite
      else raise ConfigurationError, "Bobbin supports PostgreSQL and SQLite, not #{name.inspect}"
      end
    end

    # Serialises a store's calls (fibers and threads share it) and turns lost connections into Unavailable.
    class Guarded
      def initialize(store)
        @store = store
        @lock = Mutex.new
        @broken = false
      end

      %i[claim finish release hand_back heartbeat reregister reclaim].each do |name|
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
