# frozen_string_literal: true

require "async"
require "json"
require "logger"
require_relative "jobs"
require_relative "anatomy"

module FiberSafety
  # One measurement of bench/fiber_safety.rb, run in a process of its own (`fiber_safety.rb --cell NAME VARIANT`):
  # a fresh worker, a truncated jobs table, and what the stall detector said (its `stall.bobbin` events and its log
  # lines, each with the monotonic time it came) next to when each job really started and finished.
  class Cells
    # Where the blocking jobs go among the 50 HTTP jobs: ten HTTP calls before each, so some are in flight.
    BLOCKING_AT = [ 5, 16, 27, 38, 49 ].freeze

    # Stall log lines as they were written, with the time: [monotonic, line].
    class LogTap
      attr_reader :lines

      def initialize = @lines = Thread::Queue.new

      def write(line)
        @lines << [ FiberSafety.now, line ]
        $stderr.write(line)
      end

      def close = nil
    end

    # Jobs enqueued and succeeded in this cell's drains.
    attr_reader :jobs

    def initialize(url:, http_url:, sizes:)
      @http_url = http_url
      @sizes = sizes
      @log = LogTap.new
      Bobbin.config.logger = Logger.new(@log, level: Logger::WARN)
      Bobbin.connect(url)
      @stalls = Thread::Queue.new
      @jobs = { enqueued: 0, succeeded: 0 }
      ActiveSupport::Notifications.subscribe("stall.bobbin") { |event| @stalls << [ FiberSafety.now, event.payload ] }
    end

    # 50 HTTP jobs of 50 ms on fibers: 50 (thread_lane: 5), alone ("alone"), or beside 5 jobs making a 1 s C call
    # that does not yield, as fibers ("fibers") or on the thread lane ("thread lane").
    def falcon(variant)
      blocking = { "alone" => nil, "fibers" => BlockingCall, "thread lane" => LaneBlockingCall }.fetch(variant)
      pairs = Array.new(50) { [ HttpCall, [ "#{@http_url}/delay?ms=50" ] ] }
      BLOCKING_AT.each { |at| pairs.insert(at, [ blocking, [ 1_000 ] ]) } if blocking
      Net::HTTP.get_response(URI("#{@http_url}/delay?ms=1")) # this process's first request pays for loading and connecting
      drain(pairs, fibers: 50, thread_lane: 5)
      http = @times.select { |kind, *| kind == :http }
      { http: http.size, http_span_ms: span_ms(http), http_ms: percentiles(http.map { |_, _, started, finished| finished - started }),
        blocking: blocking ? named(:blocking) : [], stalls: stalls }
    end

    # One job busy in Ruby for 300 ms beside 10 jobs sleeping 50 ms, on fibers: 20.
    def busy(_variant = nil)
      drain([ [ BusyRuby, [ 300 ] ], *Array.new(10) { [ Sleep, [ 0.05 ] ] } ], fibers: 20)
      { busy: named(:busy), stalls: stalls }
    end

    # One 2 s blocking C call on fibers: 5, to see when the detector's "so far" log line comes.
    def ongoing(_variant = nil)
      drain([ [ BlockingCall, [ 2_000 ] ] ], fibers: 5)
      { blocking: named(:blocking), stalls: stalls }
    end

    # Ten jobs that each hold the loop 40 ms and one that holds it 80 ms, all woken in one loop turn (each sleeps
    # 50 ms first), on fibers: 20: none holds it for the 100 ms threshold, together they hold it ~480 ms.
    def lag(_variant = nil)
      drain([ *Array.new(10) { [ SleepThenBlock, [ 40 ] ] }, [ SleepThenBlock, [ 80 ] ] ], fibers: 20)
      holds = @times.select { |kind, *| kind == :hold }
      { holds: holds.map { |_, id, started, finished| [ id, ms(finished - started) ] }, span_ms: span_ms(holds),
        stalls: stalls, max_loop_lag_ms: @worker.detector.health[:max_loop_lag_ms] }
    end

    # 3 jobs each deflating 32 MB beside a ticker job waking every 5 ms, on fibers: 10, offload on ("offload 4") or
    # off ("offload 0"); or the same three deflates and ticker in a plain async loop ("async …", no Bobbin).
    def offload(variant)
      Deflate::DATA.replace(Array.new(3) { |i| Random.new(i).bytes(@sizes[:deflate_mb] << 20) })
      Bobbin::Worker::Offload.prepend(FirstOffload)
      return async_offload(variant) if variant.start_with?("async")

      Bobbin.config.offload_threads = Integer(variant[/\d+/])
      drain([ [ Ticker, [ 3 ] ], *Array.new(3) { |i| [ Deflate, [ i ] ] } ], fibers: 10, thread_lane: 0)
      deflates(@times.select { |kind, *| kind == :deflate }, @times.find { |kind, *| kind == :ticker }.last)
        .merge(max_loop_lag_ms: @worker.detector.health[:max_loop_lag_ms], stalls: stalls)
    end

    # The setups compared for cost, run in the order A B C C B A (`cost_repeats` times per cell, so a drift over the cell
    # weighs on all alike): the default (detector on, offload on), the detector off, offload off.
    SETUPS = { "default" => [ nil, 4 ], "detector off" => [ false, 4 ], "offload off" => [ nil, 0 ] }.freeze

    # `workload` ("noop", "sleep": 50 ms) drained by fibers: 100 in each setup: jobs/s and CPU per job; or ("idle") a
    # fiber pool of 100 with nothing to do for 3 s: the process's CPU per second, where the detector's own ticks show.
    # A process's first drain is slower whatever the setup (cold code paths and caches: ~20 % on noop), so one drain
    # warms up first and is not counted.
    def cost(workload)
      drain_for_cost(workload, nil) unless workload == "idle"
      order = (SETUPS.keys + SETUPS.keys.reverse) * @sizes.fetch(:cost_repeats, 1)
      runs = order.map do |setup|
        threshold, Bobbin.config.offload_threads = SETUPS.fetch(setup)
        { setup: setup, **(workload == "idle" ? idle(threshold) : drain_for_cost(workload, threshold)) }
      end
      { runs: runs, stalls: stalls }
    end

    # A fiber pool of 10,000 left running until TERM while bench/fiber_safety.rb's producer feeds it.
    def false_positives(_variant = nil)
      truncate
      Bobbin::Worker::StallDetector.prepend(Anatomy)
      worker = @worker = Bobbin::Worker.new(fibers: 10_000, polling_interval: 0.05)
      Signal.trap("TERM") { worker.stop }
      gc = GC.stat.slice(:count, :major_gc_count, :time)
      $stdout.puts("ready")
      $stdout.flush
      worker.run
      gc = GC.stat.slice(*gc.keys).to_h { |key, value| [ key, value - gc[key] ] }
      { stalls: stalls, anatomy: Array.new(Anatomy::REPORTS.size) { Anatomy::REPORTS.pop }, gc: gc,
        health: worker.detector.health.except(:recent_stalls) }
    end

    private
      def truncate = Bobbin::Record.connection_pool.with_connection { |c| c.execute("TRUNCATE bobbin_jobs, bobbin_processes") }

      # Enqueues `pairs` in slices, then runs a worker until they are done; keeps the ids, the jobs' times and how many
      # of the cell's jobs succeeded.
      def drain(pairs, cpu_from: nil, **worker)
        truncate
        @ids = pairs.each_slice(5_000).flat_map { |slice| Bobbin.enqueue_all(slice) }
        @classes = @ids.zip(pairs.map(&:first)).to_h
        FiberSafety.times
        @worker = Bobbin::Worker.new(polling_interval: 0.05, **worker)
        cpu_from&.call
        @worker.run_until_empty
        @times = FiberSafety.times
        @jobs = { enqueued: @jobs[:enqueued] + @ids.size, succeeded: @jobs[:succeeded] + Bobbin.counts.fetch("succeeded", 0) }
      end

      # Each job of `kind`: its id, how long it ran, and when the detector named it (event, log line), from its start.
      def named(kind)
        rows = Bobbin::Record.connection_pool.with_connection do |c|
          c.select_rows("SELECT id, stalls, longest_stall_ms FROM bobbin_jobs WHERE stalls > 0").to_h { |id, *counts| [ id, counts ] }
        end
        @times.select { |k, *| k == kind }.map do |_, id, started, finished|
          events = stall_events.select { |_, payload| payload[:id] == id }
          ongoing = log_lines.find { |_, line| line.include?(" #{id} has held the event loop") }
          { id: id, ran_ms: ms(finished - started), events: events.size, event_after_ms: events.first && ms(events.first[0] - started),
            reported_ms: events.first&.last&.dig(:duration_ms), location: events.first&.last&.dig(:location),
            ongoing_log_after_ms: ongoing && ms(ongoing[0] - started), row: rows[id] }
        end
      end

      # Every stall reported: job class, duration, where.
      def stalls = stall_events.map { |_, payload| payload.slice(:id, :class_name, :duration_ms, :location) }

      def stall_events = @stall_events ||= Array.new(@stalls.size) { @stalls.pop }

      def log_lines = @log_lines ||= Array.new(@log.lines.size) { @log.lines.pop }

      # Three deflates and a ticker in async's own loop: no worker pool, or a new thread for every C call.
      def async_offload(variant)
        pool = variant.include?("thread per call") ? ThreadPerCall.new : nil
        ticks = nil
        Async::Reactor.new(worker_pool: pool).run do |task|
          task.async { ticks = FiberSafety.late_ticks { Deflate::DONE.size < 3 } }
          3.times { |i| task.async { Deflate.new.perform(i) } }
        end.wait
        deflates(FiberSafety.times, ticks)
      end

      # How long the deflates took together, the ticker's worst lateness, and its worst once every deflate had
      # handed its first C call to a thread (before that each copies its 32 MB input on the loop, which no offload
      # can take off it).
      def deflates(times, ticks)
        firsts = Array.new(Deflate::DONE.size) { Deflate::DONE.pop }
        offloaded = firsts.all?(&:last) && firsts.map(&:last).max
        { deflate_span_ms: span_ms(times), worst_lateness_ms: ticks.map(&:last).max.round(1),
          before_first_offload_ms: firsts.map { |started, first| first && ms(first - started) },
          worst_lateness_after_ms: offloaded && ticks.select { |asked, _| asked > offloaded }.map(&:last).max&.round(1) }
      end

      def drain_for_cost(workload, threshold)
        jobs = @sizes[:"#{workload}_jobs"]
        cpu = nil
        drain(Array.new(jobs) { [ workload == "noop" ? Noop : Sleep50, [] ] }, fibers: 100, stall_threshold: threshold,
                                                                               cpu_from: -> { cpu = cpu_now })
        cpu = cpu_now - cpu
        finished = @times.sort
        first = workload == "noop" ? finished.first : finished.first - 0.05
        { jobs: finished.size, jobs_per_second: (jobs / (finished.last - first)).round(1), cpu_us_per_job: (cpu / jobs * 1e6).round(1) }
      end

      # The whole process's CPU per second of wall time while its pool has nothing to do (after a second to boot).
      def idle(threshold, seconds = 3)
        truncate
        worker = Bobbin::Worker.new(fibers: 100, stall_threshold: threshold)
        meter = Thread.new do
          sleep(1)
          cpu, wall = cpu_now, FiberSafety.now
          sleep(seconds)
          ((cpu_now - cpu) / (FiberSafety.now - wall) * 1000).round(2).tap { worker.stop }
        end
        worker.run
        { cpu_ms_per_second: meter.value }
      end

      def cpu_now = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)

      def span_ms(times) = ms(times.map { |t| t[3] }.max - times.map { |t| t[2] }.min)

      def percentiles(seconds)
        sorted = seconds.sort
        { p50: ms(sorted[(sorted.size - 1) / 2]), p99: ms(sorted[((sorted.size - 1) * 0.99).round]), max: ms(sorted.last) }
      end

      def ms(seconds) = (seconds * 1000).round(1)
  end

  # A worker pool for async that starts a thread for every offloaded call (the issue's 117 ms reference).
  class ThreadPerCall
    prepend FirstOffload

    def call(work) = Thread.new(&work).value

    def close = nil
  end
end
