# frozen_string_literal: true

module Bobbin
  module Store
    # What became of a job: state "succeeded", "failed", or "ready" (or "blocked", for a job with a concurrency
    # limit) again: a retry at run_at. `concurrency_key` and `queue` are not written: finishing frees the key's
    # slot, and a retry is announced to the workers of its queue. `attempts` is the attempt that ran (the claim's
    # count): an outcome is written only to a row still at that attempt, so one sent again after its reply was lost
    # (it committed) cannot end the job's next run, which this same worker may have claimed meanwhile.
    Outcome = Struct.new(:id, :state, :finished_at, :run_at, :error_class, :error_message, :backtrace, :concurrency_key, :queue,
                         :attempts) do
      # The members the finish statements write, in their order.
      const_set(:WRITTEN, %i[id state finished_at run_at error_class error_message backtrace attempts].freeze)
    end
  end
end
