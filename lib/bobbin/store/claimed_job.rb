# frozen_string_literal: true

module Bobbin
  module Store
    # A job the worker claimed: everything needed to run it, as plain values (no Active Record model per job).
    # `due`: when a job claimed ahead of its run_at (Worker::Pacer::LEAD) may start, on Bobbin.monotonic: the claim's
    # answer said how long until its run_at by the database's clock, counted from when the answer was read (so never
    # early, whatever the clocks of the hosts); nil for a job that was due when claimed.
    ClaimedJob = Struct.new(:id, :queue, :class_name, :arguments, :attempts, :max_attempts, :active_job_id, :crashes, :concurrency_key, :due)
  end
end
