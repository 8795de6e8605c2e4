# frozen_string_literal: true

require_relative "connection_budget"
require_relative "worker/execution"
require_relative "worker/outcome_buffer"
require_relative "worker/fiber_executor"
require_relative "worker/thread_executor"
require_relative "worker/heartbeat"

module Bobbin
  # One worker pool in one process: claims jobs in batches as its slots free up (plus the few it will start
  # within a claim's round trip) and runs them as fibers or threads.
  #
  #   Bobbin::Worker.new(queues: ["llm", "default"], fibers: 500).start   # until TERM/INT
  #   Bobbin::Worker.new(queues: ["*"], threads: 10).run_until_empty       # drains, then returns
  class Worker
    # Raised into job threads that outlive the shutdown timeout.
    class Shutdown < Exception; end # rubocop:disable Lint/InheritException -- must pass through the jobs' rescue StandardError

    GATHER = 0.003
    PREFETCH_WINDOW = 0.01

    attr_reader :selection, :executor, :process_id, :name

    def initialize(queues: [ "*" ], fibers: nil, threads: nil, polling_interval: nil, shutdown_timeout: nil, name: nil,
                   supervisor: nil)
      raise ConfigurationError, "a worker needs exactly one of fibers: N or threads: N" unless fibers.nil? ^ threads.nil?

      size = Integer(fibers || threads)
      raise ConfigurationError, "#{fibers ? 'fibers' : 'threads'} must be at least 1, got #{size}" if size < 1

      @selection = Store::QueueSelection.new(queues)
      @executor = (fibers ? FiberExecutor : ThreadExecutor).new(size, on_done: method(:wake))
      @polling_interval = polling_interval || Bobbin.config.polling_interval
      @shutdown_timeout = shutdown_timeout || Bobbin.config.shutdown_timeout
      @name = name || "#{@executor.mode}-#{size}"
      @supervisor = supervisor
      @wake_reader, @wake_writer = IO.pipe
    end

    # Runs in the foreground until TERM or INT (graceful) or QUIT (immediate).
    def start
      previous = { "TERM" => -> { stop }, "INT" => -> { stop }, "QUIT" => -> { stop(timeout: 0) } }
                 .to_h { |signal, handler| [ signal, trap(signal) { handler.call } ] }
      run
    ensure
      previous&.each { |signal, handler| trap(signal, handler || "DEFAULT") }
    end

    # Runs in the foreground until `stop`, leaving signals to the caller (the supervisor's async mode).
    def run = work(drain: false)

    # Runs until no job is due and none is running, then returns.
    def run_until_empty = work(drain: true)

    # Asks the worker to stop claiming and shut down (safe from a signal handler).
    def stop(timeout: nil)
      @shutdown_timeout = timeout if timeout
      @stopping = true
      wake
    end

    # Live numbers for the process row, process title and dashboard.
    def status
      { mode: @executor.mode, capacity: @executor.capacity, busy: @executor.busy, queues: @selection.to_s, name: @name }
    end

    private
      def work(drain:)
        ConnectionBudget.check!(@executor.mode, @executor.capacity)
        boot
        @executor.run do
          services = [ @executor.spawn_service { @outcomes.run }, @executor.spawn_service { @heartbeat.run } ]
          claim_loop(drain)
          shut_down(services)
        end
      ensure
        finish
      end

      def boot
        @stopping = false
        @rate = 0.0
        @rate_at = monotonic
        @rate_done = @executor.completed
        @execution = Execution.new
        @process_id = ProcessRecord.register(kind: "worker", name: @name, metadata: status, supervisor_id: @supervisor&.fetch(:id)).id
        @claimer = Store.open(@selection)
        @writer = Store.open(@selection)
        @outcomes = OutcomeBuffer.new(@writer, @process_id)
        @heartbeat = Heartbeat.new(self, @writer, supervisor_pid: @supervisor&.fetch(:pid), title: !@supervisor&.fetch(:async))
        Bobbin.logger.info("bobbin worker #{@process_id} (pid #{::Process.pid}) started: #{@name}, queues #{@selection}")
      end

      def claim_loop(drain)
        backlog = false
        until @stopping
          gather if backlog
          room = self.room
          jobs = room.positive? ? claim(room) : []
          jobs.each { |job| @executor.post(job.id) { @outcomes << @execution.call(job) } }
          backlog = room.positive? && jobs.size == room
          next if backlog
          break if drain && jobs.empty? && @executor.busy.zero? && drained?

          wait(@polling_interval) unless drain && @executor.busy.zero?
        end
      end

      # With work waiting, jobs that started together end together: rather than one claim per freed slot,
      # wait up to GATHER seconds for a quarter of the pool to free up, then claim them in one statement.
      def gather
        deadline = monotonic + GATHER
        wait(deadline - monotonic) while room < @executor.capacity / 4 && monotonic < deadline && !@stopping
      end

      # How many jobs to claim now: the free slots plus the prefetch, less those already waiting for a slot.
      def room = @executor.capacity + prefetch - @executor.busy

      # Jobs claimed beyond the free slots, so that a slot that frees up while a claim is on its way starts its
      # next job at once: as many as this worker finishes in PREFETCH_WINDOW, at most a quarter of the pool.
      # Slow jobs get none, so a job never waits here on a busy worker while another worker could run it.
      def prefetch
        now = monotonic
        if now - @rate_at >= 0.25
          done = @executor.completed
          @rate = (done - @rate_done) / (now - @rate_at)
          @rate_at = now
          @rate_done = done
        end
        (@rate * PREFETCH_WINDOW).floor.clamp(0, @executor.capacity / 4)
      end

      def claim(limit)
        jobs = @claimer.claim(@process_id, limit)
        @claim_failures = reconcile(jobs) if @claim_failures
        jobs
      rescue Store::Unavailable => error
        Bobbin.logger.warn("bobbin worker #{@process_id}: #{error.message}; retrying") unless @claim_failures
        @claim_failures = (@claim_failures || 0) + 1
        wait([ 0.1 * (2**@claim_failures), 5 ].min)
        []
      end

      # True once everything is written and nothing was written since the last empty claim (a retry may be due).
      def drained?
        return false unless @outcomes.flush

        (@outcomes.written == @drain_mark).tap { @drain_mark = @outcomes.written }
      end

      # After an outage a claim may have committed without us seeing its rows: hand such jobs back, keeping
      # those handed to the executor, those with an unwritten outcome and `claimed`, the ones the first claim after it returned.
      def reconcile(claimed)
        @claimer.release(@process_id, @executor.held_ids + @outcomes.pending_ids + claimed.map(&:id))
        Bobbin.logger.info("bobbin worker #{@process_id}: database reachable again")
        nil
      end

      def shut_down(services)
        deadline = monotonic + @shutdown_timeout
        @executor.drop_queued
        wait([ deadline - monotonic, 0.05 ].min) while @executor.busy.positive? && monotonic < deadline
        @executor.stop_all if @executor.busy.positive?
        @outcomes.stop
        @heartbeat.stop
        services.each { |service| @executor.join(service) }
        @outcomes.flush
        released = @claimer.release(@process_id)
        Bobbin.logger.info("bobbin worker #{@process_id} stopped; #{released} unfinished jobs returned to ready")
      end

      def finish
        @claimer&.release(@process_id)
        ProcessRecord.where(id: @process_id).delete_all if @process_id
        [ @claimer, @writer ].compact.each(&:close)
      rescue StandardError => error
        Bobbin.logger.warn("bobbin worker #{@process_id}: could not deregister (others will recover its jobs): #{error.message}")
      end

      def wake
        @wake_writer.write_nonblock(".", exception: false)
      end

      # Sleeps up to `timeout` seconds or until woken. A deadline that passed between the caller's check and
      # this call waits zero, not a negative interval (IO#wait_readable raises on that).
      def wait(timeout)
        @wake_reader.wait_readable([ timeout, 0 ].max)
        @wake_reader.read_nonblock(4096, exception: false)
      end

      def monotonic = ::Process.clock_gettime(::Process::CLOCK_MONOTONIC)
  end
end
