# frozen_string_literal: true

module Bobbin
  class Worker
    # What TTIN logs, as Sidekiq's thread dump does, and for fibers too: every job the process's workers run, each with
    # its own backtrace (a fiber pool's thread shows only the one job on the loop at that instant; each job fiber shows
    # where that job waits), then the process's other threads (the claim loop, heartbeat, outcome writer, lanes).
    # Built on a thread of its own, never in the signal handler, where a Logger may not take its Mutex.
    module Backtraces
      # The signal, Sidekiq's, so operators' habits carry over.
      SIGNAL = "TTIN"
      # Frames logged per job or thread, innermost first.
      FRAMES = 40

      module_function

      # Logs the dump of `workers` (the Workers of this process) at warn, from a new thread; safe from a trap.
      def log_later(workers) = Thread.new { Bobbin.logger.warn(report(workers)) }

      # The dump's text.
      def report(workers)
        jobs = workers.flat_map { |worker| worker.executor.runners.map { |runner, id| [ worker, runner, id ] } }
        threads = Thread.list - jobs.map { |_, runner, _| runner }.grep(Thread) - [ Thread.current ]
        lines = [ "bobbin #{::Process.pid}: #{SIGNAL}: #{count(jobs.size, 'running job')}, #{count(threads.size, 'other thread')}" ]
        jobs.each { |worker, runner, id| lines.concat(section(job_title(worker, id, runner), runner.backtrace(0, FRAMES))) }
        threads.each { |thread| lines.concat(section("thread #{thread.name || thread.object_id} (#{thread.status})", thread.backtrace(0, FRAMES))) }
        lines.map { |line| Printable.printable(line) }.join("\n") # a queue named with a newline or \e[2J writes no line of its own
      end

      def job_title(worker, id, runner)
        job = worker.executor.job(id)
        where = runner.is_a?(Thread) ? "thread #{runner.name}" : "fiber"
        "job #{id} #{job&.class_name} (queue #{job&.queue}, attempt #{job&.attempts}) on worker #{worker.process_id} #{worker.name}, #{where}"
      end

      def section(title, frames) = [ title, *Array(frames).map { |frame| "    #{frame}" } ]

      def count(number, noun) = "#{number} #{noun}#{'s' unless number == 1}"
    end
  end
end
