# frozen_string_literal: true

module Bobbin
  # A host's housekeeping, run by one process per host — the supervisor, or a worker running without one —
  # at boot and every heartbeat_interval: recover the jobs of dead processes, delete expired finished jobs.
  # Further services (recurring jobs) join SERVICES.
  module Maintenance
    SERVICES = { recovery: -> { Recovery.prune }, retention: -> { Retention.sweep } }.freeze

    module_function

    # Runs every service once; returns false (and logs) when the database could not be reached, which also
    # makes Recovery distrust silent heartbeats for a while.
    def run(who)
      SERVICES.each_value(&:call)
      true
    rescue ActiveRecord::ActiveRecordError => error
      Recovery.unreachable!
      Bobbin.logger.warn("bobbin #{who}: maintenance skipped, database unavailable (#{error.message.lines.first&.strip}); retrying")
      false
    end
  end
end
