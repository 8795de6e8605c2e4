# frozen_string_literal: true

require "test_helper"
require_relative "notice_probe"
require_relative "silent_proxy"
require "logger"
require "stringio"

# The listening connection (PostgreSQL): one per process, and when it is lost, polling carries on and
# notifications come back.
class ListenerTest < Bobbin::TestCase
  include NoticeProbe

  # The backend pids of this process's listening sessions.
  def local_cluster
    port = TestDatabase.url[/port=(\d+)/, 1] || "5432"
    line = `pg_lsclusters -h 2>/dev/null`.lines.map(&:split).find { |fields| fields[2] == port }
    line && Process.uid.zero? ? line.first(2) : nil
  end

  def ran?(key) = Recorder.calls.include?(key)

  # Connects this process (its workers, its listener, the test's own queries) to PostgreSQL through a SilentProxy.
  def through_proxy
    proxy = SilentProxy.new(Bobbin::Record.connection_db_config.configuration_hash)
    Bobbin.connect(proxy.url(TestDatabase.application_name))
    proxy
  end

  # Notifications are back when a job enqueued to a worker sleeping its 60 s notified poll runs within seconds.
  def assert_notifications_resume(key)
    wait_for("the listener to reconnect", timeout: 60) { Bobbin::Wakeups.listening? }
    sleep(1.5) # any short wait taken while the listener was down is over: the worker now sleeps its 60 s
    query { enqueue_to("default", key) }
    assert wait_for("#{key} to run on notification", timeout: 20) { ran?(key) }
  end

  setup { skip_unless_postgres }

  test "two pools in one process share one listening connection" do
    other = Bobbin::Worker.new(queues: [ "mail" ], threads: 2, polling_interval: 60)
    thread = Thread.new { other.run }
    with_idle_worker(poll: 60) do
      assert_equal 1, listeners.size, "one LISTEN session for the process"
      enqueue_to("mail", "mail")
      assert wait_for("the thread pool's job", timeout: 20) { ran?("mail") }
    end
  ensure
    other&.stop
    thread&.join(30)
  end

  # libpq's memory of a result is freed when it is cleared, or when a collection finds it: an idle thread-pool worker,
  # allocating little, went half an hour without one while its listener's ping results (~3 KB, two a second) added
  # ~0.4 MB a minute to its RSS (a trial). Results are cleared once read; with collections off, none is left behind.
  test "the listener's pings leave no result behind for a collection to free" do
    pings = -> { ObjectSpace.each_object(PG::Result).count { |result| !result.cleared? && result.fields == [ "bobbin_listener_ping" ] } }
    with_idle_worker(poll: 0.5) do # a ping every quarter second while nothing is heard
      GC.start
      GC.disable
      sleep(2)
      assert_operator pings.call, :<=, 1, "at most the one being read"
    ensure
      GC.enable
    end
  end

  test "after pg_terminate_backend of the listener, jobs still run and notifications resume" do
    with_idle_worker(poll: 60, fallback: 0.5) do
      old = listeners
      assert_equal 1, old.size
      Bobbin::Record.connection.select_value("SELECT pg_terminate_backend(#{old.first})")
      enqueue_to("default", "while-deaf")
      assert wait_for("the job enqueued while the listener was gone", timeout: 20) { ran?("while-deaf") }
      assert_notifications_resume("after")
      assert_not_equal old, listeners, "a new listening session"
    end
  end

  test "after a silent network cut of the listening connection, the loss is logged, polling takes over and the listener reconnects", long: true do
    log = StringIO.new
    logger = Bobbin.config.logger
    Bobbin.config.logger = Logger.new(log)
    proxy = through_proxy
    with_idle_worker(poll: 60, fallback: 0.5) do
      old = listeners
      assert_equal 1, proxy.cut_listeners, "the listening connection goes silent"
      enqueue_to("default", "while-cut") # its NOTIFY is lost in the silent connection
      assert wait_for("the job enqueued after the cut", timeout: 20) { ran?("while-cut") }
      assert_no_match(/notifications lost/, log.string, "idle workers polled once the listener's ping was late (after a " \
                                                         "polling_interval of silence), before it gave the connection up")
      assert wait_for("the listener to give the connection up", timeout: 30) { log.string.include?("notifications lost") }
      assert_match(/notifications lost \(PG::ConnectionBad: PostgreSQL did not answer/, log.string)
      assert_notifications_resume("after")
      assert_not_equal old, listeners, "a new listening session"
    end
  ensure
    Bobbin.config.logger = logger
    Bobbin.connect(TestDatabase.url_with_pool(name: TestDatabase.application_name))
    proxy&.close
  end

  # A reconnecting listener's session accepted and then never answered (a frozen backend, pooler or proxy: the kernel
  # acknowledges, so no keepalive or tcp_user_timeout fires) left its thread waiting for ever, and idle workers were never
  # woken by notifications again, whatever the server did next: at its LISTEN, or earlier, as Active Record readied the
  # new session (SET client_min_messages, the type map's queries) before the listener's own bounded statements.
  { "statements are never answered" => "LISTEN bobbin_probe", "session goes silent as Active Record readies it" => "client_min_messages" }.each do |what, statement|
    test "a reconnect whose #{what} is a lost connection: the listener reconnects and notifications resume", long: true do
      proxy = through_proxy
      with_idle_worker(poll: 60, fallback: 0.5) do
        old = listeners
        assert_equal 1, old.size
        proxy.cut_next(statement) # the next listening session goes silent there
        Bobbin::Record.connection.select_value("SELECT pg_terminate_backend(#{old.first})")
        wait_for("the reconnecting listener's session to go silent", timeout: 30) { !proxy.cutting? }
        assert_notifications_resume("after")
        assert_not_equal old, listeners, "a new listening session"
      end
    ensure
      Bobbin.connect(TestDatabase.url_with_pool(name: TestDatabase.application_name))
      proxy&.close
    end
  end

  test "after a PostgreSQL restart, jobs enqueued meanwhile run and notifications resume", long: true do
    cluster = local_cluster or skip("needs a local PostgreSQL cluster this user can restart")
    with_idle_worker(poll: 60, fallback: 0.5) do
      assert pg_ctlcluster(*cluster, "restart", "-m", "fast"), "PostgreSQL restarted"
      query { enqueue_to("default", "after-restart") }
      assert wait_for("the job enqueued after the restart", timeout: 60) { ran?("after-restart") }
      assert_notifications_resume("notified")
    end
  end

  test "stop ends the listener mid-wait, and a stopped listener tells this process's workers nothing more" do
    interval = Bobbin.config.polling_interval
    Bobbin.config.polling_interval = 60 # the listener waits on its socket for 3.5 s at a time
    probe = Probe.new
    Bobbin::Wakeups.subscribe(probe)
    Bobbin::Wakeups.unsubscribe(probe) # the process's own listener is gone; the one below is the test's
    listener = Bobbin::Wakeups::Listener.new(Bobbin::Record.connection_db_config).start
    wait_for("the listener to listen") { listener.healthy? }
    Bobbin::Wakeups.subscribe(probe) # a listener of the process again, beside the test's
    wait_for("the process's listener to listen") { Bobbin::Wakeups.listening? }
    probe.take
    thread = listener.instance_variable_get(:@thread)
    listener.stop # while it waits on the socket
    assert_not thread.alive?, "the listener's thread ended when stop returned"
    enqueue_to("default", "after-stop")
    wait_for("the process's listener to hear the job") { probe.count >= 1 }
    sleep(0.3)
    assert_equal [ [ "default" ] ], probe.take.map(&:queues), "heard once, by the listener still running"
  ensure
    Bobbin::Wakeups.unsubscribe(probe)
    Bobbin.config.polling_interval = interval
  end
end
