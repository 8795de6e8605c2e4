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

  test "a fork waits while a thread of the process is connecting to PostgreSQL, then goes ahead" do
    lock = ForkLock.new(forks: true, adapter: "postgresql")
    server, accepted, acceptor = silent_server
    connecting = Thread.new { connect_to(server).connect! }
    connecting.report_on_exception = false
    socket = accepted.pop # the connect is under way
    wait_for("the connect to be counted") { !lock.quietly { :forked } }
    assert_nil lock.quietly { :forked }, "no fork while a connect is under way"
    socket.close
    assert_raises(ActiveRecord::ConnectionNotEstablished) { connecting.value }
    assert_equal :forked, lock.quietly { :forked }
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
