# frozen_string_literal: true

require "test_helper"
require_relative "notice_probe"

# Work enqueued in one process wakes an idle worker in another: PostgreSQL through LISTEN/NOTIFY, SQLite through
# the worker's watch on the database file.
class OtherProcessTest < Bobbin::TestCase
  include NoticeProbe
  test "an idle worker in another process, polling every 60 s, starts a job enqueued here without waiting for a poll" do
    with_worker_elsewhere do |pid|
      SleepJob.enqueue(0, "from-here")
      assert wait_for("the job to run in the other process", timeout: 20) { LedgerEntry.find_by(key: "from-here") }
      assert_not_equal Process.pid, LedgerEntry.find_by(key: "from-here").pid
      Process.kill(:TERM, pid)
      assert wait_exit(pid, timeout: 60)&.success?
    end
  end

  # `notifications: false` is a process's own choice not to listen (its workers behind a transaction pooler, say); it
  # also kept its enqueues from announcing themselves, so a web app set so made every listening worker elsewhere find
  # its jobs only at the safety-net poll (10 s by default; a review).
  test "a process that does not listen still announces what it enqueues: an idle worker in another process starts it without a poll" do
    with_worker_elsewhere do
      Bobbin.config.set(notifications: false)
      SleepJob.enqueue(0, "one")
      Bobbin.enqueue_all([ [ SleepJob, [ 0, "two" ] ] ])
      assert wait_for("both jobs to run in the other process", timeout: 20) { LedgerEntry.where(key: %w[one two]).count == 2 }
    end
  end

  # SQLite gives the ids of rolled-back rows to the next insert, whichever process makes it. This process's watcher
  # passed over another process's job that took the id of an enqueue rolled back here, as if this process had made it.
  test "SQLite: a job another process enqueues after an enqueue rolled back here wakes this process's idle worker" do
    skip("SQLite only") if postgres?
    with_idle_worker do
      Bobbin::Record.transaction do
        enqueue_to("default", "rolled-back")
        raise ActiveRecord::Rollback
      end
      script = "Bobbin.connect(ENV.fetch('DATABASE_URL')); require './test/support/jobs'; SleepJob.enqueue(0, 'from-there')"
      enqueuer = Process.spawn({ "DATABASE_URL" => TestDatabase.url_with_pool }, *ruby, "-Ilib", "-rbobbin", "-e", script, chdir: ROOT)
      assert wait_exit(enqueuer, timeout: 60)&.success?, "the other process enqueued its job"
      assert wait_for("the other process's job to run (the worker polls only every 60 s)", timeout: 20) { LedgerEntry.exists?(key: "from-there") }
      assert_not LedgerEntry.exists?(key: "rolled-back")
    end
  end

  private
    # Runs the block beside an idle `bobbin work` in another process that polls every 60 s, once it has run a first job
    # and gone back to sleep; yields its pid.
    def with_worker_elsewhere
      pid = spawn_bobbin("work", "--fibers", "5", "--polling-interval", "60", "--notified-polling-interval", "60", log: ENV["BOBBIN_TEST_WORKER_LOG"] || File::NULL)
      ensure_killed(pid) do
        wait_for("the worker to register", timeout: 60) { Bobbin::ProcessRecord.where(kind: "worker").exists? }
        SleepJob.enqueue(0, "warm-up")
        wait_for("its first job", timeout: 30) { LedgerEntry.exists?(key: "warm-up") }
        sleep(0.5) # it has claimed again, found nothing, and sleeps its 60 s
        yield pid
      end
    end
end
