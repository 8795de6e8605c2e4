# frozen_string_literal: true

require "active_support/fork_tracker"

module Bobbin
  module Store
    # Bobbin's own database sessions (a worker's claimer and writer, the listener, the SQLite watcher) live outside
    # Active Record's pools, so Active Record does not discard them in a forked child as it does its pooled ones. A
    # process that a job forks would close them as it exits (libpq's goodbye goes down the socket it shares with the
    # parent), and the worker would lose its claim, outcome and LISTEN sessions with every fork. In a child they are
    # forgotten without a word to the server, as Active Record forgets its own.
    #
    # On PostgreSQL they also run with KEEPALIVE: libpq's defaults leave a session to a host that vanished (a
    # crashed database host, a failover to another address, a cut network) waiting ~15 minutes for a lost packet
    # and 2 hours for an answer, with the worker's claims or outcome writes stuck behind it.
    module OwnConnections
      # libpq settings of these sessions (a database config's own values win): the kernel gives up on a peer that
      # stops acknowledging within seconds, and the worker retries on a new session.
      KEEPALIVE = { connect_timeout: 5, keepalives: 1, keepalives_idle: 5, keepalives_interval: 2, keepalives_count: 3,
                    tcp_user_timeout: 10_000 }.freeze

      # Session settings of these sessions, over the database's, the role's and the config's: Bobbin's statements are
      # written for READ COMMITTED (SKIP LOCKED claims, guarded updates). Under a role's `default_transaction_isolation
      # = 'serializable'` claims failed with serialization errors that crashed the worker, and outcomes of jobs that
      # had succeeded were recorded as failed (a trial).
      SESSION = { default_transaction_isolation: "read committed" }.freeze

      @adapters = ObjectSpace::WeakMap.new

      # A new session on `db_config` (an Active Record adapter) that a forked child leaves alone. On PostgreSQL it
      # connects now: left to its first statement, the writer's session connected as the first jobs finished, and a job
      # forking meanwhile had a child that knew the connection before its adapter did, did not forget it, and closed it
      # as it exited (the fork test's flake, now and then in CI: the worker's outcome session lost).
      #
      # With `within` (seconds), the connect waits at most that long (see .bounded) and its failures are raised.
      def self.open(db_config, within: nil)
        postgresql = Store.postgresql?(db_config)
        db_config = for_bobbin(db_config) if postgresql
        db_config.new_connection.tap do |adapter|
          @adapters[adapter] = true
          next unless postgresql

          within ? bounded(within) { adapter.connect! } : connect(adapter)
        rescue ActiveRecord::ConnectionNotEstablished
          begin
            adapter.disconnect!
          rescue StandardError
            nil
          end
          raise
        end
      end

      # Refused (the database went away, or turned the role away, since the process registered), the session connects
      # on its first statement instead, whose caller rides out an outage as it does any.
      def self.connect(adapter)
        adapter.connect!
      rescue ActiveRecord::ActiveRecordError
        nil
      end

      # Runs the block (a connect or reconnect: Active Record's own statements on connect included, SET
      # client_min_messages and the type map's queries, which a session a frozen server, pooler or proxy accepted never
      # answers) for at most `within` seconds, and less once `due` returns true (asked each second: a stopping worker's
      # deadline). It runs on a thread of its own, killed when it is given up (the caller closes the session, or opens
      # it again), and ActiveRecord::ConnectionNotEstablished says how long it waited and why it stopped. Returns the
      # block's value.
      def self.bounded(within, due: -> { false }, &connect)
        opening = Thread.new(&connect)
        opening.report_on_exception = false
        started = Bobbin.monotonic
        until opening.join([ within, 1.0 ].min)
          stop_due = due.call
          next unless (waited = Bobbin.monotonic - started) >= within || stop_due

          opening.kill.join(1)
          raise ActiveRecord::ConnectionNotEstablished, "no new session within #{format('%g', waited.round(1))}s " \
                                                        "(#{stop_due ? "the worker's stop is due" : 'a server, pooler or proxy that accepted the connection and stopped answering?'})"
        end
        opening.value
      end

      # Each is one session, not a pool: the pool's size goes. Active Record checks a database URL's config before it
      # merges the URL's ?pool= into it, so ?pool= beside database.yml's max_connections: (Rails 8.1's) passes there but
      # was refused here ("Ambiguous configuration"), and every worker stopped at boot (a trial).
      def self.for_bobbin(db_config)
        config = KEEPALIVE.merge(db_config.configuration_hash.except(:pool, :max_connections, :min_connections))
        config[:variables] = (config[:variables] || {}).to_h.transform_keys(&:to_sym).merge(SESSION)
        ActiveRecord::DatabaseConfigurations::HashConfig.new(db_config.env_name, db_config.name, config)
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
