# frozen_string_literal: true

module Bobbin
  module Store
    # What became of a job: state "succeeded", "failed", or "ready" again (a retry at run_at).
    Outcome = Struct.new(:id, :state, :finished_at, :run_at, :error_class, :error_message, :backtrace)
  end
end
