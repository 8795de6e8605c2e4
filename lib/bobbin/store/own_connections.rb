# frozen_string_literal: true

require "active_support/fork_tracker"

module Bobbin
  module Store
    # Bobbin's own database sessions (a worker's claimer and writer, the listener, the SQLite watcher) live outside
    # Active Record's pools, so Active Record does not discard them in a forked child as it does its pooled ones. A
    # process that a job forks would close them as it exits (libpq's goodbye goes down the socket it shares with the
    # parent), and the worker would lose its claim, outcome and LISTEN sessions with every fork. In a child they are
    # forgotten without a word to the server, as Active Record forgets its own.
    module OwnConnections
      @adapters = ObjectSpace::WeakMap.new

      # A new session on `db_config` (an Active Record adapter) that a forked child leaves alone.
      def self.open(db_config)
        db_config.new_connection.tap { |adapter| @adapters[adapter] = true }
      end

      # In a forked child: forgets every session opened in the parent.
      def self.discard!
        adapters = @adapters
        @adapters = ObjectSpace::WeakMap.new
        adapters.each_key(&:discard!)
      end

      ActiveSupport::ForkTracker.after_fork { discard! }
    end
  end
end
