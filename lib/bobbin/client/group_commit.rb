# frozen_string_literal: true

module Bobbin
  module Client
    # Enqueues made at the same time outside a transaction, by the threads or fibers of one process, share one
    # INSERT, one commit and one announcement. A caller that finds no insert under way writes its rows at once (so
    # a lone producer waits for nothing); callers arriving meanwhile wait, and the first of them then writes all of
    # their rows in one statement. Every caller returns only once the commit holding its rows is done, so the
    # guarantee stands: when enqueue returns, the job is durable. PostgreSQL's commit (a WAL flush) is paid once
    # per batch instead of once per job. A writer whose last batch came from several callers waits up to GATHER for
    # them to come back (threads return through the GVL one by one), so batches stay whole rather than
    # alternating between one caller and the rest.
    class GroupCommit
      # At most this many rows, and this many times `max_argument_bytes` of arguments (64 MB by default), in one
      # statement; the rest wait for the next.
      MAX_ROWS = 5_000
      MAX_ARGUMENTS = 64
      # Seconds a writer waits for the callers of the last batch to come back (only when it had several).
      GATHER = 0.0005

      # One caller's rows, the answer it waits for, and whether it was handed the pen.
      Request = Struct.new(:rows, :answers, :lead) do
        def answer(kind, value) = answers << [ kind, value ]
      end

      # `write` takes rows and returns their ids in order (it inserts, commits and announces).
      def initialize(&write)
        @write = write
        @lock = Mutex.new
        @waiting = []
        @writing = false
        @last_size = 1
      end

      # Writes `rows` (with whatever other callers bring meanwhile); returns their ids. Raises what the write
      # raised for them.
      def insert(rows)
        request = Request.new(rows, Thread::Queue.new, false)
        lead = @lock.synchronize do
          @waiting << request
          !@writing && (@writing = true)
        end
        ids = lead ? write_batches(request) : await(request)
        request = nil
        ids
      ensure
        abandon(request) if request
      end

      # True while a caller is writing a batch.
      def writing? = @lock.synchronize { @writing }

      # How many callers wait for the next batch.
      def queued = @lock.synchronize { @waiting.size }

      private
        # Waits for the batch holding `request` to be written, or to be handed the pen.
        def await(request)
          kind, value = request.answers.pop
          case kind
          when :ids then value
          when :error then raise value
          else write_batches(request)
          end
        end

        # Writes the waiting requests until `own` is written, then hands the pen to the next waiter, if any. An
        # interrupt of the writer's thread (Timeout.timeout, rack-timeout's Thread#raise) waits until the batch it
        # took is written and every caller of it answered, then ends the writer alone: raised mid-write, it was
        # handed to the batch's other callers, who had set no timeout and most of whose jobs were stored (a review).
        def write_batches(own)
          loop do
            gather
            batch = Thread.handle_interrupt(Object => :never) { take.tap { |taken| write(taken, own) } }
            break if batch.include?(own)
          end
          answer_of(own)
        ensure
          hand_over
        end

        # When the last batch came from several callers, wait a moment (at most GATHER) for as many again: they
        # are on their way back from the last commit, and one statement for all of them beats one each.
        def gather
          deadline = Bobbin.monotonic + GATHER
          sleep(GATHER / 8) while @lock.synchronize { @waiting.size } < @last_size && Bobbin.monotonic < deadline
        end

        def take
          @lock.synchronize do
            rows = bytes = 0
            max_bytes = Enqueuer.statement_bytes(MAX_ARGUMENTS)
            batch = @waiting.take_while do |request|
              rows += request.rows.size
              bytes += request.rows.sum { |row| row[:arguments].bytesize }
              (rows <= MAX_ROWS && bytes <= max_bytes) || request.equal?(@waiting.first)
            end
            @waiting.shift(batch.size)
            @last_size = batch.size
            batch
          end
        end

        # Passes the pen to the first waiter (under the lock, so `abandon` sees who holds it), or puts it down.
        def hand_over
          @lock.synchronize { pass_pen }
        end

        def pass_pen
          following = @waiting.first
          if following
            following.lead = true
            following.answer(:lead, nil)
          else
            @writing = false
          end
        end

        # A caller that stopped waiting (a timeout or a kill in its thread or fiber; it raised, or the write failed
        # for it): if its rows are still queued they are dropped, so they are not stored after the caller was told
        # otherwise, and a pen handed to it goes to the next waiter. Without this, the pen would wait with a caller
        # that is gone and every later enqueue of the process would wait for ever.
        def abandon(request)
          @lock.synchronize do
            next unless @waiting.delete(request)

            pass_pen if request.lead
          end
        end

        # One statement for the batch; if the database refuses it (not a lost connection), each request alone,
        # so one request's bad row cannot fail the others. Every caller of the batch is answered, whatever happens.
        # A refusal that is no row's (a lock waited for in vain: SQLite's busy timeout, PostgreSQL's lock_timeout; a
        # read-only or cancelling server) is every caller's: each alone waited the timeout again, the batch's last
        # caller ten times the busy timeout the README promises for ten callers (a trial).
        def write(batch, own)
          ids = @write.call(batch.flat_map(&:rows))
          batch.each { |request| request.answer(:ids, ids.shift(request.rows.size)) }
        rescue ActiveRecord::StatementInvalid => error
          return refuse(batch, error) if batch.size == 1 || error.is_a?(ActiveRecord::ConnectionFailed) || Store.transient?(error)

          batch.each { |request| write([ request ], own) }
        rescue StandardError => error # the database's answer, or the app's: every caller hears it
          refuse(batch, error)
        rescue Exception => error # rubocop:disable Lint/RescueException -- the writer stopped mid-write (its fiber's timeout, Async::Stop)
          unknown = EnqueueError.new("the enqueue writing this job with others was interrupted (#{error.class}); it may or may not be stored")
          batch.each { |request| request.answer(:error, request.equal?(own) ? error : unknown) }
        end

        def refuse(batch, error) = batch.each { |request| request.answer(:error, error) }

        def answer_of(request)
          kind, value = request.answers.pop
          kind == :error ? raise(value) : value
        end
    end
  end
end
