# frozen_string_literal: true

module Bobbin
  module Store
    # A job the worker claimed: everything needed to run it, as plain values (no Active Record model per job).
    ClaimedJob = Struct.new(:id, :queue, :class_name, :arguments, :attempts, :max_attempts, :active_job_id, :crashes)

    # What became of a job: state "succeeded", "failed", or "ready" again (a retry at run_at).
    Outcome = Struct.new(:id, :state, :finished_at, :run_at, :error_class, :error_message, :backtrace)

    # The columns of a process row a worker re-registers with, after the id, in order.
    PROCESS_COLUMNS = %i[kind name pid hostname supervisor_id metadata].freeze

    # The columns a new job row carries, in the order the INSERT statements read them.
    NEW_JOB = %i[queue class_name arguments priority run_at max_attempts active_job_id].freeze

    # Formats a Time the way both databases compare and Active Record reads it back.
    def self.timestamp(time)
      time&.utc&.strftime("%Y-%m-%d %H:%M:%S.%6N")
    end
  end
end
