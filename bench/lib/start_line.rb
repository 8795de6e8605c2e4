# frozen_string_literal: true

# Open-loop producers start together once all have booted, so no producer's boot (seconds of CPU on a small
# machine) overlaps the arrivals of another. The conductor calls `go`, each producer `wait`; they meet in a directory.
module StartLine
  module_function

  # Conductor: once `producers` have said they are ready (or the block says to stop waiting, e.g. one failed),
  # tells them all to start 0.2 s from now.
  def go(dir, producers, timeout: 120)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
    sleep 0.01 until Dir.glob(File.join(dir, "ready-*")).size >= producers || (block_given? && yield) ||
                     Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
    File.write(File.join(dir, "go.tmp"), (Process.clock_gettime(Process::CLOCK_REALTIME) + 0.2).to_s)
    File.rename(File.join(dir, "go.tmp"), File.join(dir, "go"))
  end

  # Producer `offset`: says it has booted (a file "ready-<offset>"), waits for the file "go" to hold the wall-clock
  # time every producer starts at, sleeps until then and returns that instant on the monotonic clock.
  def wait(dir, offset, timeout: 120)
    File.write(File.join(dir, "ready-#{offset}"), "")
    go = File.join(dir, "go")
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
    Kernel.sleep(0.002) until File.exist?(go) || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
    at = Float(File.read(go))
    Kernel.sleep([ at - Process.clock_gettime(Process::CLOCK_REALTIME), 0 ].max)
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end
end
