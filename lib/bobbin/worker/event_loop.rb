# frozen_string_literal: true

require "async"

module Bobbin
  class Worker
    # A fiber pool's own event loop: async's, except that the loop's Interrupt stops the running jobs as a stop does.
    # A worker run by its caller (`run`, `run_until_empty`) leaves signals to it, so Ctrl-C raises Interrupt into the
    # loop, and async answers by cancelling every task with the Interrupt as the cause: each job was failed with its
    # Async::Cancel, for good with no retries left. `interrupt` (the executor's interrupt_all) comes first: the running
    # jobs are interrupted as by a stop's timeout (caused by a Shutdown, which Active Job's handlers pass on), stay
    # claimed, and go back to ready with their attempt as the worker stops (Worker#serve).
    class EventLoop < Async::Reactor
      def initialize(interrupt:, **)
        @interrupt = interrupt
        super(**)
      end

      # Cancels every task: on the loop's Interrupt, and once the loop has nothing left (no job running then).
      def cancel(...)
        @interrupt.call
        super
      end
    end
  end
end
