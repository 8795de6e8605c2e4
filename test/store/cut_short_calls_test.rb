# frozen_string_literal: true

require "test_helper"

# An error raised into a worker's thread from outside (a job's thread under Thread.abort_on_exception, a Thread#raise)
# can land while one of the worker's statements waits for its answer. The statement stays in flight on that session:
# the worker's next call on it failed "another command is already in progress" (a trial: a thread pool's claim loop that
# such an error reached). The store opens a new session for the next call instead.
class CutShortCallsTest < Bobbin::TestCase
  WAITING = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database() " \
            "AND query LIKE '%bobbin_processes%'"

  setup do
    skip_unless_postgres
    Bobbin.config.set(heartbeat_interval: 20, process_alive_threshold: 60) # lock_wait 5 s: the beat waits on the test's lock
    @process_id = Bobbin::ProcessRecord.register(kind: "test", name: "cut-short").id
    @store = Bobbin::Store.open(Bobbin::Store::QueueSelection.new([ "*" ]))
  end

  teardown do
    @holder&.close
    @store&.close
  end

  test "PostgreSQL: a call an error from outside cuts short leaves nothing in flight for the store's next call" do
    assert @store.heartbeat(@process_id, "{}"), "the session works"
    @holder = PG.connect(TestDatabase.url)
    @holder.exec("BEGIN; LOCK TABLE bobbin_processes IN ACCESS EXCLUSIVE MODE")
    beat = Thread.new { @store.heartbeat(@process_id, "{}") }
    beat.report_on_exception = false
    wait_for("the heartbeat to wait on the lock") { @holder.exec(WAITING).getvalue(0, 0).to_i.positive? }
    beat.raise(RuntimeError, "raised into the thread from outside")
    error = assert_raises(RuntimeError) { beat.join }
    assert_equal "raised into the thread from outside", error.message
    @holder.exec("COMMIT")

    assert @store.heartbeat(@process_id, "{}"), "the next call goes through"
    assert_empty @store.claim(@process_id, 10), "and the one after"
  end
end
