# frozen_string_literal: true

module Bobbin
  module Operator
    # A process row as operators read it: its heartbeat's metadata (pool mode, capacity, busy, queued, RSS,
    # connections, recent stalls) parsed, the jobs running under it counted in the table, and a fiber pool's
    # health columns (loop lag now and at most, stalls).
    class ProcessView
      HEALTH = %w[loop_lag_ms max_loop_lag_ms stalls].freeze

      attr_reader :record, :metadata, :running

      # Every registered process, workers first, with their running jobs counted in one grouped query.
      def self.all(now = ProcessRecord.now)
        records = ProcessRecord.order(:kind, :id).to_a
        running = JobRecord.where(state: "running", claimed_by: records.map(&:id)).group(:claimed_by).count
        records.map { |record| new(record, running.fetch(record.id, 0), now) }
      end

      # What a worker adds to its heartbeat about itself: resident memory and the use of its jobs' Active Record pool
      # (ActiveRecord::Base's; Bobbin's own when the app has none). Cheap: one small /proc read and the pool's
      # counters. With Bobbin's tables in a queue database of their own, its pool showed 0 in use while jobs held
      # every connection of the app's (a trial).
      def self.resources
        pool = begin
          ActiveRecord::Base.connection_pool
        rescue ActiveRecord::ConnectionNotEstablished
          Record.connection_pool
        end
        stat = pool.stat
        { rss_kb: rss_kb, db_pool: stat[:size], db_in_use: stat[:busy] }
      rescue ActiveRecord::ActiveRecordError
        { rss_kb: rss_kb }
      end

      # This process's resident set in KiB (Linux /proc; nil elsewhere).
      def self.rss_kb
        pages = File.read("/proc/self/statm").split[1].to_i
        pages * 4096 / 1024
      rescue SystemCallError
        nil
      end

      def initialize(record, running, now)
        @record = record
        @running = running
        @now = now
        # A row from a newer or broken writer still lists: JSON that is not an object (null, a list) too.
        @metadata = (JSON.parse(record.metadata.to_s) rescue nil).then { |parsed| parsed.is_a?(Hash) ? parsed : {} }
      end

      def id = record.id
      def kind = record.kind
      def name = record.name
      def pid = record.pid
      def hostname = record.hostname
      def mode = metadata["mode"]
      def capacity = metadata["capacity"]
      def busy = metadata["busy"]
      def queued = metadata["queued"]
      # A worker made quiet (TSTP): it claims no more jobs and waits for its stop.
      def quiet? = metadata["quiet"] == true
      def queues = metadata["queues"]
      def rss_kb = metadata["rss_kb"]
      def db_pool = metadata["db_pool"]
      def db_in_use = metadata["db_in_use"]

      # Seconds since its last heartbeat.
      def heartbeat_age = (@now - record.last_heartbeat_at).round(1)

      # Silent for longer than the threshold after which its jobs are recovered.
      def stale? = heartbeat_age > record.alive_threshold

      # A fiber pool's loop lag now and at most (ms) and its stalls so far: name => value (nil for thread pools).
      def health = HEALTH.to_h { |column| [ column, record[column] ] }

      # The last few stalls its jobs caused (StallDetector::Stall fields, newest first).
      def recent_stalls = Array(metadata["recent_stalls"])
    end
  end
end
