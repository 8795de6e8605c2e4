# frozen_string_literal: true

module Bobbin
  class Supervisor
    # Keeps a supervisor's forks apart from its threads' database calls that a child could not survive.
    #
    # SQLite: a worker forked while another thread of the supervisor was inside a query (its clock or heartbeat
    # waiting on another process's write lock) hung for ever before running any of its code: the sqlite3 gem closes
    # the connections a child inherits, and that connection's mutex was held by a thread the child does not have. The
    # supervisor counted a worker that never ran a job.
    #
    # PostgreSQL: the same with a connect. libpq, on a TCP connection, asks GSSAPI whether the user has Kerberos
    # credentials, and GSSAPI takes a process-wide mutex to do so. A worker forked while another thread of the
    # supervisor was connecting (a heartbeat or recovery after the server closed an idle session) inherited that mutex
    # held, and hung in its own first connect, for ever (a trial: once in ~115 worker kills; a script connecting in a
    # thread as it forked hung 3 of ~570 children). Queries there hold no such lock, so a fork does not wait for
    # a heartbeat held up by a frozen server. It waits for connects under way, at most CONNECT_WAIT, and none starts
    # while it forks. It never skips its turn for them: while the database was down, the supervisor's heartbeat thread,
    # started each turn just before the fork, was always connecting, and a worker that died was not started again
    # until the database was back (CI's outage tests).
    class ForkLock
      # Seconds a fork waits for connects under way (they fail at once while a server is down; one to a host that does
      # not answer could take connect_timeout, and the fork goes ahead after this).
      CONNECT_WAIT = 0.25

      class << self
        # The lock PostgreSQL connects in this process count with (nil: none).
        attr_accessor :current
      end

      # Counts an Active Record PostgreSQL adapter's connects with ForkLock.current: `reconnect` is where every one
      # happens (a reset, or `connect` for a new session; Active Record 7.2 and 8.1 call `connect` nowhere else).
      module Connects
        private
          def reconnect(...) = ForkLock.connecting { super }
      end

      # Runs the block, a connect, outside any fork of this process's supervisor.
      def self.connecting(&)
        lock = current
        lock ? lock.counted(&) : yield
      end

      # `forks`: the supervisor forks its workers (in async mode they are threads, and nothing needs keeping apart).
      def initialize(forks:, adapter: Record.connection_db_config.adapter, connect_wait: CONNECT_WAIT)
        sqlite = adapter == "sqlite3"
        @queries = forks && sqlite
        @connect_wait = connect_wait
        @pid = ::Process.pid
        @lock = Mutex.new
        @idle = ConditionVariable.new
        @busy = 0
        # The sqlite3 gem closes the writable connections a worker inherits (which this lock makes safe) and warns, at
        # each fork, that it is "unsafe … possible data corruption". Active Record 8 silences that warning; on 7.2 it
        # was printed as every worker started.
        SQLite3::ForkSafety.suppress_warnings! if forks && sqlite && defined?(SQLite3::ForkSafety)
        watch_connects if forks && !sqlite
      end

      # Runs the block, a thread's database work, outside any fork (SQLite).
      def querying(&)
        @queries ? counted(&) : yield
      end

      # Runs the block with forks held off until it ends (in this process: a child's copy of the lock counts nothing).
      def counted
        return yield unless ::Process.pid == @pid

        @lock.synchronize { @busy += 1 }
        begin
          yield
        ensure
          @lock.synchronize { (@busy -= 1).zero? && @idle.broadcast }
        end
      end

      # Yields (to fork), holding off any query (SQLite) or connect (PostgreSQL) that would start meanwhile. SQLite:
      # not while a thread is inside a query (the caller tries again on its next turn). PostgreSQL: once the connects
      # under way have ended, or after connect_wait.
      def quietly
        @lock.synchronize do
          next(yield if @busy.zero?) if @queries

          deadline = Bobbin.monotonic + @connect_wait
          while @busy.positive? && (left = deadline - Bobbin.monotonic).positive?
            @idle.wait(@lock, left)
          end
          yield
        end
      end

      private
        def watch_connects
          return unless defined?(ActiveRecord::ConnectionAdapters::PostgreSQLAdapter)

          adapter = ActiveRecord::ConnectionAdapters::PostgreSQLAdapter
          adapter.prepend(Connects) unless adapter <= Connects
          ForkLock.current = self
        end
    end
  end
end
