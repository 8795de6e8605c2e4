# frozen_string_literal: true

require "socket"

module Bobbin
  # A running Bobbin process (worker or supervisor) and its heartbeat.
  class ProcessRecord < Record
    self.table_name = "bobbin_processes"
    utc_times :last_heartbeat_at, :created_at

    # Times go in as bind parameters (a range), as in every periodic query: SQL with the time written in is a new
    # statement each call, and Active Record prepares each new one on the server.
    scope :stale, ->(threshold, now = self.now) { where(last_heartbeat_at: ...(now - threshold)) }

    # The time by the database's clock, by which every heartbeat is written and judged (UTC). The hosts sharing a
    # PostgreSQL may disagree about the time (a VM back from a pause, a container without NTP), and one whose clock
    # ran ahead by more than process_alive_threshold would judge every other host's workers dead and run their jobs
    # again; the database agrees with itself. SQLite serves one host, whose clock it is. Retried on a fresh session
    # when the pooled one was closed meanwhile (idle_session_timeout, a restart), as Active Record's own reads are:
    # the promotion pass, asking first, logged "clock failed" each time the server closed its idle session.
    def self.now
      return Time.now.utc unless Store.postgresql?(connection_db_config)

      epoch = with_connection { |connection| connection.select_all("SELECT extract(epoch FROM now())", "Bobbin Now", allow_retry: true).rows.first.first }
      Time.at(epoch.to_r).utc
    end

    # Registers the current OS process and returns its row.
    def self.register(kind:, name:, metadata: {}, supervisor_id: nil)
      now = self.now
      create!(kind: kind, name: name, pid: ::Process.pid, hostname: Socket.gethostname, supervisor_id: supervisor_id,
              metadata: metadata_json(metadata), last_heartbeat_at: now, created_at: now)
    end

    # Seconds a stopping process waits for the database to remove its row (see deregister).
    DEREGISTER_WAIT = 3

    # Removes process `id`'s row as it stops, waiting for the database at most `within` seconds; raises
    # Store::Unavailable past them. A frozen server (or a network that drops packets without closing the connection)
    # never answers Active Record's session, and the process's exit waited with it; the row left behind is pruned
    # process_alive_threshold after its last heartbeat, as a killed process's is.
    def self.deregister(id, within: DEREGISTER_WAIT)
      deleting = Thread.new { with_connection { where(id: id).delete_all } }
      deleting.report_on_exception = false
      raise Store::Unavailable, "the database did not answer within #{format('%g', within)}s" unless deleting.join(within)

      deleting.value
    end

    # A process row's metadata as written at registration and each heartbeat: with this process's own
    # process_alive_threshold, by which every other process judges its silence, and its pid space.
    def self.metadata_json(metadata)
      JSON.generate(metadata.merge(alive_threshold: Bobbin.config.process_alive_threshold, pid_space: pid_space).compact)
    end

    # Where this process's pid means something (Linux): this boot, this pid namespace. Two processes of one pid space
    # can tell whether the other still runs by its pid. A pid space outlives none of its processes: one named again
    # by a later namespace (the number reused) is gone, with every process that was in it. nil where /proc does not say.
    def self.pid_space
      return @pid_space if @pid_space_of == ::Process.pid # a forked child may be in a namespace of its own

      @pid_space_of = ::Process.pid
      @pid_space = begin
        "#{File.read('/proc/sys/kernel/random/boot_id').strip}/#{File.readlink('/proc/self/ns/pid')}"
      rescue SystemCallError
        nil
      end
    end

    # Processes of this host's pid space (see pid_space) whose pid no longer runs: dead, however recent their last
    # heartbeat. (A pid run again by another program counts as alive: its silence will tell.)
    def self.gone(space = pid_space)
      return [] unless space

      where(hostname: Socket.gethostname).where.not(pid: ::Process.pid).select(:id, :pid, :hostname, :metadata)
                                        .select { |record| record.pid_space == space && !record.running? }
    end

    # The processes silent for longer than their own alive_threshold (`fallback` for rows that do not say: a Bobbin
    # before it wrote one). Only rows silent for this process's heartbeat_interval are read (live ones beat within
    # theirs), so a process that set a threshold shorter than this one's interval is found up to that interval late.
    def self.silent(now = self.now, fallback: Bobbin.config.process_alive_threshold)
      stale([ Bobbin.config.heartbeat_interval, fallback ].min, now).select(:id, :pid, :hostname, :last_heartbeat_at, :metadata)
                                                                   .select { |record| record.silent?(now, fallback) }
    end

    # The processes that count as alive: neither silent (see silent) nor, on this host, gone (see gone: a worker
    # killed with -9 a moment ago still has a recent heartbeat).
    def self.live(now = self.now) = where.not(id: silent(now).map(&:id) + gone.map(&:id))

    # The pid space the process ran in (see ProcessRecord.pid_space), as its row says.
    def pid_space = own_metadata["pid_space"]

    # True while this row's pid names a process (in this process's pid space).
    def running?
      return true unless pid.to_i.positive? # 0 and below name process groups: nothing to judge by

      ::Process.kill(0, pid)
      true
    rescue Errno::ESRCH
      false
    rescue Errno::EPERM # another user's
      true
    end

    # True when this process has been silent for longer than its own alive_threshold.
    def silent?(now, fallback = Bobbin.config.process_alive_threshold) = last_heartbeat_at < now - alive_threshold(fallback)

    # Seconds without a heartbeat after which this process is presumed dead: the process_alive_threshold it runs
    # with, as its row says. Each process is judged by its own: hosts may be set up apart, or be mid-deploy to new
    # settings, and judged by another's shorter threshold a live process that beats less often would be pruned and
    # its jobs run again elsewhere.
    def alive_threshold(fallback = Bobbin.config.process_alive_threshold)
      own = own_metadata["alive_threshold"]
      own.is_a?(Numeric) && own.positive? ? own : fallback
    end

    # The row's metadata as a Hash ({} when it holds none, or not JSON).
    def own_metadata
      parsed = JSON.parse(metadata.to_s) if metadata.to_s.start_with?("{")
      parsed.is_a?(Hash) ? parsed : {}
    rescue JSON::ParserError
      {}
    end
  end
end
