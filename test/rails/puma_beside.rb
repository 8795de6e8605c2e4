# frozen_string_literal: true

# Starts a generated app's Puma (`plugin :bobbin`), waits for it and for Bobbin's supervisor beside it, and for Puma
# to exit, telling Puma's own hang in its stop from the plugin's.
module PumaBeside
  # Why a test skips its check of Puma's exit when Puma hung in its own stop (puma_own_hang?).
  PUMA_OWN_HANG = "Puma hung in its own stop (puma/puma#3677), plugin or not"

  # Puma with `config` (a path in the app): [Puma's pid, the supervisor's]. A Puma that did not boot in time is not
  # left running.
  def start_puma(config, log, env: {})
    pid = app.spawn("bundle", "exec", "puma", "-C", app.path(config), log: log, env: thread_dump_env(log).merge(env))
    supervisor = wait_for("Bobbin beside Puma", timeout: 90) { supervisors(log).first }
    wait_for("Puma booted") { File.read(log).include?("Use Ctrl-C to stop") }
    [ pid, supervisor ]
  rescue Exception # rubocop:disable Lint/RescueException -- a Puma that did not boot in time is not left running
    Process.kill(:KILL, pid) if pid
    raise
  end

  # The supervisors the plugin started, in order, as their start lines in Puma's log name them.
  def supervisors(log) = File.read(log).scan(/^bobbin supervisor (\d+) \(fork\) starting/).flatten.map(&:to_i)

  # For a Puma whose threads' backtraces may be needed (test/support/thread_dump.rb): they go to `log`, once
  # wait_puma_exit writes the file this names (one an earlier Puma left is removed first).
  def thread_dump_env(log)
    FileUtils.rm_f("#{log}.dump")
    { "BOBBIN_THREAD_DUMP" => "#{log}.dump", "RUBYOPT" => "-r#{File.join(TestProcesses::ROOT, "test/support/thread_dump.rb")}" }
  end

  # Puma's exit status once `cause` (a signal, its supervisor's death) has stopped it; nil when Puma hung in its own
  # stop after the plugin had stopped Bobbin (puma_own_hang?), which fails nothing here but leaves the exit unchecked.
  def wait_puma_exit(pid, log, cause)
    status = wait_exit(pid, timeout: 60) and return status

    File.write("#{log}.dump", "")
    sleep(2)
    output = File.read(log)
    flunk("Puma did not exit within 60 s of #{cause}:\n#{output}") unless puma_own_hang?(output)
    warn("\nPuma hung in its own stop after the plugin had stopped Bobbin (puma/puma#94, #3677); the plugin's part passed")
  end

  # The supervisor the plugin started again after Puma's hot restart (USR2). Puma 8.0.2 hangs now and then in the stop
  # that comes before its exec, as in any stop (puma/puma#3677), before it runs any hook of the plugin: the test is
  # then skipped, the dump of Puma's threads in `log` saying so (CI on 43d2a37: no restart within 90 s).
  def supervisor_after_hot_restart(log)
    wait_for("Bobbin started again after the hot restart", timeout: 90) { supervisors(log)[1] }
  rescue Minitest::Assertion
    File.write("#{log}.dump", "")
    sleep(2)
    skip(PUMA_OWN_HANG) if File.read(log).match?(SERVER_THREAD_CLOSING)
    flunk("Bobbin did not start again within 90 s of Puma's hot restart:\n#{File.read(log)}")
  end

  # Puma's server thread stuck in IO#close of the pipe its stop has just written to (puma/puma#3677), as a thread dump shows it.
  SERVER_THREAD_CLOSING = /in 'IO#close'\n\s+\S+:in 'block in Puma::Server#handle_servers'/

  # Puma 8.0.2's own hang in its stop, plugin or not, recognised in its log by where it happens: after the plugin's
  # "Stopping Bobbin" (or "…exited; stopping Puma"), with a thread of Puma's where no hook of the plugin runs. On a
  # loaded machine, plain Puma hung so in about 2 runs of 100 after a TERM; with the plugin, 1 of 20 after an INT.
  # - The server thread waits forever in IO#close of the pipe Puma's stop has just written to (puma/puma#3677, fixed
  #   upstream by puma/puma#3940, in no release yet). After an INT, Puma's main thread waits for it in
  #   Puma::Single#run, before any after_stopped hook; after a TERM, in Puma::Server#stop, after them.
  # - A TERM's trap joins the server thread while the main thread joins it too (puma/puma#94): now and then the thread
  #   has gone and the trap's join still waits, after every after_stopped hook (Puma's own "Gracefully stopping").
  def puma_own_hang?(output)
    stopped = output.index(/Stopping Bobbin|exited; stopping Puma/) or return false
    return true if output.index(SERVER_THREAD_CLOSING, stopped)

    graceful = output.index("- Gracefully stopping", stopped) or return false
    output.index("in 'Puma::Server#stop'", graceful).present?
  end
end
