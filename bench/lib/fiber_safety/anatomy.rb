# frozen_string_literal: true

module FiberSafety
  # What lay behind each stall the detector reported, for the false-positive run: prepended to the detector, it
  # notes at each suspicion (once the detector has its trace on) and report the loop thread's CPU time and run-queue
  # wait (Linux schedstat), GC time and the loop's last beat, so a reported stall can be told apart from a loop the
  # machine or GC held up. The loop thread's CPU is a lower bound: the kernel brings a thread's schedstat CPU time up to
  # date at its ticks and switches, and here a 200 ms Ruby loop read as 0.1 ms while it ran.
  module Anatomy
    REPORTS = Thread::Queue.new

    private
      # After the detector's own suspicion: reading /proc lets go of the GVL, and a job running Ruby would run on
      # (and switch) before the detector had enabled its trace.
      def suspect(job)
        beat = @beat
        super.tap { @anatomy = @suspect && { sched: sched, beat: beat, gc: GC.stat(:time) } }
      end

      def report(ended)
        return super unless @suspect && @anatomy

        before = @stalls
        cpu, wait = sched.zip(@anatomy[:sched]).map { |now, was| ((now - was) / 1e6).round(1) }
        super.tap do
          next if @stalls == before

          at = @suspect[:at]
          REPORTS << { id: @suspect[:id], counted_from: @suspect[:since] == @anatomy[:beat] ? "last beat" : "the job's start as seen",
                       counted_before_suspicion_ms: ((at - @suspect[:since]) * 1000).round(1), suspicion_to_end_ms: ((ended - at) * 1000).round(1),
                       gc_ms: GC.stat(:time) - @anatomy[:gc], loop_cpu_ms: cpu, loop_run_queue_ms: wait }
        end
      end

      # The loop thread's CPU time and run-queue wait so far (ns), from /proc.
      def sched = File.read("/proc/self/task/#{@loop_thread.native_thread_id}/schedstat").split.first(2).map(&:to_i)
  end
end
