# frozen_string_literal: true

module Bobbin
  class Supervisor
    # Keeps a supervisor's forks apart from its threads' SQLite calls. A worker forked while another thread of the
    # supervisor was inside one (its clock or heartbeat waiting on another process's write lock) hung for ever before
    # running any of its code: the sqlite3 gem closes the connections a child inherits, and that connection's mutex was
    # held by a thread the child does not have. The supervisor counted a worker that never ran a job. PostgreSQL's
    # driver has no such lock, and there a fork does not wait for a heartbeat held up by a frozen server.
    class ForkLock
      # `forks`: the supervisor forks its workers (in async mode they are threads, and nothing needs keeping apart).
      def initialize(forks:)
        @guarded = forks && Record.connection_db_config.adapter == "sqlite3"
        # The sqlite3 gem closes the writable connections a worker inherits (which this lock makes safe) and warns, at
        # each fork, that it is "unsafe … possible data corruption". Active Record 8 silences that warning; on 7.2 it
        # was printed as every worker started.
        SQLite3::ForkSafety.suppress_warnings! if forks && defined?(SQLite3::ForkSafety)
        @lock = Mutex.new
        @querying = 0
      end

      # Runs the block, a thread's database work, outside any fork.
      def querying
        @lock.synchronize { @querying += 1 }
        begin
          yield
        ensure
          @lock.synchronize { @querying -= 1 }
        end
      end

      # Yields (to fork) unless a thread is inside a query, holding off any that would start one meanwhile; the
      # caller tries again on its next turn.
      def quietly
        return yield unless @guarded

        @lock.synchronize { yield if @querying.zero? }
      end
    end
  end
end
