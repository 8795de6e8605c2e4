# frozen_string_literal: true

require "test_helper"
require "socket"
require "active_record/connection_adapters/postgresql_adapter"

# A supervisor forks its workers only while none of its threads is connecting to PostgreSQL: libpq's GSSAPI step holds
# a process-wide mutex, and a child forked meanwhile hung in its own first connect, for ever (a trial).
class ForkLockTest < Bobbin::TestCase
  ForkLock = Bobbin::Supervisor::ForkLock

  teardown { ForkLock.current = nil }

  # A server that takes the connection and never answers: libpq's connect waits in its first exchange until the
  # socket closes.
  def silent_server
    server = TCPServer.new("127.0.0.1", 0)
    accepted = Queue.new
    acceptor = Thread.new { accepted << server.accept }
    [ server, accepted, acceptor ]
  end

  def connect_to(server)
    ActiveRecord::ConnectionAdapters::PostgreSQLAdapter.new(host: "127.0.0.1", port: server.addr[1], dbname: "nowhere",
                                                            connect_timeout: 30, connection_retries: 0)
  end

  def busy(lock) = lock.instance_variable_get(:@busy)

  test "a fork waits for a thread's connect to PostgreSQL under way, and goes ahead once it has ended" do
    lock = ForkLock.new(forks: true, adapter: "postgresql", connect_wait: 60)
    server, accepted, acceptor = silent_server
    connecting = Thread.new { connect_to(server).connect! }
    connecting.report_on_exception = false
    socket = accepted.pop # the connect is under way
    wait_for("the connect to be counted") { busy(lock).positive? }
    closed = false
    closer = Thread.new { sleep(0.5) && (closed = true) && socket.close } # ends the connect while the fork waits
    assert_equal [ true, 0 ], lock.quietly { [ closed, busy(lock) ] }, "forked after the connect ended, not during it"
    assert_raises(ActiveRecord::ConnectionNotEstablished) { connecting.value }
  ensure
    closer&.join
    acceptor&.join(5)
    server&.close
  end

  # While the database was down the supervisor's heartbeat thread, started each turn just before the fork, was always
  # connecting: a fork that skipped its turn for connects never came, and a dead worker waited for the database.
  test "a connect that does not end holds a fork off no longer than connect_wait" do
    lock = ForkLock.new(forks: true, adapter: "postgresql", connect_wait: 0.05)
    server, accepted, acceptor = silent_server
    connecting = Thread.new { connect_to(server).connect! }
    connecting.report_on_exception = false
    socket = accepted.pop
    wait_for("the connect to be counted") { busy(lock).positive? }
    assert_predicate lock.quietly { busy(lock) }, :positive?, "forked with the connect still under way"
    socket.close
    assert_raises(ActiveRecord::ConnectionNotEstablished) { connecting.value }
  ensure
    socket&.close unless socket&.closed?
    acceptor&.join(5)
    server&.close
  end

  test "in a child the parent's lock counts nothing, and a supervisor that does not fork waits for nothing" do
    lock = ForkLock.new(forks: true, adapter: "postgresql")
    read, write = IO.pipe
    child = lock.quietly do
      fork do
        write.write(ForkLock.connecting { "connected" })
        exit!(0)
      end
    end
    write.close
    assert wait_exit(child, timeout: 30), "the child's connect waited for the lock its parent held as it forked"
    assert_equal "connected", read.read

    ForkLock.current = nil
    threads = ForkLock.new(forks: false, adapter: "postgresql")
    assert_nil ForkLock.current, "connects are not counted for a supervisor whose workers are threads"
    assert_equal :started, threads.quietly { :started }
  ensure
    read&.close
  end
end
