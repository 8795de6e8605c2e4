# frozen_string_literal: true

# An idle worker on a thread of the test process, and a subscriber beside it that records every announcement this
# process hears (through PostgreSQL's LISTEN, or SQLite's in-process delivery) — what a worker would be told.
module NoticeProbe
  # Records the notices Wakeups delivers to it.
  class Probe
    def initialize = (@lock = Mutex.new; @notices = [])

    def notice(queues, at, resumed: false) = @lock.synchronize { @notices << Bobbin::Wakeups::Notice.new(queues, at) }

    def count = @lock.synchronize { @notices.size }

    def take = @lock.synchronize { @notices.slice!(0, @notices.size) }
  end

  # The PostgreSQL sessions of this process's listeners.
  def listeners
    # A listener's last statement: its ping, or, until the first, the paused queues' read that follows its LISTEN.
    Bobbin::Record.connection.select_values(<<~SQL, "listeners", [ TestDatabase.application_name, Bobbin::Wakeups::PAUSED ]).map(&:to_i)
      SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND (query = $2 OR query LIKE '%bobbin_listener_ping%') AND pid <> pg_backend_pid()
    SQL
  end

  # Runs a fiber worker that polls every `poll` seconds (every `fallback` seconds while notifications do not
  # reach it, `poll` by default) until the block ends. A first job has run and the worker has gone back to sleep
  # before the block starts.
  def with_idle_worker(queues: [ "*" ], poll: 60, fallback: poll)
    @probe = Probe.new
    Bobbin::Wakeups.subscribe(@probe)
    worker = Bobbin::Worker.new(queues: queues, fibers: 5, polling_interval: fallback, notified_polling_interval: poll)
    thread = Thread.new { worker.run }
    wait_for("the worker to listen", timeout: 30) { Bobbin::Wakeups.listening? } if postgres?
    warm_up(queues)
    yield worker
  ensure
    worker&.stop
    thread&.join(30)
    Bobbin::Wakeups.unsubscribe(@probe)
  end

  # Waits (up to 10 s) for `count` announcements and a moment more for any extra; asserts exactly `count` came,
  # and returns them.
  def assert_heard(count, message = nil)
    wait_for("#{count} announcements", timeout: 10) { @probe.count >= count }
    sleep(0.3)
    notices = @probe.take
    assert_equal count, notices.size, message || "announcements heard: #{notices.inspect}"
    notices
  end

  # Enqueues a SleepJob of no time recording `key`, into `queue`; returns its id.
  def enqueue_to(queue, key) = Bobbin.enqueue_all([ [ SleepJob, [ 0, key ], { queue: queue } ] ]).first

  private
    def warm_up(queues)
      queue = queues.first.delete_suffix("*").then { |name| name.empty? ? "default" : "#{name}warm" }
      enqueue_to(queue, "warm-up")
      wait_for("the worker's first job", timeout: 30) { Recorder.calls.include?("warm-up") }
      sleep(0.3) # the worker claims once more after a job and finds nothing: it sleeps now
      @probe.take
      Recorder.reset
    end
end
