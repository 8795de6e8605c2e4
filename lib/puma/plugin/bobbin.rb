# frozen_string_literal: true

require "puma/plugin"

# `plugin :bobbin` in config/puma.rb: once Puma has booted, forks `bobbin start` (the supervisor and the workers
# of config/bobbin.yml) beside it, and stops it with Puma. If the supervisor dies, Puma stops too (a process
# manager restarts both); if Puma dies, the supervisor notices within a second and stops gracefully.
Puma::Plugin.create do
  # Called by Puma with its launcher.
  def start(launcher)
    @log_writer = launcher.log_writer
    @puma_pid = Process.pid
    events = launcher.events
    on(events, :after_booted, :on_booted) { @pid = fork { run_supervisor } }
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

    # Runs in Puma's TERM handler (its after_stopped hook): Puma exits once Bobbin has stopped.
    def stop_supervisor
      return unless @pid

      @stopping = true # the watcher must neither reap it nor take its exit for a crash
      log("Stopping Bobbin (pid #{@pid})...")
      Process.kill(:TERM, @pid)
      Process.wait(@pid)
      @pid = nil
    rescue Errno::ESRCH, Errno::ECHILD
      @pid = nil
    end

    def watch_supervisor
      loop do
        sleep(1)
        next if @stopping || @pid.nil? || Process.wait(@pid, Process::WNOHANG).nil?

        log("Bobbin's supervisor (pid #{@pid}) exited; stopping Puma")
        @pid = nil
        Process.kill(:TERM, @puma_pid)
        break
      end
    rescue Errno::ECHILD
      nil
    end

    def log(message)
      @log_writer.log(message)
    rescue IOError, SystemCallError
      nil
    end
end
