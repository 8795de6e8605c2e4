# frozen_string_literal: true

require "socket"

module Bobbin
  # A running Bobbin process (worker or supervisor) and its heartbeat.
  class ProcessRecord < Record
    self.table_name = "bobbin_processes"

    scope :stale, ->(threshold) { where(arel_table[:last_heartbeat_at].lt(Time.now.utc - threshold)) }

    # Registers the current OS process and returns its row.
    def self.register(kind:, name:, metadata: {}, supervisor_id: nil)
      now = Time.now.utc
      create!(kind: kind, name: name, pid: ::Process.pid, hostname: Socket.gethostname, supervisor_id: supervisor_id,
              metadata: JSON.generate(metadata), last_heartbeat_at: now, created_at: now)
    end
  end
end
