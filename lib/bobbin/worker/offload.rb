# frozen_string_literal: true

module Bobbin
  class Worker
    # A small pool of reused threads for the C calls Ruby (≥ 3.4) marks offload-safe: zlib's deflate, and others
    # that release the GVL. Ruby hands them to the fiber scheduler's `blocking_operation_wait`; a fiber pool's event
    # loop passes them here, so the fiber that made the call waits for its thread while the others keep running.
    # (async's own worker pool needs io-event's WorkerPool, which Ruby 3.4 builds do not have.)
    #
    # In a process a job forks, the pool's threads are the parent's and do not exist, and the work queued for them is the
    # parent's: run there, a connect under way in the parent was made a second time on the socket both share. A child
    # runs its own blocking calls inline, and closing (async closes the scheduler in the child) waits for nothing.
    class Offload
      # `size` threads at most, started on first use and kept until `close`.
      def initialize(size)
        @size = size
        @work = Thread::Queue.new
        @threads = []
        @lock = Mutex.new
        @pid = ::Process.pid
      end

      # Runs `work` (a Proc from Ruby's blocking operation) on a pool thread and returns its result; waits without
      # blocking the event loop (Thread::Queue#pop yields to the fiber scheduler). Raises what the work raised.
      def call(work)
        return Fiber.blocking { work.call } unless @pid == ::Process.pid # a forked child (see above): Ruby runs it itself

        start_thread
        done = Thread::Queue.new
        @work << [ work, done ]
        value, error = outcome(done)
        raise error if error

        value
      end

      # Lets the threads finish what they hold and stop.
      def close
        @work.close
        return @lock.synchronize { @threads.clear } unless @pid == ::Process.pid # a forked child: see `call`

        @lock.synchronize { @threads.each(&:join) }
      end

      # Threads started so far.
      def threads = @lock.synchronize { @threads.size }

      private
        # Waits for the work's outcome even when the fiber is interrupted meanwhile (a stop, QUIT, a timeout), then
        # raises the interruption. Ruby 3.4 runs the C call on memory of the calling fiber's stack: unwound early, the
        # fiber's stack went back to the pool while the call still ran (a worker died of a Bus Error on QUIT).
        def outcome(done)
          interrupted = nil
          begin
            result = done.pop
          rescue Exception => error # rubocop:disable Lint/RescueException -- raised again once the C call is done
            interrupted ||= error
            retry
          end
          raise interrupted if interrupted

          result
        end

        def start_thread
          return if @threads.size >= @size || @work.num_waiting.positive?

          @lock.synchronize do
            @threads << Thread.new { run }.tap { |thread| thread.name = "bobbin-offload" } if @threads.size < @size
          end
        end

        def run
          while (work, done = @work.pop)
            done << begin
              [ work.call, nil ]
            rescue Exception => error # rubocop:disable Lint/RescueException -- the caller's fiber raises it
              [ nil, error ]
            end
          end
        end
    end
  end
end
