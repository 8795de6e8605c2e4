# frozen_string_literal: true

module Bobbin
  class Worker
    # A fiber pool with a thread lane: jobs whose class must not run as a fiber (`runs_on: :thread`) go to a small
    # ThreadExecutor beside the event loop; every other job runs as a fiber. The claim loop and shutdown see one
    # executor: busy, held jobs and interrupts add up over both, so a lane job is claimed, finished, released on TERM
    # and recovered after a crash like any other. The lane adds capacity only while it runs jobs: an idle lane
    # claims nothing extra (no job waits for a fiber while another worker could run it), and lane jobs waiting for
    # a lane thread take fiber slots, so a burst of them cannot make a worker hoard jobs.
    class Lanes
      attr_reader :fibers, :lane

      # `thread_job` answers, for a claimed job, whether it must run on the lane.
      def initialize(fibers, lane, thread_job:)
        @fibers = fibers
        @lane = lane
        @thread_job = thread_job
        @both = [ fibers, lane ]
      end

      # :fibers
      def mode = @fibers.mode

      # Fiber slots, plus the lane threads in use.
      def capacity = @fibers.capacity + [ @lane.busy, @lane.capacity ].min

      # Jobs handed over and not done, in both.
      def busy = @both.sum(&:busy)

      # Jobs waiting in either line.
      def queued = @both.sum(&:queued)

      # Jobs finished since start, in both.
      def completed = @both.sum(&:completed)

      # The fibers' loop is the lanes' loop.
      def loop_failed? = @fibers.loop_failed?

      # Ids of the jobs handed over and not yet done, in both.
      def held_ids = @both.flat_map(&:held_ids)

      # The same, with the attempt each runs as, in both.
      def held_attempts = @fibers.held_attempts.merge(@lane.held_attempts)

      # The claimed job `id` while either holds it.
      def job(id) = @fibers.job(id) || @lane.job(id)

      # The jobs running in both, with their runners.
      def runners = @both.flat_map(&:runners)

      # Hands `job` to the lane when its class asks for a thread, else to the fibers.
      def post(job, &) = (@thread_job.call(job) ? @lane : @fibers).post(job, &)

      # Takes back the jobs waiting in both lines; returns how many.
      def drop_queued = @both.sum(&:drop_queued)

      # Interrupts every running job in both.
      def interrupt_all = @both.each(&:interrupt_all)

      # Runs job `id`'s own code under the interrupt of the executor that holds it.
      def interruptible(id, &) = (@lane.job(id) ? @lane : @fibers).interruptible(id, &)

      # True when either interrupted job `id`.
      def interrupted?(id) = @both.any? { |executor| executor.interrupted?(id) }

      # Kills lane threads whose jobs ignored their interrupt, and with `fibers` such jobs' fibers too.
      def kill_stuck(fibers: false)
        @lane.kill_stuck
        @fibers.kill_stuck(fibers: fibers)
      end

      # Runs `body` inside the event loop with the lane's threads started beside it.
      def run(&body) = @fibers.run { @lane.run(&body) }
    end
  end
end
