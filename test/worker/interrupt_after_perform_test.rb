# frozen_string_literal: true

require "test_helper"

# A stop's interrupt is for jobs still running their own code. One that came once `perform` had returned, before the
# job's outcome was handed to the writer (Bobbin's own bookkeeping, or a subscriber to perform.bobbin still busy with
# the job's end), handed a finished job back to ready: it ran again (a review: 1 in 4 INT, INT stops of an async
# supervisor ran a finished job twice).
class InterruptAfterPerformTest < Bobbin::TestCase
  { "threads" => [ :threads, LedgerJob, [ "once" ] ], "fibers" => [ :fibers, LedgerJob, [ "once" ] ],
    "a fiber pool's thread lane" => [ :fibers, LaneSleepJob, [ 0, "once" ] ] }.each do |where, (mode, job_class, arguments)|
    test "#{where}: an interrupt that comes after perform returned leaves the job succeeded, not handed back to run again" do
      id = job_class.enqueue(*arguments)
      worker = Bobbin::Worker.new(mode => 1, polling_interval: 0.05)
      ended = Thread::Queue.new
      # A subscriber to the job's end (a metrics client's flush) still at work when the stop interrupts the running jobs.
      subscriber = ActiveSupport::Notifications.subscribe("perform.bobbin") do |event|
        ended << event.payload[:id]
        sleep(0.01) until worker.executor.interrupted?(event.payload[:id])
        sleep(0.2) # where a Thread#raise sent with the mark above lands
      end
      thread = Thread.new { worker.run }
      assert_equal id, ended.pop(timeout: 30), "the job ran"
      worker.stop(timeout: 0)
      assert thread.join(30), "the worker stopped"
      assert_equal "succeeded", Bobbin::JobRecord.find(id).state, "its outcome written, not handed back to run again"
      assert_equal [ "once" ], LedgerEntry.pluck(:key)
    ensure
      ActiveSupport::Notifications.unsubscribe(subscriber) if subscriber
      worker&.stop(timeout: 0)
      thread&.join(10)
    end
  end
end
