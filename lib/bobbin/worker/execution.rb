# frozen_string_literal: true

require_relative "../config/boot" # Boot.syntax_problem: a job file that does not parse

module Bobbin
  class Worker
    # Runs one claimed job and says what became of it. Whatever the job raises — StandardError, `exit`,
    # `abort`, `raise Interrupt`, even the executor's own stop exception — fails or retries that job; only a
    # job the executor interrupted (shutdown) lets its exception through, and then stays claimed until released.
    class Execution
      MAX_BACKOFF = 6 * 3600
      # A job whose class this worker does not have (a rolling deploy: web processes on the new code enqueue what only
      # new workers know, or the reverse) is tried this many times at least, each retry at most UNKNOWN_CLASS_BACKOFF
      # seconds after the last: about an hour and a half, whatever its own retries (an Active Job job has one attempt
      # here). A trial's jobs failed for good seconds before the new workers came up.
      UNKNOWN_CLASS_ATTEMPTS = 25
      UNKNOWN_CLASS_BACKOFF = 300
      CLASS_NAME = Client::Fields::CLASS_NAME
      BACKTRACE_LINES = 50
      BACKTRACE_CHARACTERS = 20_000
      MESSAGE_CHARACTERS = 10_000
      # Fiber storage (inherited by the job's own fibers and tasks): the job's ConnectionUse.
      CONNECTIONS = :bobbin_connections

      # What a job did with its connection pools: the connections it checked out and has not checked in (its lease among
      # them), and whether it checked one in with a transaction open.
      ConnectionUse = Struct.new(:checked_out, :left_open)

      # `with_connection` (Active Record >= 7.2's models use it for every query) checks its connection in as its block
      # ends, raised or not: a transaction a job began inside it (`connection.begin_transaction`) went back to the pool
      # open, the job succeeded, and the next jobs to check that connection out wrote into it and lost their rows (on
      # SQLite its write lock held up the worker's own writes). Inside a job, such a connection is rolled back as it is
      # checked in (thrown away if that fails) and the job fails with TransactionLeftOpen, as one left on its lease.
      # The connections a job checks out are noted too, so that those it kept can be checked in as it ends: reading every
      # pool's connections after each job instead cost a threads pool of 100 about a tenth of its noop rate (9 quick runs
      # alternated: median 8,075 jobs/s, against 9,069 before either and 8,938 with this).
      module PoolGuard
        def checkout(...)
          connection = super
          Fiber[CONNECTIONS]&.checked_out&.push(connection)
          connection
        end

        def checkin(connection)
          use = Fiber[CONNECTIONS]
          return super unless use

          use.checked_out.delete(connection)
          return super unless !@pinned_connection.equal?(connection) && connection.transaction_open?

          use.left_open = true
          super if Execution.roll_back(connection)
        end
      end

      # Rolls `connection`'s transactions back down to `keep`; true when it did, false when that failed and the connection
      # was thrown away instead (its state unknown, it must not go back to the pool).
      def self.roll_back(connection, keep: 0)
        connection.rollback_transaction while connection.open_transactions > keep
        true
      rescue StandardError
        connection.throw_away!
        false
      end

      # The job class named `name` (a Bobbin::Job or an Active Job class), loaded if need be; UnrunnableJob for a name that
      # is no job class's, UnknownJobClass for one this process cannot load (a deploy may bring it).
      def self.job_class(name)
        # No deploy brings a class of a name Ruby cannot have (written to the row from outside): it fails at once.
        raise UnrunnableJob, "#{name.inspect} is not a class name" unless name.match?(CLASS_NAME)

        job_class = Object.const_get(name)
        raise UnrunnableJob, "#{name} is not a job class (include Bobbin::Job or inherit ActiveJob::Base)" unless runnable?(job_class)

        job_class
      rescue NameError => error
        hint = AppExecutor.rails? ? "is it defined in this app (app/jobs)?" : "require its file in the worker process (bobbin start --require FILE)"
        raise UnknownJobClass, "unknown job class #{name} (#{error.message.lines.first.strip}); #{hint}"
      rescue SyntaxError => error # Prism's first line is only "file:6: syntax errors found": the complaint follows it
        raise UnknownJobClass, "job class #{name} could not be loaded (SyntaxError: #{Boot.syntax_problem(error)})"
      rescue ScriptError => error # its file (autoloaded) requires a missing gem, or does not parse: a deploy may fix it
        raise UnknownJobClass, "job class #{name} could not be loaded (#{error.class}: #{error.message.lines.first.strip})"
      end

      # The attempts a job whose class cannot be loaded may make: UNKNOWN_CLASS_ATTEMPTS, or its own if more.
      def self.unknown_class_attempts(max_attempts) = [ max_attempts, UNKNOWN_CLASS_ATTEMPTS ].max

      def self.runnable?(job_class)
        return false unless job_class.is_a?(Class)

        job_class.include?(Bobbin::Job) || active_job_class?(job_class)
      end

      def self.active_job_class?(job_class) = defined?(ActiveJob::Base) && job_class < ActiveJob::Base

      # `interrupted` answers, for a job id, whether the executor interrupted that job (shutdown); `interruptible` runs
      # the block, a job's own code, as the one stretch of the job that the executor's interrupt may cut
      # (Executor#interruptible). `hooks` wrap every job, outermost first (the app's reloader comes before them in a Rails app).
      def initialize(interrupted: ->(_id) { false }, interruptible: ->(_id, &block) { block.call }, hooks: Bobbin.config.perform_hooks,
                     logger: Bobbin.logger)
        @interrupted = interrupted
        @interruptible = interruptible
        @hooks = hooks
        # Active Job's own execute callbacks wrap its jobs in the Rails app's reloader; Bobbin's jobs get it first here.
        @rails = AppExecutor.rails?
        @job_hooks = (@rails ? [ AppExecutor.method(:wrap_job) ] : []) + hooks
        @logger = logger
        # The retries' jitter: Kernel#rand is the process's, and a job that called srand(42) gave every job failing after
        # it the same jitter, so they came back together (a review). Made in the worker's process, after any fork.
        @jitter = Random.new
        @classes = {}
        @thread_jobs = {}
        @pid = ::Process.pid
        pool = ActiveRecord::ConnectionAdapters::ConnectionPool
        pool.prepend(PoolGuard) unless pool <= PoolGuard
      end

      # True when `job`'s class asks to run on a thread (RunsOn), so a fiber pool hands it to its thread lane. A class
      # that cannot be looked up (unknown, or its file raised as it loaded: `ENV.fetch` of a variable not set) answers
      # false: the job fails as a fiber like anywhere else, with that error, and the claim loop goes on. Where the app
      # reloads its code (development) nothing is cached, and such a class answers true: a class added since the last
      # reload is found only once the job has reloaded the code, and on the lane a `runs_on: :thread` one does not
      # block the loop (one that does not ask for it runs there too, this once).
      def thread_job?(job)
        return @thread_jobs[job.class_name] if @thread_jobs.key?(job.class_name)

        RunsOn.thread?(lookup(job.class_name)).tap { |lane| @thread_jobs[job.class_name] = lane unless AppExecutor.reloading? }
      rescue StandardError
        AppExecutor.reloading?
      end

      # Performs `job` (a Store::ClaimedJob) and returns its Store::Outcome.
      def call(job)
        perform(job).tap { |result| leave_forked(job, result) unless ::Process.pid == @pid }
      end

      # The outcome of `job` when working it out raised (an error of Bobbin's own; an app's subscriber that raises is
      # only logged, see Instrumentation.instrument): the job is recorded failed with that error, so it is not left
      # running with no outcome, and its slot goes on to the next job.
      def unhandled(job, error)
        @logger.error("bobbin: could not record how #{named(job)} ended (#{describe(error)}); recording it as failed")
        error_outcome(job, "failed", error, finished_at: Store.timestamp(Time.now))
      end

      # The outcome of `job`, which ended its own thread or fiber (Thread.exit, Thread#kill, Fiber#kill) while it ran: a
      # failure like any other.
      def killed(job)
        error = ThreadKilled.new("#{job.class_name} #{job.id} ended its own thread or fiber (Thread.exit, Thread#kill or Fiber#kill)")
        retries_left?(job) ? retried(job, @classes[job.class_name], error) : failed(job, error)
      end

      private
        def perform(job)
          return outcome(job) unless Instrumentation.listening?(:perform_start) || Instrumentation.listening?(:perform)

          Instrumentation.instrument(:perform_start, id: job.id, class_name: job.class_name, queue: job.queue, attempts: job.attempts)
          Instrumentation.instrument(:perform, id: job.id, class_name: job.class_name, queue: job.queue, attempts: job.attempts) do |payload|
            outcome(job).tap { |result| payload[:state] = result.state }
          ensure
            # A job that ended its own thread or fiber left no outcome and no exception: the state `killed` records (it was
            # published with none, as a job a stopping worker interrupted, and logged "interrupted by the shutdown ()").
            payload[:state] ||= killed_state(job) unless $! || @interrupted.call(job.id)
          end
        end

        def killed_state(job) = retries_left?(job) ? waiting_state(job) : "failed"

        def retries_left?(job) = job.attempts < job.max_attempts

        # Where a job that will run again waits: behind its concurrency key's limit, or ready.
        def waiting_state(job) = job.concurrency_key ? "blocked" : "ready"

        # A process the job forked (`fork` without a block) came back here instead of exiting: it must not go on as
        # a copy of this worker, so it ends, with status 0 when the job's code in it returned and 1 when it raised.
        def leave_forked(job, result)
          @logger.warn("bobbin: a process forked by #{job.class_name} #{job.id} (pid #{::Process.pid}) returned into the worker; " \
                       "it exits (end forked processes with exit!)")
          Kernel.exit!(result.state == "succeeded" ? 0 : 1)
        end

        def outcome(job)
          job_class = nil
          left_open = false
          Fiber[CONNECTIONS] = use = ConnectionUse.new([], false)
          begin
            AppExecutor.between_reloads do
              if job.active_job_id
                perform_active_job(job)
              else
                @interruptible.call(job.id) do
                  around(job, @job_hooks) { (job_class = plain_class(job)).new.perform(*Client::Arguments.load(job.arguments)) }
                end
              end
            end
          ensure
            Fiber[CONNECTIONS] = nil
            left_open = roll_back_left_open(job) | use.left_open | check_in_kept(job, use.checked_out)
          end
          raise TransactionLeftOpen, "#{job.class_name} #{job.id} returned with a transaction still open; it was rolled back" if left_open
          Store::Outcome.new(job.id, "succeeded", Store.timestamp(Time.now), nil, nil, nil, nil, job.concurrency_key, job.queue, job.attempts)
        rescue UnrunnableJob => error
          failed(job, error)
        rescue UnknownJobClass => error
          attempts = self.class.unknown_class_attempts(job.max_attempts)
          job.attempts < attempts ? retried(job, nil, error, of: attempts, at_most: UNKNOWN_CLASS_BACKOFF, max_attempts: given_back(job)) : failed(job, error)
        rescue Exception => error # rubocop:disable Lint/RescueException -- exit, Interrupt or a stack overflow in a job fails the job, not the worker
          interrupted!(error) if @interrupted.call(job.id)
          retries_left?(job) ? retried(job, job_class || known_class(job), error) : failed(job, error)
        ensure
          ActiveRecord::Base.connection_handler.clear_active_connections!(:all)
        end

        # The class whose backoff a retry takes when the job failed before its class was looked up (an around_perform
        # hook raised before running it: the default's 2 s was used, not the class's); nil if it cannot be looked up.
        def known_class(job)
          job.active_job_id ? nil : resolve(job)
        rescue StandardError
          nil
        end

        # A transaction the job opened and never closed (`connection.begin_transaction`) would hold every later job's
        # writes on that pooled connection: they would join it, report success, and vanish when the connection closed.
        # It is rolled back (the connection thrown away if that fails); true when there was one. A job starts with no
        # connection leased, so any transaction open now is the job's, except on a pinned connection: Rails'
        # transactional tests pin one, inside a transaction of their own, for every thread. (A job the executor
        # interrupted has its connections thrown away instead: see `interrupted!`.)
        def roll_back_left_open(job)
          return false if $! && @interrupted.call(job.id)

          left = false
          ActiveRecord::Base.connection_handler.each_connection_pool do |pool|
            connection = pool.active_connection
            next unless connection&.transaction_open?

            keep = connection.try(:pinned) ? 1 : 0
            next unless connection.open_transactions > keep

            left = true
            Execution.roll_back(connection, keep: keep)
          end
          left
        end

        # Connections the job checked out itself (`connection_pool.checkout`) and did not check in: its fiber or thread
        # outlives it, so Active Record's reaper, which takes back a dead owner's, never would, and once pool-size such jobs
        # had run every later job waited checkout_timeout and failed. Each is checked in (rolled back first, and the job
        # failed, when it holds a transaction; thrown away when that fails or the job was interrupted, its state
        # unknown); true when one held a transaction.
        def check_in_kept(job, checked_out)
          return false unless ::Process.pid == @pid # a child the job forked: Active Record discarded its pools there

          owner = ActiveSupport::IsolatedExecutionState.context
          left = false
          checked_out.each do |connection| # checkin leaves the list alone now: the job's ConnectionUse is no longer in storage
            next unless connection.owner.equal?(owner) && !connection.equal?(connection.pool.active_connection) && !connection.try(:pinned)

            @logger.warn("bobbin: #{named(job)} kept a database connection it checked out (connection_pool.checkout without checkin); " \
                         "it goes back to the pool")
            next connection.throw_away! if $! && @interrupted.call(job.id)

            left = true if connection.transaction_open?
            connection.pool.checkin(connection) if Execution.roll_back(connection)
          end
          left
        end

        # Runs the block inside every hook, the first outermost.
        def around(job, hooks, index = 0, &block)
          hook = hooks[index] or return yield
          hook.call(job) { around(job, hooks, index + 1, &block) }
        end

        # Inside Active Job's execute callbacks (in a Rails app: the reloader, once, as every adapter's worker does).
        def perform_active_job(job)
          base = ActiveJob::Base # loads ActiveJob::Callbacks too, in apps that do not eager-load (development)
          ActiveJob::Callbacks.run_callbacks(:execute) do
            AppExecutor.name_job(job) if @rails
            @interruptible.call(job.id) do
              around(job, @hooks) do
                active_job = base.deserialize(active_job_payload(job))
                active_job.provider_job_id = job.id
                active_job.perform_now
              end
            end
          end
        end

        # Class lookups are cached, except while the app reloads code (development), where a cached class goes stale.
        def resolve(job)
          return lookup(job.class_name) if AppExecutor.reloading?

          @classes[job.class_name] ||= lookup(job.class_name)
        end

        def lookup(name) = Execution.job_class(name)

        def active_job_class?(job_class) = Execution.active_job_class?(job_class)

        # A row without an Active Job payload runs its class's `perform` directly: only a Bobbin::Job's (an Active Job
        # class's would skip its callbacks, retry_on and GlobalID arguments).
        def plain_class(job)
          job_class = resolve(job)
          return job_class if job_class.include?(Bobbin::Job)

          raise UnrunnableJob, "#{job.class_name} is an Active Job class, but this row has no Active Job payload (no active_job_id); " \
                               "enqueue it with perform_later"
        end

        # The payload Active Job deserializes, which names the class it instantiates: it must be the row's own, an Active
        # Job class (the row's class is the one the dashboard, the CLI, limits and lanes go by).
        def active_job_payload(job)
          payload = JSON.parse(job.arguments)
          raise UnrunnableJob, "Active Job payload is not a JSON object" unless payload.is_a?(Hash)
          unless payload["job_class"] == job.class_name
            raise UnrunnableJob, "the Active Job payload names job_class #{payload["job_class"].inspect[0, 200]}, not the row's class #{job.class_name}"
          end
          raise UnrunnableJob, "#{job.class_name} is not an Active Job class (inherit ActiveJob::Base)" unless active_job_class?(resolve(job))

          payload
        rescue JSON::ParserError => error
          raise UnrunnableJob, "Active Job payload is not valid JSON (#{error.message[0, 120]})"
        end

        # An interrupt may land inside a database call of the job; that connection's state is unknown, so it is
        # thrown away rather than handed to the next job (which would find a transaction already in progress).
        def interrupted!(error)
          ActiveRecord::Base.connection_handler.each_connection_pool { |pool| pool.active_connection&.throw_away! }
          raise error
        end

        # The job's max_attempts with the try its unknown class took given back (nil: as it is), for its first
        # UNKNOWN_CLASS_ATTEMPTS tries: those of old workers during a rolling deploy used up its own retries, and its
        # first real failure on the new code failed it for good (a review). Its later tries use its own retries.
        def given_back(job)
          job.max_attempts + 1 if job.attempts < UNKNOWN_CLASS_ATTEMPTS && job.max_attempts < Client::Fields::INT32.max
        end

        # The attempt `job` is at of its own: the tries its unknown class took and gave back (each raised its max_attempts
        # by one above the class's retries + 1, within the first UNKNOWN_CLASS_ATTEMPTS) left out. Counted in, a job that
        # waited out a rolling deploy for 15 tries retried its first real failure after 6 h, not its backoff (a review).
        def own_attempt(job, job_class)
          return job.attempts unless job_class.respond_to?(:bobbin_options)

          given = job.max_attempts - Client::Fields.attempts(job_class.bobbin_options[:retries])
          job.attempts - given.clamp(0, [ job.attempts, UNKNOWN_CLASS_ATTEMPTS ].min - 1)
        end

        def retried(job, job_class, error, of: job.max_attempts, at_most: MAX_BACKOFF, max_attempts: nil)
          base = job_class.respond_to?(:bobbin_options) ? job_class.bobbin_options[:backoff] : Job::DEFAULTS[:backoff]
          # ±25 %, then the cap: at most is at most. A backoff of 0.0 stays 0: 0.0 × 2**1024 (Infinity) is NaN, and a
          # job of many retries failed for good at its 1,025th attempt (a review).
          delay = base.zero? ? 0.0 : [ base * (2**(own_attempt(job, job_class) - 1)) * @jitter.rand(0.75..1.25), at_most ].min
          @logger.info("bobbin: #{named(job)} failed attempt #{job.attempts}/#{of} " \
                       "(#{describe(error)}); retrying in #{delay.round(1)}s")
          Instrumentation.instrument(:retry, event_payload(job, error).merge(run_at: Time.now + delay))
          error_outcome(job, waiting_state(job), error, run_at: Store.timestamp(Time.now + delay), max_attempts: max_attempts)
        end

        def failed(job, error)
          @logger.warn("bobbin: #{named(job)} failed after #{runs(job)}: #{describe(error)}")
          Instrumentation.instrument(:fail, event_payload(job, error))
          error_outcome(job, "failed", error, finished_at: Store.timestamp(Time.now))
        end

        # A job as log lines name it: its class (control characters escaped) and id.
        def named(job) = "#{Printable.printable(job.class_name)} #{job.id}"

        # How many times the job ran. An Active Job job's retries (retry_on) are rows of their own, each of one attempt:
        # its line said "failed after 1 attempt(s)" as Active Job logged "reoccurred on 3 attempts" (a trial).
        def runs(job)
          execution = JobRecord.active_job_execution(job.active_job_id, job.arguments)
          execution ? "#{execution} execution(s) (Active Job's count, its retries included)" : "#{job.attempts} attempt(s)"
        end

        def event_payload(job, error) = { id: job.id, class_name: job.class_name, queue: job.queue, attempts: job.attempts, error: error }

        # For a log line: the first line of the message, its control characters escaped (an error raised with
        # "\e[2J" in its message cleared the terminal of whoever read the worker's log).
        def describe(error) = Printable.printable("#{error_class(error)}: #{message(error).lines.first.to_s.strip[0, 200]}")

        # The error as the job's row keeps it: whatever its message holds (NULs, bytes that are not UTF-8, a
        # message, backtrace or class name method that raises), the outcome is written and the worker goes on.
        def error_outcome(job, state, error, finished_at: nil, run_at: nil, max_attempts: nil)
          explain_connection_wait(error)
          backtrace = kept_backtrace(frames(error)).join("\n")
          Store::Outcome.new(job.id, state, finished_at, run_at, error_class(error), message(error),
                             Store.text(backtrace, BACKTRACE_CHARACTERS), job.concurrency_key, job.queue, job.attempts, max_attempts)
        end

        # The frames a row keeps: the first BACKTRACE_LINES, then, of a deeper backtrace, up to as many again that are
        # not a gem's, Ruby's or Bobbin's own (the first and the last of them when there are more, the job's perform
        # among them), each gap marked where it is. An error raised deep inside gems kept none of the app's frames, the
        # ones a backtrace cleaner (Mission Control's "Clean" view) shows, and that view was empty (a trial).
        def kept_backtrace(frames)
          return frames if frames.size <= BACKTRACE_LINES

          own = (BACKTRACE_LINES...frames.size).reject { |index| LibraryFrames.library?(frames[index]) }
          own = own.first(BACKTRACE_LINES / 2) + own.last(BACKTRACE_LINES / 2) if own.size > BACKTRACE_LINES
          kept = []
          [ *0...BACKTRACE_LINES, *own, frames.size ].each_cons(2) do |index, following|
            kept << frames[index]
            kept << "… #{following - index - 1} #{"frame".pluralize(following - index - 1)} left out" if following - index > 1
          end
          kept
        end

        # Jobs of a fiber pool that waited past checkout_timeout for a connection most often wait behind jobs that hold
        # one across I/O (a transaction around an API call): says so once per process, beside the jobs' own lines.
        def explain_connection_wait(error)
          return if @explained || !Fiber.scheduler || !(defined?(ActiveRecord::ConnectionTimeoutError) && error.is_a?(ActiveRecord::ConnectionTimeoutError))

          @explained = true
          size = error.connection_pool&.size if error.respond_to?(:connection_pool)
          @logger.warn("bobbin: a job waited past checkout_timeout for a database connection#{" (Active Record pool of #{size})" if size}. " \
                       "Fibers share the pool query by query, but a long query, a transaction or ActiveRecord::Base.connection holds " \
                       "its connection until it ends: keep I/O (HTTP calls, sleeps) outside transactions, or give the workers " \
                       "a pool of a connection per job that holds one at once")
        end

        # The error's backtrace as lines of text. One whose backtrace method raised, or handed back frames that are not
        # text, failed the recording of the job's end: the job was failed for good at its first attempt, whatever its
        # retries, as Bobbin's own NoMethodError or TypeError instead of its error (a review).
        def frames(error)
          Array(error.backtrace).map(&:to_s)
        rescue Exception => failure # rubocop:disable Lint/RescueException -- a backtrace method is the job's own code
          [ "(the error's backtrace could not be read: #{failure.class})" ]
        end

        # An anonymous class (Class.new(StandardError)) has no name; its inspect still tells what it is. A class whose
        # own `name` method raises is named by Ruby's.
        def error_class(error)
          klass = error.class
          name = begin
            klass.name
          rescue Exception # rubocop:disable Lint/RescueException -- a class's name method is the job's own code
            Module.instance_method(:name).bind_call(klass)
          end
          Store.text(name || klass.inspect, 200)
        end

        def message(error)
          Store.text(error.message, MESSAGE_CHARACTERS)
        rescue Exception => failure # rubocop:disable Lint/RescueException -- a message method is the job's own code
          "(the error's message could not be read: #{failure.class})"
        end
    end
  end
end
