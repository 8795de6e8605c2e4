# frozen_string_literal: true

require_relative "jobs"

module FiberSafety
  # The load of the false-positive run, from a process of its own (as an app's web processes would enqueue): a wave
  # of 10,000 jobs sleeping 1 s every `wave` seconds, 500 noop jobs a second and 20 garbage-making jobs a second (200 × 2,000 strings each),
  # each on a fixed schedule (open loop: a late enqueue does not delay the next), for `seconds`.
  class Producer
    SLEEPERS = 10_000
    NOOPS_PER_SECOND = 500
    GARBAGE_PER_SECOND = 20
    GARBAGE_STEPS = 200

    def initialize(seconds, wave: 5)
      @seconds = seconds
      @wave = wave
    end

    # Enqueues everything; returns how many jobs of each kind.
    def run
      started = FiberSafety.now
      waves = Thread.new { every(@wave, started) { Bobbin.enqueue_all(Array.new(SLEEPERS) { [ Sleep, [ 1 ] ] }).size } }
      garbage = Thread.new { every(1.0 / GARBAGE_PER_SECOND, started) { Bobbin.enqueue_all([ [ Garbage, [ GARBAGE_STEPS ] ] ]).size } }
      noops = every(0.01, started) { Bobbin.enqueue_all(Array.new(NOOPS_PER_SECOND / 100) { [ Noop, [] ] }).size }
      { sleep: waves.value, garbage: garbage.value, noop: noops }
    end

    private
      # Calls the block every `interval` seconds from `started` until `@seconds` have passed; sums what it returns.
      def every(interval, started)
        count = 0
        (0..).each do |i|
          at = started + i * interval
          break count if at - started >= @seconds

          wait = at - FiberSafety.now
          sleep(wait) if wait.positive?
          count += yield
        end
      end
  end
end
