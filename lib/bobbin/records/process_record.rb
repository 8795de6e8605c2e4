# frozen_string_literal: true

require "socket"

module Bobbin
  # A running Bobbin process (worker or supervisor) and its heartbeat.
  class ProcessRecord < Record
    self.table_name = "bobbin_processes"

    # Times go in as bind parameters (a range), as in every periodic query: SQL with the time written in is a new
    # statement each call, and Active Record prepares each new one on the server.
    scope :stale, ->(threshold, now = self.now) { where(last_heartbeat_at: ...(now - threshold)) }

    # The time by the database's clock, by which every heartbeat is written and judged (UTC). The hosts sharing a
    # PostgreSQL may disagree about the time (a VM back from a pause, a container without NTP), and one whose clock
    # ran ahead by more than process_alive_threshold would judge every other host's workers dead and run their jobs
    # again; the database agrees with itself. SQLite serves one host, whose clock it is.
    def self.now
      return Time.now.utc unless Store.postgresql?(connection_db_config)

      Time.at(with_connection { |connection| connection.select_value("SELECT extract(epoch FROM now())") }.to_r).utc
    end

    # Registers the current OS process and returns its row.
    def self.register(kind:, name:, metadata: {}, supervisor_id: nil)
      now = self.now
      create!(kind: kind, name: name, pid: ::Process.pid, hostname: Socket.gethostname, supervisor_id: supervisor_id,
              metadata: JSON.generate(metadata), last_heartbeat_at: now, created_at: now)
    end
  end
end
