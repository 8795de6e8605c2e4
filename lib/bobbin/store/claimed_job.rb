# frozen_string_literal: true

module Bobbin
  module Store
    # A job the worker claimed: everything needed to run it, as plain values (no Active Record model per job).
    ClaimedJob = Struct.new(:id, :queue, :class_name, :arguments, :attempts, :max_attempts, :active_job_id, :crashes, :concurrency_key)
  end
end
