# frozen_string_literal: true

module FiberSafety
  # What lay behind each stall the detector reported, for the false-positive run: prepended to the detector, it
  # notes at each suspicion and report the loop thread's CPU time and run-queue wait (Linux schedstat), GC time and
  # the loop's last beat, so a reported stall can be told apart from a loop the machine or GC held up.
  module Anatomy
    REPORTS = Thread::Queue.new

    private
      def suspect(job)
        @anatomy = { sched: sched, beat: @beat, started: @loop_thread[Bobbin::Worker::StallDetector::STARTED] }
        super
      end

      def report(ended)
        return super unless @suspect && @anatomy

        before = @stalls
        cpu, wait = sched.zip(@anatomy[:sched]).map { |now, was| ((now - was) / 1e6).round(1) }
        super.tap do
          next if @stalls == before

          at = @suspect[:at]
          REPORTS << { id: @suspect[:id], counted_from: @suspect[:since] == @anatomy[:beat] ? "last beat" : "job start",
                       counted_before_suspicion_ms: ((at - @suspect[:since]) * 1000).round(1), suspicion_to_end_ms: ((ended - at) * 1000).round(1),
                       gc_ms: GC.stat(:time) - @suspect[:gc_ms], loop_cpu_ms: cpu, loop_run_queue_ms: wait }
        end
      end

      # The loop thread's CPU time and run-queue wait so far (ns), from /proc.
      def sched = File.read("/proc/self/task/#{@loop_thread.native_thread_id}/schedstat").split.first(2).map(&:to_i)
  end
end
