# frozen_string_literal: true

require_relative "wakeups/notice"
require_relative "wakeups/listener"
require_relative "wakeups/watcher"

module Bobbin
  # How an idle worker hears of new work without polling. Whatever makes jobs ready (an enqueue, a retry written,
  # a release, a recovery, a resumed queue, a concurrency slot freed) announces the queues after its commit; every
  # worker of every process whose queues match and who has room wakes at once.
  #
  # PostgreSQL: the announcement is a NOTIFY on its own (sent after the job's commit, not inside it: a NOTIFY holds
  # a cluster-wide lock through its transaction's commit, which would serialise every producer's durable commit);
  # each process listens on one connection (Listener). SQLite: the announcing process wakes its own workers, and
  # each worker process watches the database file for commits of new jobs (Watcher). Either way polling stays as
  # the safety net, slower while notifications work (notified_polling_interval) than while they do not.
  module Wakeups
    # The paused queues, as the Listener and the Watcher read them when they connect and when a pause is heard of.
    PAUSED = "SELECT queue FROM bobbin_pauses"

    @lock = Mutex.new
    @workers = []
    @source = nil
    @inserted_here = []
    @inserting = 0
    @forking = nil
    @idle = ConditionVariable.new
    @paused = [].freeze

    module_function

    # Adds a worker (anything answering `notice(queues, at, resumed:)`) to this process's listeners; starts the process's
    # listening thread with the first one.
    def subscribe(worker)
      @lock.synchronize do
        forked! if @pid != ::Process.pid
        @workers |= [ worker ]
        @source ||= (@paused = [].freeze; start_source) # what was heard without a listener is stale: it reads them anew
      end
    end

    # Removes a worker; stops the listening thread with the last one, waiting for it at most `within` seconds (nil:
    # its source's own wait).
    def unsubscribe(worker, within: nil)
      source = @lock.synchronize do
        @workers -= [ worker ] # a new array: deliver reads the list without the lock
        next unless @workers.empty?

        @paused = [].freeze # no longer kept up to date
        @source.tap { @source = nil }
      end
      source&.stop(within)
    end

    # True while every announcement reaches this process (PostgreSQL's listener is connected), so idle workers
    # may poll at notified_polling_interval. (SQLite's watcher sees only inserts from other processes.)
    def listening? = @source.is_a?(Listener) && @pid == ::Process.pid && @source.healthy?

    # This process reached the database again after an outage: a listener waiting to reconnect does so now.
    def reachable! = ((source = @source).is_a?(Listener) && source.retry_now)

    # The shortest polling_interval of this process's workers (the configured one without workers): how long a
    # listener that went silent may go unnoticed.
    def polling_interval
      shortest = nil # no Array: the listener asks before each wait
      @workers.each do |worker|
        interval = worker.polling_interval if worker.respond_to?(:polling_interval)
        shortest = interval if interval && (shortest.nil? || interval < shortest)
      end
      shortest || Bobbin.config.polling_interval
    end

    # Tells this process's workers that jobs are ready in `queues` (nil: any queue), or become due at `at`
    # (epoch seconds; nil: now). With `paused:` it says instead that `queues` were paused (true: nothing to claim,
    # so no worker is told) or resumed (false: their waiting jobs are ready).
    def deliver(queues, at = nil, paused: nil)
      unless paused.nil? || queues.nil?
        @lock.synchronize { @paused = (paused ? @paused | queues : @paused - queues).freeze }
        return if paused
      end
      tell(queues, at, resumed: paused == false)
    end

    # True when `queue` is paused as far as this process has heard (pause and resume announce themselves; the
    # listener or watcher reads the paused queues when it connects), so workers may ignore its jobs' announcements.
    # The claim statement stays the truth: a stale answer costs one empty claim, or a wait until the next poll.
    def paused?(queue) = @paused.include?(queue)

    # Replaces what this process knows of the paused queues with `queues` (read from bobbin_pauses); returns the
    # queues it took for paused that are not any more.
    def note_paused(queues)
      @lock.synchronize { (@paused - queues).tap { @paused = queues.uniq.freeze } }
    end

    # Like note_paused, then wakes the workers of the queues no longer paused, and of `resumed` (a resume heard of:
    # its jobs are claimable now; a worker ignores those of a queue still paused).
    def paused_now(queues, resumed: [])
      woken = note_paused(queues) | resumed
      tell(woken, nil, resumed: true) if woken.any?
    end

    # Hands a notice to each worker. `resumed`: `queues` were paused until now, so a due time a worker looked up
    # without their jobs is stale.
    def tell(queues, at, resumed: false)
      @workers.each { |worker| worker.notice(queues, at, resumed: resumed) } # replaced, never changed in place, under the lock
    end

    # Runs the block (an INSERT of jobs on SQLite, which returns their ids), then notes those ids: this process
    # announces them itself, so its Watcher passes them over. While an insert is between its commit and that note
    # the Watcher waits (`inserting?`), or it would take the new rows for another process's and announce them twice.
    # Rolled back (a transaction open on `connection`), the ids are forgotten again: SQLite gives them to the next
    # insert, maybe another process's, whose jobs the Watcher passed over as this one's (they waited for a poll).
    def inserting(connection = nil)
      @lock.synchronize do
        @idle.wait(@lock) while @forking && !@forking.equal?(Thread.current)
        @inserting += 1
      end
      Thread.current[:bobbin_inserting] = Thread.current[:bobbin_inserting].to_i + 1 # fiber-local
      begin
        ids = yield
        if ids.any? && @source.is_a?(Watcher)
          range = ids.min..ids.max
          @lock.synchronize { @inserted_here << range }
          connection&.current_transaction&.after_rollback { @lock.synchronize { @inserted_here.delete(range) } }
        end
        ids
      ensure
        Thread.current[:bobbin_inserting] -= 1
        @lock.synchronize { @idle.broadcast if (@inserting -= 1).zero? }
      end
    end

    # Runs the block (a fork) once no other thread or fiber of this process is inside an SQLite insert of jobs, holding
    # off any that would start one meanwhile. The sqlite3 gem closes the connections a child inherits, and a connection
    # whose mutex a thread the child does not have held (its enqueue waiting for another process's write lock) hung the
    # child for ever before it ran any code: a Puma worker, a `fork` in a rake task or a job, beside threads enqueuing.
    # An insert waits at most SQLite's busy timeout for its lock, so the fork waits no longer.
    def forking
      @lock.synchronize do
        own = Thread.current[:bobbin_inserting].to_i
        @idle.wait(@lock) while (@forking && !@forking.equal?(Thread.current)) || @inserting > own
        @forking = Thread.current
      end
      yield
    ensure
      @lock.synchronize do
        next unless @forking.equal?(Thread.current)

        @forking = nil
        @idle.broadcast
      end
    end

    # Forks (Kernel#fork, Process.fork, Puma's, Unicorn's) go through `forking` (see there).
    module ForkGate
      def _fork = Wakeups.forking { super }
    end
    ::Process.singleton_class.prepend(ForkGate)

    # True while this process has an insert whose ids are not noted yet.
    def inserting? = @lock.synchronize { @inserting.positive? }

    # True when job `id` was inserted by this process.
    def inserted_here?(id) = @lock.synchronize { @inserted_here.any? { |range| range.cover?(id) } }

    # Forgets the ids this process inserted up to `id` (the Watcher has looked past them).
    def forget_inserted(id) = @lock.synchronize { @inserted_here.reject! { |range| range.max <= id } }

    # Announces jobs made ready in `queues` (nil: any), the earliest due at `at` (epoch seconds; nil: now), once the
    # transaction open on `connection` (Active Record's; default Bobbin's) commits — at once without one, never on
    # rollback: to this process's workers on SQLite, to every process through a NOTIFY on PostgreSQL.
    # `paused:` announces a pause (true) or resume (false) of `queues` instead.
    # Sent with `notifications` off too: that says this process does not listen, not that nobody does (a web app set so
    # left every listening worker to find its jobs at the safety-net poll).
    def announce(queues, at: nil, paused: nil, connection: nil)
      notice = Notice.new(queues&.uniq, at, paused)
      return after_commit(connection, notice) if connection

      Record.with_connection { |own| after_commit(own, notice) }
    end

    def after_commit(connection, notice)
      connection.current_transaction.after_commit { send_notice(connection, notice) }
    end

    # A forked child inherits the parent's registry but not its listening thread.
    def forked!
      @workers = []
      @source = nil
      @paused = [].freeze # the child's listener or watcher reads them again
      @pid = ::Process.pid
    end

    # Never raises: the jobs are committed, and polling finds them if the announcement is lost.
    def send_notice(connection, notice)
      adapter = Store.for_adapter(connection.adapter_name)
      adapter == Store::PostgreSQL ? adapter.notify(connection, notice.to_json) : deliver(notice.queues, notice.at, paused: notice.paused)
    rescue ActiveRecord::ActiveRecordError, SystemCallError => error
      Bobbin.logger.warn("bobbin: could not announce new jobs (#{Store.reason(error)}); workers will find them by polling")
    end

    def start_source
      return unless Bobbin.config.notifications

      db_config = Record.connection_db_config
      source = Store.for_adapter(db_config.adapter) == Store::PostgreSQL ? Listener.new(db_config) : Watcher.new(db_config)
      source.start
    end

    private_class_method :tell, :after_commit, :forked!, :send_notice, :start_source
  end
end
