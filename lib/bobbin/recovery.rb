# frozen_string_literal: true

module Bobbin
  # Gives back the jobs of processes that died: to ready, or to failed once they have used up their runs.
  module Recovery
    module_function

    # Recovers every process silent for longer than `threshold` seconds, and running jobs whose process row is
    # gone; returns how many jobs it recovered.
    def prune(threshold: Bobbin.config.process_alive_threshold)
      stale = ProcessRecord.stale(threshold).pluck(:id, :pid, :hostname).sum do |id, pid, host|
        claimed = ProcessRecord.stale(threshold).where(id: id).delete_all == 1
        claimed ? recover(id, "process #{pid} on #{host} stopped heartbeating") : 0
      end
      orphans = JobRecord.where(state: "running").where.not(claimed_by: ProcessRecord.select(:id)).distinct.pluck(:claimed_by)
      stale + orphans.sum { |id| recover(id, "its process #{id} is no longer registered") }
    end

    # Recovers the jobs of the process rows for OS process `pid` on this host (the supervisor saw it exit).
    def process_exited(pid, status)
      ProcessRecord.where(pid: pid, hostname: Socket.gethostname).pluck(:id).sum do |id|
        ProcessRecord.where(id: id).delete_all == 1 ? recover(id, "process #{pid} exited (#{status})") : 0
      end
    end

    # Returns the jobs `process_id` was running to ready (or failed); records why on each job.
    def recover(process_id, reason)
      running = JobRecord.where(state: "running", claimed_by: process_id)
      now = Time.now.utc
      error = { last_error_class: "Bobbin::ProcessDied", last_error_message: "#{reason} while this job was running",
                last_error_backtrace: nil, claimed_at: nil }
      failed = running.where("attempts >= max_attempts + ?", Bobbin.config.crash_retries)
                      .update_all(error.merge(state: "failed", finished_at: now))
      ready = running.update_all(error.merge(state: "ready", run_at: now, started_at: nil))
      Bobbin.logger.warn("bobbin: #{reason}; #{ready} jobs returned to ready, #{failed} failed") if ready + failed > 0
      ready + failed
    end
  end
end
