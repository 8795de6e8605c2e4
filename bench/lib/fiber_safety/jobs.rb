# frozen_string_literal: true

require "fiddle"
require "net/http"
require "zlib"

# The jobs of bench/fiber_safety.rb. Each notes when it started and finished (monotonic clock, this process) in
# FiberSafety::TIMES, with its job id (the fiber-local the stall detector reads, so ids match its reports).
module FiberSafety
  TIMES = Thread::Queue.new
  # libc usleep: releases the GVL but is not offload-safe, so in a fiber it holds the event loop (Falcon's case).
  USLEEP = Fiddle::Function.new(Fiddle::Handle::DEFAULT["usleep"], [ Fiddle::TYPE_INT ], Fiddle::TYPE_INT)

  module_function

  def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)

  # Runs the block as job `kind`, noting its start and finish.
  def timed(kind)
    started = now
    yield
    TIMES << [ kind, Thread.current[Bobbin::Worker::StallDetector::JOB], started, now ]
  end

  # Every timing noted so far: [kind, id, started, finished].
  def times = Array.new(TIMES.size) { TIMES.pop }

  # The line of BlockingCall's C call, as the detector should report it.
  def call_line = File.readlines(__FILE__).index { |line| line.match?(/timed\(:blocking\) \{ USLEEP/) } + 1

  # A 50 ms GET to the fake server: Net::HTTP yields to the event loop while it waits.
  class HttpCall
    include Bobbin::Job
    bobbin_options retries: 0

    def perform(url) = FiberSafety.timed(:http) { Net::HTTP.get_response(URI(url)).value }
  end

  # A C call of `ms` that does not yield (Falcon's five requests).
  class BlockingCall
    include Bobbin::Job
    bobbin_options retries: 0

    def perform(ms) = FiberSafety.timed(:blocking) { USLEEP.call(ms * 1000) }
  end

  # Sleeps 50 ms (yields), then holds the loop `ms` with the same C call: several of them wake in one loop turn.
  class SleepThenBlock
    include Bobbin::Job
    bobbin_options retries: 0

    def perform(ms)
      sleep(0.05)
      started = FiberSafety.now
      USLEEP.call(ms * 1000)
      TIMES << [ :hold, Thread.current[Bobbin::Worker::StallDetector::JOB], started, FiberSafety.now ]
    end
  end

  # The same call on the fiber pool's thread lane.
  class LaneBlockingCall < BlockingCall
    bobbin_options runs_on: :thread
  end

  # Busy in Ruby (no I/O, no yield) for `ms`.
  class BusyRuby
    include Bobbin::Job
    bobbin_options retries: 0

    def perform(ms)
      FiberSafety.timed(:busy) do
        deadline = FiberSafety.now + ms / 1000.0
        nil while FiberSafety.now < deadline
      end
    end
  end

  # Deflates one of the 32 MB of random bytes made before the worker started (DATA, set by the cell).
  class Deflate
    include Bobbin::Job
    bobbin_options retries: 0

    DATA = []
    DONE = Thread::Queue.new

    def perform(index)
      started = FiberSafety.now
      FiberSafety.timed(:deflate) { Zlib.deflate(DATA.fetch(index)) }
      DONE << [ started, FirstOffload::FIRST[Fiber.current] ]
    end
  end

  # Wakes every 5 ms until `deflates` Deflate jobs are done; notes each wake-up's lateness.
  class Ticker
    include Bobbin::Job
    bobbin_options retries: 0, priority: -1

    def perform(deflates) = TIMES << [ :ticker, FiberSafety.late_ticks { Deflate::DONE.size < deflates } ]
  end

  # Sleeps 5 ms at a time while the block answers true; returns when each sleep began and how late it woke (ms).
  def late_ticks
    ticks = []
    while yield
      asked = now
      sleep(0.005)
      ticks << [ asked, (now - asked - 0.005) * 1000 ]
    end
    ticks
  end

  # Notes when each fiber first hands a C call to an offload thread (before that, Zlib copies its input on the loop).
  module FirstOffload
    FIRST = {}

    def call(work)
      FIRST[Fiber.current] ||= FiberSafety.now
      super
    end
  end

  # `sleep(seconds)`: waits on the event loop.
  class Sleep
    include Bobbin::Job
    bobbin_options retries: 0

    def perform(seconds) = sleep(seconds)
  end

  # Does nothing but note that it ran.
  class Noop
    include Bobbin::Job
    bobbin_options retries: 0

    def perform = TIMES << FiberSafety.now
  end

  # Sleeps 50 ms and notes that it ran.
  class Sleep50
    include Bobbin::Job
    bobbin_options retries: 0

    def perform
      sleep(0.05)
      TIMES << FiberSafety.now
    end
  end

  # GC pressure that is no job's stall: `steps` × 2,000 short strings, keeping the last 50 steps alive (so some get
  # old and major GCs come too), yielding between steps.
  class Garbage
    include Bobbin::Job
    bobbin_options retries: 0

    def perform(steps)
      kept = []
      steps.times do |step|
        kept[step % 50] = Array.new(2_000) { |i| "garbage #{i}" }
        sleep(0)
      end
    end
  end
end
