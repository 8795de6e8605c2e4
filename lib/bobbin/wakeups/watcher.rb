# frozen_string_literal: true

module Bobbin
  module Wakeups
    # SQLite has no NOTIFY. A worker process watches the database instead, on a thread and a read-only connection
    # of its own: every INTERVAL it reads `PRAGMA data_version`, which changes only when another connection has
    # committed (a read of shared memory, no disk I/O); after a change it
    # looks for jobs inserted since its last look by other processes (this one announces its own at once) and
    # announces their queues to this process's workers. Jobs
    # that become ready without an insert in another process (a release, a recovery) are found
    # by polling; the process that made them ready wakes its own workers at once. After a change it also reads the
    # paused queues (a handful of rows): a pause made elsewhere is known to this process's workers, and a resume
    # made elsewhere wakes them.
    #
    # It looks every INTERVAL while the file changes, and backs off to QUIET_INTERVAL over the first QUIET seconds
    # without a change: looking 200 times a second cost an idle worker ~2 % of a core (a trial), 20 times costs a tenth
    # of that. The first job another process enqueues after a quiet spell waits up to QUIET_INTERVAL for its look.
    class Watcher
      INTERVAL = 0.005
      QUIET_INTERVAL = 0.05
      QUIET = 1.0
      # The longest wait before the watcher starts again after an error, in seconds.
      MAX_BACKOFF = 30

      NEW_JOBS = "SELECT id, queue, (julianday(run_at) - 2440587.5) * 86400.0 FROM bobbin_jobs WHERE id > ? ORDER BY id"

      def initialize(db_config, logger: Bobbin.logger, interval: INTERVAL)
        @db_config = db_config
        @logger = logger
        @interval = interval
        @healthy = false
        @stop = Thread::Queue.new
      end

      # Starts watching on a thread; returns self.
      def start
        @thread = Thread.new { run }
        @thread.name = "bobbin-watcher"
        self
      end

      # True while the watcher reads the database.
      def healthy? = @healthy

      # Stops watching and closes the connection, waiting for the thread at most `within` seconds (nil: one).
      def stop(within = nil)
        @stop << :stop
        @thread&.join(within || 1)
      end

      private
        # Watches until stopped. An error (the file locked past the busy timeout as the watcher starts, a disk I/O
        # error) is logged and the watcher starts again with backoff, waking every worker once then (jobs committed
        # meanwhile were not watched for). Stopped for good instead, it left the process's idle workers waiting for a
        # poll for every job another process enqueued from then on.
        def run
          failures = 0
          begin
            watch(woken: failures.positive?) { failures = 0 }
          rescue StandardError => error
            failures += 1
            @healthy = false
            @adapter&.disconnect!
            backoff = [ 2**(failures - 1), MAX_BACKOFF ].min
            @logger.warn("bobbin: cannot watch the SQLite database for new jobs (#{error.class}: #{error.message}); idle workers poll, " \
                         "and it tries again in #{backoff}s")
            retry unless @stop.pop(timeout: backoff) == :stop
          ensure
            @healthy = false
            @adapter&.disconnect!
          end
        end

        # Connects, reads where the jobs and the paused queues stand, yields once it does (`woken`: then wakes every
        # worker), and looks until stopped.
        def watch(woken:)
          @adapter = Store::OwnConnections.open(@db_config)
          @db = @adapter.raw_connection
          @version = version
          @last_id = @db.get_first_value("SELECT COALESCE(MAX(id), 0) FROM bobbin_jobs").to_i
          read_paused
          @healthy = true
          yield
          Wakeups.deliver(nil) if woken
          @changed_at = Bobbin.monotonic
          look until @stop.pop(timeout: wait(Bobbin.monotonic - @changed_at)) == :stop
        end

        # Seconds until the next look, `quiet` seconds after the last change: `interval`, growing to QUIET_INTERVAL.
        def wait(quiet) = (quiet / QUIET * QUIET_INTERVAL).clamp(@interval, [ @interval, QUIET_INTERVAL ].max)

        def look
          current = version
          return if current == @version

          @changed_at = Bobbin.monotonic
          return if Wakeups.inserting? # this process's own insert may be in the change: look again once its ids are noted

          read_paused
          rows = @db.execute(NEW_JOBS, [ @last_id ]).map { |row| row.is_a?(Hash) ? row.values : row } # Active Record sets results_as_hash
          @version = current # only now: a look whose reads failed is made again at the next, not forgotten until another commit
          return if rows.empty?

          @last_id = rows.last.first
          announce(rows.reject { |id, _queue, _at| Wakeups.inserted_here?(id) })
          Wakeups.forget_inserted(@last_id)
        rescue SQLite3::BusyException
          nil # a writer holds the file (past the busy timeout): the next look sees the same change and reads again
        end

        # Jobs inserted by other processes: their queues, now or (none due yet) at the first one's run_at.
        def announce(rows)
          return if rows.empty?

          now = Time.now.to_f
          due, later = rows.partition { |_id, _queue, at| at <= now }
          Wakeups.deliver(due.map { |row| row[1] }.uniq) if due.any?
          Wakeups.deliver(later.map { |row| row[1] }.uniq, later.map(&:last).min) if later.any?
        end

        def read_paused = Wakeups.paused_now(@db.execute(PAUSED).map { |row| row.is_a?(Hash) ? row["queue"] : row.first })

        def version = @db.get_first_value("PRAGMA data_version")
    end
  end
end
