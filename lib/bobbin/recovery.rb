# frozen_string_literal: true

module Bobbin
  # Gives back the jobs of processes that died: to ready, or to failed once a job has used up its runs.
  #
  # Blame. A crash counts against a job (its attempt stands) only when the job was alone in flight, or was the
  # "suspect" in flight (a job in flight at SUSPECT or more crashes; workers run those one at a time) beside
  # innocent jobs. Otherwise every job in flight gets its attempt back and its crash count goes up. A job that
  # kills its process is in flight at every crash it causes, so within two crashes it runs as a suspect, is
  # blamed at the next, and fails once its runs are used; the jobs beside it never burn attempts. A single
  # crash (an OOM kill, a kill -9) quarantines nobody.
  #
  # Silence. A process is judged dead by a silent heartbeat only when this process has itself reached the
  # database for longer than the threshold: after an outage every live process is silent, and is given the
  # threshold again to beat before anyone prunes it. A process that just started counts from its start: it cannot
  # tell whether an outage just ended, and one restarted while the database was away (it exits 69 until it is back)
  # starts as it returns, before the live processes beat again (they try each heartbeat_interval). Pruning them then
  # ran their running jobs a second time beside the first (a trial). Dead processes of its own host (ProcessRecord.gone)
  # are recovered at once all the same.
  module Recovery
    # Crashes a job must have been in flight for before it runs only one at a time per process.
    SUSPECT = 2

    @reachable_since = ::Process.clock_gettime(::Process::CLOCK_MONOTONIC) # Bobbin.monotonic's clock

    module_function

    # Recovers every process of this host's pid space whose pid is gone, every process silent for longer than its own
    # alive threshold (`threshold` seconds for a row that does not say), and running jobs whose process row is gone or
    # that name no process (a row edited by hand: `NOT IN` alone never matches NULL, and such a job stayed running);
    # returns how many jobs it recovered.
    def prune(threshold: Bobbin.config.process_alive_threshold)
      stale = prune_gone + prune_stale(threshold)
      running = JobRecord.where(state: "running")
      orphans = running.where(claimed_by: nil).or(running.where.not(claimed_by: ProcessRecord.select(:id))).distinct.pluck(:claimed_by)
      stale + orphans.sum { |id| recover(id, id ? "its process #{id} is no longer registered" : "its row names no process that claimed it") }
    end

    # Notes that this process could not reach the database, so silences are not trusted for a while.
    def unreachable!
      @reachable_since = Bobbin.monotonic
    end

    # Notes a heartbeat this process wrote. A gap of more than two heartbeat intervals since its last one counts as the
    # database unreachable, as a failed beat does: its statements hung (a frozen server or a black-holed network
    # answers nothing and raises nothing) or the process stalled, and every other process's beats may have hung too.
    def beat!
      now = Bobbin.monotonic
      unreachable! if late?(now)
      @beat_at = now
    end

    # True when this process's last heartbeat is more than two heartbeat intervals old (see beat!).
    def late?(now) = !@beat_at.nil? && now - @beat_at > 2 * Bobbin.config.heartbeat_interval

    # Recovers the jobs of supervisor `supervisor_id`'s worker rows for OS process `pid` (the supervisor saw it exit).
    # Not by pid and hostname: containers with host networking share the host's name, and each numbers its
    # processes from 1, so another host's live worker can have the same pid and hostname.
    def process_exited(pid, status, supervisor_id:)
      ProcessRecord.where(pid: pid, supervisor_id: supervisor_id).pluck(:id).sum { |id| take_over(ProcessRecord, id, "process #{id} (pid #{pid}) exited (#{status})") }
    end

    # Returns the jobs `process_id` (and the rows `beside` it of the same OS process) was running to ready (or failed);
    # records why on each job. They go behind the
    # jobs queued meanwhile (run_at now): put first in line, the jobs in flight at one crash were the ones in flight at
    # the next, and two kills in a row made a whole batch of innocent jobs suspects that ran one at a time (the chaos test).
    # `except`: jobs left as they are (a live worker's own, still in its hands). `lone: false` blames only a suspect, not a
    # job alone in flight: an error raised into a worker's loop from another thread may come from a thread that outlived
    # the job that started it.
    def recover(process_id, reason, beside: [], except: [], lone: true)
      running = JobRecord.where(state: "running", claimed_by: [ process_id, *beside ]).where.not(id: except)
      blamed = blamed_ids(running, lone: lone)
      error = { last_error_class: ProcessDied.name, last_error_message: "#{reason} while this job was running",
                last_error_backtrace: nil, claimed_at: nil, crashes: Arel.sql("crashes + 1") }
      # The database's time, as claims compare run_at with: this host's clock 30 s ahead kept a dead host's jobs
      # waiting 30 s more (a trial).
      now = ProcessRecord.now
      failed, ready = blamed.empty? ? [ [], [] ] : charge(running.where(id: blamed), error, now)
      charged = (failed + ready).sort # not `blamed`: a job its worker finished, or another process recovered, since that read is not
      spared = spare(running.where.not(id: blamed), error, now, suspects: blamed.empty?)
      log(reason, ready.size + spared, failed.size, charged)
      Wakeups.announce(nil) if ready.size + spared > 0
      if charged.size + spared > 0
        Instrumentation.instrument(:recover, process_id: process_id, reason: reason, ready: ready.size + spared, failed: failed.size, blamed: charged)
      end
      charged.size + spared
    end

    # The crash counts against these jobs: those out of crash retries fail, the others go back to ready. Returns the
    # ids [failed, ready] the UPDATEs changed. Compared as `attempts - crash_retries`: PostgreSQL's `max_attempts +
    # crash_retries` overflowed its integer for a job of max_attempts near INT32.max (what enqueue allows), and every prune raised.
    def charge(blamed, error, now)
      failed = Store.updated_ids(blamed.where("attempts - ? >= max_attempts", Bobbin.config.crash_retries), error.merge(state: "failed", finished_at: now))
      [ failed, Store.updated_ids(blamed, error.merge(state: Arel.sql(Store::WAITING), run_at: now, started_at: nil)) ]
    end

    # The jobs a crash counts against: the only one in flight (with `lone`), else the suspect in flight.
    def blamed_ids(running, lone:)
      rows = running.pluck(:id, :crashes)
      rows.size == 1 && lone ? rows.map(&:first) : rows.select { |_, crashes| crashes >= SUSPECT }.map(&:first)
    end

    # Jobs that were in flight beside the crash get their attempt back; without a suspect to blame, their crash
    # counts go up (at SUSPECT they run one at a time).
    def spare(relation, error, now, suspects:)
      changes = error.merge(state: Arel.sql(Store::WAITING), run_at: now, started_at: nil,
                            attempts: Arel.sql("CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END"))
      changes.delete(:crashes) unless suspects
      relation.update_all(changes)
    end

    def log(reason, ready, failed, blamed)
      return if ready + failed == 0

      blame = blamed.any? ? "; the crash counts against job #{blamed.join(', ')}" : ""
      Bobbin.logger.warn("bobbin: #{reason}; #{ready} #{'job'.pluralize(ready)} returned to ready, #{failed} failed#{blame}")
    end

    # A silent process is pruned once this process has reached the database for as long as the silent one's own
    # threshold (it had that long to beat after an outage), and only if it is still silent then (the delete says).
    def prune_stale(fallback)
      now = ProcessRecord.now
      ProcessRecord.silent(now, fallback: fallback).sum do |process|
        threshold = process.alive_threshold(fallback)
        next 0 unless trusted_silence?(threshold)

        take_over(ProcessRecord.stale(threshold, now), process.id, "#{named(process)} stopped heartbeating")
      end
    end

    # Processes of this host whose pid is gone (ProcessRecord.gone): a host's whole Bobbin killed at once (kill -9 of
    # the process group, an OOM kill of the container, a crash of the service) has its jobs back as soon as a process
    # of it starts again, not a heartbeat threshold later. Silences need no trust here: the pid says.
    def prune_gone
      ProcessRecord.gone.sum { |process| take_over(ProcessRecord, process.id, "#{named(process)} is gone (no such process)") }
    end

    # A process row as recovery's lines name it: by its row id (what `bobbin processes` and `--process` use), then its
    # pid and host (containers share host names and low pids).
    def named(process) = "process #{process.id} (pid #{process.pid} on #{process.hostname})"

    # Recovers process `id`'s jobs if its row is still among `rows` (as this caller judged it) to delete: of the
    # processes that judge one dead at once, the one whose delete takes the row recovers it. Returns how many jobs.
    # The other worker rows of its OS process (the pools of an async-mode process) that `rows` holds are taken over
    # with it, in one recovery: blamed row by row, a job alone in its pool was blamed for a crash four jobs were in.
    def take_over(rows, id, reason)
      pid, supervisor_id = ProcessRecord.where(id: id).pick(:pid, :supervisor_id)
      return 0 unless rows.where(id: id).delete_all == 1

      siblings = supervisor_id ? rows.where(pid: pid, supervisor_id: supervisor_id).where.not(id: id).pluck(:id) : []
      recover(id, reason, beside: siblings.select { |sibling| rows.where(id: sibling).delete_all == 1 })
    end

    # A housekeeping query that hung through a frozen server's whole outage returns once it resumes, before any other
    # process could beat again: this process has not beaten meanwhile either, and does not judge (a trial: a live
    # worker was pruned 0.1 s after a 100 s freeze ended, and its running jobs were given to others).
    def trusted_silence?(threshold)
      now = Bobbin.monotonic
      unreachable! if late?(now)
      @reachable_since.nil? || now - @reachable_since >= threshold
    end
  end
end
