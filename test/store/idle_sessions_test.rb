# frozen_string_literal: true

require "test_helper"

# PostgreSQL closes sessions that sit idle longer than idle_session_timeout (so do poolers and proxies with an idle
# timeout). A quiet worker's sessions are closed that way between jobs: it reconnects before its next statement,
# without an outage, a retry's wait or a lost notification.
class IdleSessionsTest < Bobbin::TestCase
  teardown { FileUtils.rm_f(@log) if @log && passed? }

  def worker_sessions(name)
    Bobbin::Record.connection.select_values("SELECT pid FROM pg_stat_activity WHERE application_name = $1", "sessions", [ name ])
  end

  test "PostgreSQL: a worker whose sessions the server closes while it is idle runs each next job on notification, logging no outage", long: true do
    skip_unless_postgres
    name = "bobbin-idle-#{Process.pid}"
    url = "#{TestDatabase.url_with_pool(name: name)}&options=-c%20idle_session_timeout%3D1000"
    log = @log = "tmp/idle-sessions-#{Process.pid}.log"
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("work", "--fibers", "5", "--polling-interval", "60", log: log, env: { "DATABASE_URL" => url })
      Bobbin.enqueue_all([ [ LedgerUpsertJob, [ "first" ] ] ])
      wait_for("the first job", timeout: 30) { LedgerEntry.exists?(key: "first") }
      2.times do |round|
        before = worker_sessions(name)
        sleep(2.5) # past idle_session_timeout: the server closes the claimer's and the writer's sessions
        assert (before - worker_sessions(name)).any?, "the server closed some of the worker's idle sessions"
        Bobbin.enqueue_all([ [ LedgerUpsertJob, [ "after-idle-#{round}" ] ] ])
        # Its polling_interval is 60 s: only the notification can start it this soon.
        wait_for("the job enqueued after idle spell #{round + 1}", timeout: 20) { LedgerEntry.exists?(key: "after-idle-#{round}") }
      end
      wait_for("every outcome written") { Bobbin.counts["succeeded"] == 3 }
      Process.kill(:TERM, pids.first)
      assert wait_exit(pids.first, timeout: 30)&.success?, "the worker stopped cleanly"
    end
    output = File.read(log)
    assert_no_match(/unavailable|failed|notifications lost|retrying/, output)
    assert_match(/stopped; 0 unfinished jobs handed back to run again/, output)
  end
end
