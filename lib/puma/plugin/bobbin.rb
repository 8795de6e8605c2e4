# frozen_string_literal: true

require "puma/plugin"

# `plugin :bobbin` in config/puma.rb: once Puma has booted, starts `bobbin start` (the supervisor and the workers
# of config/bobbin.yml) beside it, in a process group of its own, and stops it with Puma. If the supervisor dies,
# Puma stops gracefully too, once the workers it left have stopped, and exits with status 1 (a process manager
# restarts both); if Puma dies, the supervisor notices within a second and stops gracefully. A restart of Puma,
# hot (USR2) or phased (USR1, clustered), stops Bobbin gracefully and starts it again, on the new code, once Puma has
# booted again and the old one has stopped (a hot restart waits for it first; a phased one goes on meanwhile). A
# refork (`fork_worker`) restarts nothing of Bobbin's.
Puma::Plugin.create do
  # Called by Puma with its launcher. Once per Puma: config/puma.rb naming the plugin twice (a `plugin :bobbin` written by
  # hand beside the generator's line) made two instances, and each started a supervisor running every pool.
  def start(launcher)
    return if self.class.instance_variable_get(:@started)

    self.class.instance_variable_set(:@started, true)
    @launcher = launcher
    @log_writer = launcher.log_writer
    @puma_pid = Process.pid
    exit_failed_on_crash
    events = launcher.events
    on(events, :after_booted, :on_booted) { @reforked ? @reforked = false : start_supervisor }
    on(events, :after_stopped, :on_stopped) { stop_supervisor }
    on(events, :before_restart, :on_restart) do
      next @reforked = true if refork? # the same code: Bobbin runs on, and Puma's boot after it starts no second one
      phased_restart? ? stop_for_phased_restart : stop_supervisor
    end
    in_background { watch_supervisor }
  end

  private
    # Puma 7 renamed its hooks (on_booted → after_booted, …); use whichever this Puma has.
    def on(events, name, old_name, &block)
      events.public_send(events.respond_to?(name) ? name : old_name, &block)
    end

    # `bobbin start` (puma/plugin/bobbin/supervisor.rb) spawned as a process of its own, not forked from Puma: a fork taken
    # while a request of Puma's was inside an SQLite call (its write waiting on another process's lock) hung for ever
    # in the sqlite3 gem's after-fork close of that connection, whose mutex the request's thread held, and no job ran
    # (a trial). A fresh process inherits no connection, no listening socket of Puma's (close_others: a Bobbin that
    # held them kept a killed Puma's port in use while it finished its jobs, and the pipe whose end tells a clustered
    # Puma's workers their master died) and no at_exit hook. Its own process group: when it dies (kill -9), the workers
    # it leaves are found by it, to be stopped and waited for. Puma's Bundler (`bin/rails server` sets no RUBYOPT).
    def spawn_supervisor
      script = File.expand_path("bobbin/supervisor.rb", __dir__)
      env, setup = gemfile ? [ { "BUNDLE_GEMFILE" => gemfile }, "-rbundler/setup" ] : [ {}, nil ]
      Process.spawn(env, RbConfig.ruby, *setup, script, @puma_pid.to_s, pgroup: true, close_others: true)
    end

    # The Gemfile of Puma's bundle, if it runs in one.
    def gemfile
      ::Bundler.default_gemfile.to_s if defined?(::Bundler)
    rescue ::Bundler::GemfileNotFound
      nil
    end

    # Puma booted: at start, and again after each restart.
    def start_supervisor
      return @start_pending = true if @replaced # after a phased restart: once the old one has stopped (watch_supervisor)

      @pid = spawn_supervisor
      stop_on_puma_term
    end

    # A phased restart (USR1, clustered) runs in Puma's master loop, and a hot one (USR2) from the launcher, which has
    # left :run by then.
    def phased_restart? = @launcher.instance_variable_get(:@status) == :run

    # A refork (`fork_worker`: after its request count, or URG) fires the restart hook as a phased restart does, with
    # no new code: Bobbin was stopped and started again, its running jobs drained and none claimed meanwhile, every
    # 1,000 requests (a review).
    def refork? = @launcher.instance_variable_get(:@runner)&.instance_variable_get(:@pending_phased_restart) == :refork

    # A phased restart goes on in Puma's master loop, which waiting here for Bobbin's running jobs held up: past Puma's
    # worker_timeout, the master then killed every one of its workers as timed out, requests and all (a trial). Bobbin
    # is told to stop, and the watcher starts it again once it has stopped and Puma has booted again.
    def stop_for_phased_restart
      return unless (pid = @pid)

      @replaced = pid
      @pid = nil # the watcher must not take this exit for a crash
      log("Stopping Bobbin (pid #{pid}) for the phased restart...")
      Process.kill(:TERM, pid)
    rescue Errno::ESRCH
      nil
    end

    # A clustered Puma's TERM stops its workers first and runs the after_stopped hooks only then: a worker stuck in its
    # own shutdown (puma/puma#3677) kept Bobbin running until worker_shutdown_timeout had passed (30 s; two trials),
    # and a process manager's stop timeout could kill it mid-job. Bobbin gets its TERM with Puma's, and stops beside
    # Puma's workers; after_stopped then waits for it. (Puma's own TERM handler runs right after.) INT too: in its own
    # process group, Bobbin no longer gets a terminal's Ctrl-C itself, and a second Ctrl-C still cuts its stop short.
    def stop_on_puma_term
      return if @term_chained

      %w[TERM INT].each { |name| forward(name) }
      @term_chained = true
    end

    def forward(name)
      puma_handler = Signal.trap(name) do |signal|
        if (pid = @pid)
          @stopping = pid
          log("Stopping Bobbin (pid #{pid}) beside Puma...")
          begin
            Process.kill(signal, pid)
          rescue Errno::ESRCH
            nil
          end
        end
        puma_handler.call(signal)
      end
      Signal.trap(name, puma_handler) unless puma_handler.respond_to?(:call) # Puma set none: leave it as it was
    end

    # Runs in Puma's TERM handler (its after_stopped hook; a trap context, where no Mutex may be taken) and before a
    # restart: Puma goes on once Bobbin has stopped (after a crash, once the workers it left have).
    def stop_supervisor
      @start_pending = false
      pid = @pid || @replaced # the one a phased restart stopped, if it still finishes its jobs
      @pid = nil # the watcher must not take this exit for a crash
      return wait_for_orphans unless pid

      unless @stopping == pid || @replaced == pid # told already: a second would be "TERM while stopping" in its log
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
        restart_replaced
        gone = @pid
        next unless gone && @stopping != gone && exited?(gone) && @pid == gone # not stopped on purpose meanwhile

        @pid = nil
        log("Bobbin's supervisor (pid #{gone}) exited; stopping Puma")
        crashed(gone)
        break
      end
    end

    # Once the supervisor a phased restart stopped has exited, the next one starts, if Puma has booted again meanwhile.
    def restart_replaced
      return unless (old = @replaced) && exited?(old)

      @replaced = nil
      start_supervisor if @start_pending
      @start_pending = false
    end

    # Stops Puma as its INT would, gracefully (requests finish), not by signalling it: a Puma ended by TERM dies by that
    # signal, which systemd's Restart=on-failure takes for a clean stop and does not restart. Puma then exits 1
    # (exit_failed_on_crash), once after_stopped has waited for the workers the supervisor left (told to stop now).
    def crashed(supervisor)
      @orphans = supervisor
      signal_group(:TERM, supervisor)
      @launcher.stop
    end

    # Puma's launcher has no exit status of its own: an at_exit handler that exits makes its status the process's.
    # Registered first, so it runs after Puma's own; only in Puma's process, not in the forks that inherit it.
    def exit_failed_on_crash
      at_exit { exit(1) if @orphans && Process.pid == @puma_pid }
    end

    # A worker whose supervisor died stops by itself within a second of it, running jobs finishing for up to
    # shutdown_timeout: Puma waits for them (killing them after that and 10 s more: a worker always exits within
    # shutdown_timeout + 5 s), so none outlives it.
    def wait_for_orphans
      return unless (group = @orphans)

      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + shutdown_timeout + 10
      sleep(0.1) while group_alive?(group) && Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
      signal_group(:KILL, group)
    end

    def shutdown_timeout = defined?(::Bobbin.config) ? ::Bobbin.config.shutdown_timeout : 25

    # True while a process of `group` lives. Reaps those that are Puma's own children: a Puma that is PID 1 (in a
    # container) inherits the orphans, and one it never waited for would stay a zombie, alive to kill(0).
    def group_alive?(group)
      reap(group)
      signal_group(0, group)
    end

    def reap(group)
      nil while Process.wait(-group, Process::WNOHANG)
    rescue Errno::ECHILD
      nil
    end

    # Sends `signal` to every process of `group`; false when none is left.
    def signal_group(signal, group)
      Process.kill(signal, -group)
      true
    rescue Errno::ESRCH, Errno::EPERM
      false
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
