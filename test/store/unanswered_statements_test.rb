# frozen_string_literal: true

require "test_helper"
require_relative "../wakeups/silent_proxy"

# A pooler or proxy that freezes (SIGSTOP, a hang) keeps its connections open and the kernel keeps acknowledging what
# is sent to it: no keepalive or tcp_user_timeout fires, and nothing answers. A worker's heartbeat, claims and outcome
# writes waited on such sessions without a word until other hosts declared the worker dead (a trial). Bobbin's own
# statements now give up after half of process_alive_threshold, as in an outage, and the next one opens a new session.
class UnansweredStatementsTest < Bobbin::TestCase
  setup do
    skip_unless_postgres
    @proxy = SilentProxy.new(Bobbin::Record.connection_db_config.configuration_hash)
    @process_id = Bobbin::ProcessRecord.register(kind: "test", name: "unanswered").id
    Bobbin.config.set(heartbeat_interval: 0.5, process_alive_threshold: 2)
  end

  teardown do
    @store&.close
    @proxy&.close
  end

  test "PostgreSQL: a statement the server never answers is an outage after half of process_alive_threshold, and the next call opens a new session" do
    config = ActiveRecord::DatabaseConfigurations::UrlConfig.new("test", "proxied", @proxy.url("bobbin-unanswered"))
    @store = Bobbin::Store::Guarded.new(Bobbin::Store.for_adapter("postgresql").new(Bobbin::Store::OwnConnections.open(config), Bobbin::Store::QueueSelection.new([ "*" ])))
    assert_empty @store.claim(@process_id, 10), "the session works through the proxy"
    assert_equal 1, @proxy.cut_all, "the store's one session"

    id = SleepJob.enqueue(0)
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    error = assert_raises(Bobbin::Store::Unavailable) { @store.claim(@process_id, 10) }
    waited = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
    assert_match(/database unavailable during claim: PG::ConnectionBad: PostgreSQL did not answer within 1s \(half of process_alive_threshold\)/, error.message)
    assert_operator waited, :>=, 1, "it waited for the answer first"

    # The claim sent on the silent session may have run: its job then reads running, claimed by this process,
    # as after any claim whose answer was lost. The next claim goes out on a new session and is answered.
    claimed = Bobbin::JobRecord.find(id).state == "running" ? [] : [ id ]
    assert_equal claimed, @store.claim(@process_id, 10).map(&:id)
  end

  # A TERM as the database stopped answering: the stop began only once the claim under way gave up (~28 s, its
  # deadline), so running jobs had none of shutdown_timeout and were never interrupted, and the log said it was
  # "waiting up to 25s" for them 5 s before it exited (a trial). A claim's answer is not waited for once a stop is asked.
  test "PostgreSQL: a TERM while the database does not answer begins the stop at once, waiting shutdown_timeout for the running jobs", long: true do
    log = "tmp/unanswered-stop-#{Process.pid}.log"
    config = start_config({ "fibers" => 5 }, heartbeat_interval: 1, process_alive_threshold: 120)
    2.times { |i| StartThenSleepJob.enqueue(12, "long-#{i}") }
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("work", "-c", config.path, "--shutdown-timeout", "8", log: log,
                                                                              env: { "DATABASE_URL" => "#{@proxy.url("bobbin-unanswered-stop")}&pool=5" })
      wait_for("both jobs to start", timeout: 60) { StartEntry.count == 2 } # in the worker: a claim seen committed may not be answered yet
      assert_operator @proxy.cut_all, :>=, 2, "the worker's sessions go silent"
      sleep(1) # its claims go out into the silence (every 0.05 s)
      Process.kill(:TERM, pids.first)
      assert wait_exit(pids.first, timeout: 60)&.success?, "it exited:\n#{File.read(log)}"
    end
    # Stopping ~13 s after the TERM (the claim's deadline: shutdown_timeout + 5 s), it found the jobs done ("no job running"),
    # and had it found them running it would have interrupted them at once.
    assert_match(/stopping on TERM: waiting up to 8s \(shutdown_timeout\) for 2 running jobs/, File.read(log))
  ensure
    FileUtils.rm_f(log) if log
    FileUtils.rm_f(config.path) if config
  end

  # Active Record's own statements on connect (SET client_min_messages, …) had no bound: a reconnect under way as a
  # TERM came, on a session the server accepted and then never answered, held the claim loop and the heartbeat for as
  # long as the server stayed silent, and a lone worker never exited (README: shutdown_timeout + 12 s).
  test "PostgreSQL: a worker whose reconnects are never answered still exits on TERM, its jobs left to recovery", long: true do
    log = "tmp/unanswered-reconnect-#{Process.pid}.log"
    config = start_config({ "threads" => 2 }, heartbeat_interval: 1, process_alive_threshold: 600)
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("work", "-c", config.path, "--shutdown-timeout", "1", log: log,
                                                                               env: { "DATABASE_URL" => "#{@proxy.url("bobbin-unanswered-reconnect")}&pool=5" })
      # The listener first opens its session as the worker starts: the next session to be readied would be its own,
      # not the one ended below, and the worker would stop as usual (a flake in CI, 9 of 12 runs on a busy machine).
      wait_for("the worker's listener", timeout: 60) do
        Bobbin::Record.connection.select_value("SELECT pid FROM pg_stat_activity WHERE application_name = 'bobbin-unanswered-reconnect' " \
                                               "AND (query = 'LISTEN #{Bobbin::Wakeups::Listener::CHANNEL}' OR query = '#{Bobbin::Wakeups::Listener::PING}')")
      end
      # The claimer's session (its claims, or an idle worker's next due time), then the writer's (heartbeats, lost
      # claims' release): each is ended, and the session opened in its place goes silent as Active Record readies it.
      [ "#{TestDatabase::CLAIM_QUERY}' OR query LIKE '#{TestDatabase::NEXT_DUE_QUERY}",
        "UPDATE bobbin_processes SET last_heartbeat_at%' OR query LIKE 'UPDATE bobbin_jobs SET state = CASE%" ].each do |statement|
        backend = wait_for("the worker's session running #{statement}", timeout: 60) do
          Bobbin::Record.connection.select_value("SELECT pid FROM pg_stat_activity WHERE application_name = 'bobbin-unanswered-reconnect' " \
                                                 "AND (query LIKE '#{statement}')")
        end
        @proxy.cut_next("client_min_messages")
        Bobbin::Record.connection.select_value("SELECT pg_terminate_backend(#{backend})")
        wait_for("its new session to go silent", timeout: 30) { !@proxy.cutting? }
      end
      Process.kill(:TERM, pids.first)
      assert wait_exit(pids.first, timeout: 60)&.success?, "it exited while its new sessions went unanswered:\n#{File.read(log)}"
    end
    assert_match(/stopped with the database unavailable \(.*the worker's stop is due.*\)/, File.read(log))
  ensure
    FileUtils.rm_f(log) if log
    FileUtils.rm_f(config.path) if config
  end
end
