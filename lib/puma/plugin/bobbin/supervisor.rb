# frozen_string_literal: true

# `bobbin start` as the Puma plugin (puma/plugin/bobbin.rb) runs it, in a process of its own: ARGV[0] is Puma's pid.
# Once Puma has died (the parent is another process), the supervisor is told to stop gracefully, within a second.
puma = Integer(ARGV.fetch(0))
Thread.new { sleep(1) until Process.ppid != puma; Process.kill(:TERM, Process.pid) }
ARGV.replace([ "start" ])
load File.expand_path("../../../../exe/bobbin", __dir__)
