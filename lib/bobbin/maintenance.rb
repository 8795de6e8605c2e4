# frozen_string_literal: true

require_relative "maintenance/clock"

module Bobbin
  # A host's housekeeping, run by one process per host — the supervisor, or, among the workers running without
  # one, the oldest — at boot and every heartbeat_interval: recover the jobs of dead processes, delete expired
  # finished jobs and old recurring runs. The same process runs the Clock (recurring ticks, concurrency slots) on
  # its own timing.
  module Maintenance
    # Seconds until the next run after one that could not finish: the database was unreachable, or retention is behind.
    SOON = 1

    module_function

    # True when worker `process_id` (running without a supervisor) is the one that keeps house on its host: the
    # oldest such worker there that is alive (ProcessRecord.live: a dead one, silent or its pid gone, never holds
    # the post). Hosts with a supervisor leave it to the supervisor.
    def elected?(process_id)
      alive = ProcessRecord.live.where(kind: "worker", supervisor_id: nil, hostname: Socket.gethostname)
      alive.minimum(:id) == process_id
    end

    # Runs every service once; returns the seconds until the next run: heartbeat_interval, or SOON when retention
    # has more to delete than one sweep's budget, or when the database could not be reached (logged; Recovery then
    # distrusts silent heartbeats for a while). A service that fails otherwise (a bug, a schema that does not match)
    # is logged as an error and the others still run.
    def run(who, retention_budget: Retention::BUDGET)
      behind = quietly do
        Store.waiting_briefly_for_locks do # it runs on a heartbeat's thread: a table lock must not hold the beats up
          service(who, "recovering the jobs of dead processes") { Recovery.prune }
          service(who, "sweeping old recurring runs") { RecurringRun.sweep }
          service(who, "deleting expired jobs") { Retention.sweep(budget: retention_budget).behind }
        end
      end
      outage(who).succeeded
      behind ? SOON : Bobbin.config.heartbeat_interval
    rescue StandardError => error
      raise unless Store.transient?(error)

      skipped(who, error)
      Store.locked?(error) ? Bobbin.config.heartbeat_interval : SOON
    end

    # Reports housekeeping that could not run: an outage or a table lock makes Recovery distrust silent heartbeats for
    # a while and is a warning; so is a pool with no free connection (a worker without a supervisor keeps house on its jobs' pool),
    # which trusts nothing less; any other error is logged as one.
    def skipped(who, error)
      if Store.busy?(error)
        return Bobbin.logger.warn("bobbin #{who}: maintenance skipped, every connection of this process's Active Record pool is in use " \
                                  "(#{Store.reason(error)}); retrying. Give the pool a connection or two more than the jobs hold")
      end
      locked = Store.locked?(error) # beats may have waited behind the lock too: silences are not trusted for a while
      return failed(who, "keeping house", error) unless locked || Store.outage?(error)

      Recovery.unreachable!
      return outage(who).failed(error) unless locked

      Bobbin.logger.warn("bobbin #{who}: maintenance skipped, it #{Store.lock_waited} (#{Store.reason(error)}); retrying")
    end

    # The outage log of `who`'s housekeeping: a line when an outage starts, reminders, a line when it ends (a line
    # each run, every second through a 6-minute outage, made half of a worker's log: a trial).
    def outage(who) = (@outages ||= {})[who] ||= OutageLog.new("bobbin #{who}: maintenance")

    # Forgets `who`'s outage log as it stops keeping house (a worker's, named by its id): kept for the life of the process,
    # a process running embedded workers one after another (run_until_empty in a loop) kept one more for each.
    def forget(who) = @outages&.delete(who)

    # Runs one service; an error that is not an outage is logged and the next service runs (an outage, or a pool with
    # no free connection, stops them all).
    def service(who, what)
      yield
    rescue StandardError => error
      raise if Store.transient?(error)

      failed(who, what, error)
    end

    # Logs a housekeeping error that is not an outage; the service tries again at the next run.
    def failed(who, what, error)
      OutageLog.error("bobbin #{who}: #{what}", error, "trying again at the next run")
      nil
    end

    # Runs the block with the app's debug lines held back: Active Record logs every query at debug (in development,
    # to the terminal of `bobbin start` too), and periodic housekeeping would bury the jobs' lines. What the
    # housekeeping itself reports, at info and above, still shows. (Solid Queue's silence_polling does the same.)
    def quietly(&)
      logger = ActiveRecord::Base.logger
      logger.respond_to?(:silence) ? logger.silence(Logger::INFO, &) : yield
    end
  end
end
