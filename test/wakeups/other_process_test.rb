# frozen_string_literal: true

require "test_helper"

# Work enqueued in one process wakes an idle worker in another: PostgreSQL through LISTEN/NOTIFY, SQLite through
# the worker's watch on the database file.
class OtherProcessTest < Bobbin::TestCase
  test "an idle worker in another process, polling every 60 s, starts a job enqueued here without waiting for a poll" do
    pid = spawn_bobbin("work", "--fibers", "5", "--polling-interval", "60", "--notified-polling-interval", "60", log: ENV["BOBBIN_TEST_WORKER_LOG"] || File::NULL)
    ensure_killed(pid) do
      wait_for("the worker to register", timeout: 60) { Bobbin::ProcessRecord.where(kind: "worker").exists? }
      SleepJob.enqueue(0, "warm-up")
      wait_for("its first job", timeout: 30) { LedgerEntry.exists?(key: "warm-up") }
      sleep(0.5) # it has claimed again, found nothing, and sleeps its 60 s
      SleepJob.enqueue(0, "from-here")
      assert wait_for("the job to run in the other process", timeout: 20) { LedgerEntry.find_by(key: "from-here") }
      assert_not_equal Process.pid, LedgerEntry.find_by(key: "from-here").pid
      Process.kill(:TERM, pid)
      assert wait_exit(pid, timeout: 60)&.success?
    end
  end
end
