# frozen_string_literal: true

# Starts a generated app's Puma (`plugin :bobbin`) and waits for it and for Bobbin's supervisor beside it.
module PumaBeside
  # Puma with `config` (a path in the app): [Puma's pid, the supervisor's]. A Puma that did not boot in time is not
  # left running.
  def start_puma(config, log, env: {})
    pid = app.spawn("bundle", "exec", "puma", "-C", app.path(config), log: log, env: env)
    supervisor = wait_for("Bobbin beside Puma", timeout: 90) { supervisors(log).first }
    wait_for("Puma booted") { File.read(log).include?("Use Ctrl-C to stop") }
    [ pid, supervisor ]
  rescue Exception # rubocop:disable Lint/RescueException -- a Puma that did not boot in time is not left running
    Process.kill(:KILL, pid) if pid
    raise
  end

  # The supervisors the plugin started, in order, as their start lines in Puma's log name them.
  def supervisors(log) = File.read(log).scan(/^bobbin supervisor (\d+) \(fork\) starting/).flatten.map(&:to_i)
end
