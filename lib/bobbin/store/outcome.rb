# frozen_string_literal: true

module Bobbin
  module Store
    # What became of a job: state "succeeded", "failed", or "ready" (or "blocked", for a job with a concurrency
    # limit) again: a retry at run_at. `concurrency_key` and `queue` are not written: finishing frees the key's
    # slot, and a retry is announced to the workers of its queue. `attempts` is the attempt that ran: written with the
    # outcome, and put back by a reclaim of the job while its outcome waits (recovery may have given it back).
    # `max_attempts`, when not nil, is the job's new one: a try its unknown class took is given back (Execution).
    Outcome = Struct.new(:id, :state, :finished_at, :run_at, :error_class, :error_message, :backtrace, :concurrency_key, :queue,
                         :attempts, :max_attempts) do
      # The members the finish statements write, in their order.
      const_set(:WRITTEN, %i[id state finished_at run_at error_class error_message backtrace attempts max_attempts].freeze)
    end
  end
end
