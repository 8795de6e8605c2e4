# frozen_string_literal: true

require "puma/plugin"

# `plugin :bobbin` in config/puma.rb: once Puma has booted, forks `bobbin start` (the supervisor and the workers
# of config/bobbin.yml) beside it, and stops it with Puma. If the supervisor dies, Puma stops too (a process
# manager restarts both); if Puma dies, the supervisor notices within a second and stops gracefully. A restart
# of Puma, hot (USR2) or phased (USR1, clustered), stops Bobbin gracefully first and starts it again, on the new
# code, once Puma has booted again.
Puma::Plugin.create do
  # Called by Puma with its launcher.
  def start(launcher)
    @log_writer = launcher.log_writer
    @puma_pid = Process.pid
    events = launcher.events
    on(events, :after_booted, :on_booted) { start_supervisor }
    on(events, :after_stopped, :on_stopped) { stop_supervisor }
    on(events, :before_restart, :on_restart) { stop_supervisor }
    in_background { watch_supervisor }
  end

  private
    # Puma 7 renamed its hooks (on_booted → after_booted, …); use whichever this Puma has.
    def on(events, name, old_name, &block)
      events.public_send(events.respond_to?(name) ? name : old_name, &block)
    end

    def run_supervisor
      Thread.new { sleep(1) until Process.ppid != @puma_pid; Process.kill(:TERM, Process.pid) }
      require "bobbin"
      exit!(Bobbin::CLI.start([ "start" ]))
    rescue Exception => error # rubocop:disable Lint/RescueException -- a fork of Puma must never run Puma's at_exit hooks
      warn("bobbin (puma plugin): #{error.class}: #{error.message}")
      exit!(1)
    end

    # Puma booted: at start, and again after each restart.
    def start_supervisor
      @pid = fork { run_supervisor }
      stop_on_puma_term
    end

    # A clustered Puma's TERM stops its workers first and runs the after_stopped hooks only then: a worker stuck in its
    # own shutdown (puma/puma#3677) kept Bobbin running until worker_shutdown_timeout had passed (30 s; two trials),
    # and a process manager's stop timeout could kill it mid-job. Bobbin gets its TERM with Puma's, and stops beside
    # Puma's workers; after_stopped then waits for it. (Puma's own TERM handler runs right after.)
    def stop_on_puma_term
      return if @term_chained

      puma_term = Signal.trap("TERM") do |signal|
        if (pid = @pid)
          @stopping = pid
          log("Stopping Bobbin (pid #{pid}) beside Puma...")
          begin
            Process.kill(:TERM, pid)
          rescue Errno::ESRCH
            nil
          end
        end
        puma_term.call(signal)
      end
      return Signal.trap("TERM", puma_term) unless puma_term.respond_to?(:call) # Puma set none: leave it as it was

      @term_chained = true
    end

    # Runs in Puma's TERM handler (its after_stopped hook; a trap context, where no Mutex may be taken) and before a
    # restart: Puma goes on once Bobbin has stopped.
    def stop_supervisor
      pid = @pid
      @pid = nil # the watcher must not take this exit for a crash
      return unless pid

      unless @stopping == pid # told already, with Puma's TERM: a second would be "TERM while stopping" in its log
        log("Stopping Bobbin (pid #{pid})...")
        Process.kill(:TERM, pid)
      end
      Process.wait(pid) # Errno::ECHILD when a clustered Puma's master reaped it first
    rescue Errno::ESRCH, Errno::ECHILD
      nil
    end

    def watch_supervisor
      loop do
        sleep(1)
        gone = @pid
        next unless gone && @stopping != gone && exited?(gone) && @pid == gone # not stopped on purpose meanwhile

        @pid = nil
        log("Bobbin's supervisor (pid #{gone}) exited; stopping Puma")
        Process.kill(:TERM, @puma_pid)
        break
      end
    end

    # True once `pid` has exited: reaped here, or already reaped by Puma (a clustered Puma's master reaps every child
    # it has, Bobbin's supervisor too, and then it is not ours to wait for).
    def exited?(pid)
      !Process.wait(pid, Process::WNOHANG).nil?
    rescue Errno::ECHILD
      true
    end

    def log(message)
      @log_writer.log(message)
    rescue IOError, SystemCallError
      nil
    end
end
