# frozen_string_literal: true

module Bobbin
  # Process-wide settings; `Bobbin.configure { |c| ... }` changes them, workers read them at boot. Every writer
  # checks its value (Setting) and raises ConfigurationError naming the setting, so a bad value never reaches a worker.
  class Configuration
    # The settings `set` and config/bobbin.yml take (besides workers).
    SETTINGS = (Setting::SECONDS.keys + Setting::COUNTS + Setting::SIZES + Setting::FLAGS).freeze

    # Largest JSON argument payload accepted at enqueue, in bytes (nil: no limit).
    attr_reader :max_argument_bytes
    # Seconds a finished job (succeeded or discarded) stays in the table before cleanup deletes it (> 0; nil keeps
    # forever). Failed jobs stay until retried or discarded.
    attr_reader :retention
    # Seconds (≥ 0) a stopping worker waits for in-flight jobs before returning them to ready.
    attr_reader :shutdown_timeout
    # Seconds (≥ 0.1) between a process's heartbeats.
    attr_reader :heartbeat_interval
    # Seconds (> 2 × heartbeat_interval) after which a silent process is presumed dead and its jobs recovered.
    attr_reader :process_alive_threshold
    # Seconds (≥ 0.01) an idle worker waits before polling again while notifications do not reach it.
    attr_reader :polling_interval
    # Seconds (≥ 0.01) between an idle worker's safety-net polls while notifications reach it (PostgreSQL's
    # listener is connected); polling_interval when that is longer.
    attr_reader :notified_polling_interval
    # Whether this process's idle workers are woken at once (a LISTEN on PostgreSQL, a file watch on SQLite); false
    # leaves them to polling (e.g. behind PgBouncer in transaction mode). Its enqueues announce themselves either way
    # (a NOTIFY works through any pooler): other processes may be listening.
    attr_reader :notifications
    # Database connections a fiber pool's jobs share (Active Record >= 7.2 releases between queries).
    attr_reader :fiber_db_concurrency
    # Extra runs a job gets when its process dies under it, beyond its own retries; then it fails.
    attr_reader :crash_retries
    # Seconds (≥ 0.01) a crash suspect (a job in flight at repeated crashes, see Recovery) runs alone in its worker.
    # One still running then (a long job, or one that never returns) lets the next suspect start beside it, rather than
    # holding its fellows back for as long as it runs.
    attr_reader :crash_quarantine
    # true (default): an enqueue returns once PostgreSQL has the job on disk. false: a single enqueue outside a
    # transaction commits without waiting for the WAL flush (synchronous_commit off for that statement only), about
    # twice as fast; a crash of PostgreSQL or its host (not of the app) can lose the last ~0.6 s of such enqueues.
    attr_reader :durable_enqueue
    # Seconds (≥ 0.01) one job may hold a fiber pool's event loop before the stall detector reports it; false: off.
    attr_reader :stall_threshold
    # Threads beside each fiber pool for jobs whose class says `runs_on: :thread` (0: none; such jobs then run as fibers).
    attr_reader :thread_lane
    # Threads per fiber pool for C calls Ruby marks offload-safe (zlib, ...), so they do not stall the loop (0: off).
    attr_reader :offload_threads
    # Where Bobbin writes its log lines.
    attr_accessor :logger
    # The worker pools `bobbin start` runs (Pool objects); set with `workers=`.
    attr_reader :pools
    # Hooks that wrap every job a worker runs, outermost first (see `around_perform`).
    attr_reader :perform_hooks
    # Recurring tasks by key (Recurring::Task), from config/recurring.yml and `recurring`.
    attr_reader :recurring_tasks
    # Called with each error Bobbin's own threads hit (not jobs' errors) and `{ task:, severity: }`: see ThreadErrors.
    # nil (the default): Rails.error in a Rails app, nothing elsewhere; false: nothing.
    attr_reader :on_thread_error
    # The zone of recurring schedules that name none ("every day at 3am"), as a tz name: "UTC" unless set; in a Rails
    # app its `config.time_zone`, as Solid Queue reads them (`config.bobbin.recurring_time_zone` overrides it).
    attr_reader :recurring_time_zone
    # Where Bobbin's tables live in a Rails app: `{ database: { writing: :queue } }` (Active Record's connects_to);
    # nil keeps them in the app's primary database.
    attr_accessor :connects_to

    # A writer for each setting (`polling_interval = 0.5`, ...): checks the value, raising ConfigurationError.
    SETTINGS.each do |name|
      define_method(:"#{name}=") { |value| set(name => value) }
    end

    # max_argument_bytes unless set (1 MB).
    MAX_ARGUMENT_BYTES = 1_048_576

    def initialize
      @max_argument_bytes = MAX_ARGUMENT_BYTES
      @retention = 86_400
      @shutdown_timeout = 25
      @heartbeat_interval = 10
      @process_alive_threshold = 60
      @polling_interval = 1.0
      @notified_polling_interval = 10.0
      @notifications = true
      @fiber_db_concurrency = 3
      @crash_retries = 2
      @crash_quarantine = 60
      @durable_enqueue = true
      @stall_threshold = 0.1
      @thread_lane = 2
      @offload_threads = 4
      @logger = default_logger
      @pools = [ Pool.new(queues: [ "*" ], mode: :fibers, size: 100, processes: 1) ]
      @perform_hooks = []
      @recurring_tasks = {}
      @recurring_time_zone = "UTC"
    end

    # A copy (the tests keep one to put back) has hooks and recurring tasks of its own.
    def initialize_copy(source)
      super
      @perform_hooks = source.perform_hooks.dup
      @recurring_tasks = source.recurring_tasks.dup
    end

    def on_thread_error=(handler)
      unless handler.nil? || handler == false || handler.respond_to?(:call)
        raise ConfigurationError, "Bobbin.config.on_thread_error: a callable (call(error, context)), nil (Rails.error in a Rails app) or false, got #{handler.inspect}"
      end

      @on_thread_error = handler
    end

    # A tz name ("Asia/Tokyo") or a Rails zone name ("Tokyo"); set it before the tasks it should apply to are added
    # (the Railtie sets it before it reads config/recurring.yml).
    def recurring_time_zone=(zone)
      require "active_support/values/time_zone"
      name = (zone.is_a?(String) || zone.is_a?(ActiveSupport::TimeZone)) && ActiveSupport::TimeZone[zone]&.tzinfo&.name
      raise ConfigurationError, "Bobbin.config.recurring_time_zone: a time zone (\"Europe/Paris\", \"Tokyo\", \"UTC\"), got #{zone.inspect[0, 80]}" unless name

      @recurring_time_zone = name == "Etc/UTC" ? "UTC" : name
    end

    # Adds (or replaces) recurring task `key`: `recurring "nightly", schedule: "every day at 3am", class: "ReportJob",
    # args: [1]` or `command: "Session.expired.delete_all"`; also queue:, priority:, description:. Raises
    # ConfigurationError for a schedule fugit cannot parse or a task without exactly one of class/command.
    def recurring(key, where: "Bobbin.config.recurring(#{key.to_s.inspect})", **options)
      task = Recurring::Task.parse(key, options, where)
      @recurring_tasks[task.key] = task
    end

    # Adds a hook around every job workers run (middleware): `hook.call(job) { ... }` or a block
    # `|job, run| ...; run.call`. `job` is the claimed row (id, queue, class_name, arguments JSON, attempts,
    # max_attempts, active_job_id, crashes); a hook that does not call the inner block skips the job's perform
    # (it then succeeds); an exception from a hook is the job's. Hooks run inside the app's reloader (Rails).
    def around_perform(hook = nil, &block)
      hook ||= block && ->(job, &run) { block.call(job, run) }
      raise ConfigurationError, "around_perform needs a callable (call(job) { }) or a block |job, run|" unless hook.respond_to?(:call)

      @perform_hooks << hook
      self
    end

    # Sets several settings at once (`set(heartbeat_interval: 40, process_alive_threshold: 120)`), checking each
    # and heartbeat_interval against process_alive_threshold after all are applied; `where` starts the errors.
    def set(where: "Bobbin.config", **settings)
      unknown = settings.keys - SETTINGS
      raise ConfigurationError, "#{where}: unknown setting #{unknown.first.inspect} (known: #{SETTINGS.join(', ')})" if unknown.any?

      checked = settings.to_h { |name, value| [ name, Setting.check(name, value, "#{where}.#{name}") ] }
      Setting.check_heartbeat(checked.fetch(:heartbeat_interval, heartbeat_interval),
                              checked.fetch(:process_alive_threshold, process_alive_threshold), where)
      checked.each { |name, value| instance_variable_set(:"@#{name}", value) }
      self
    end

    # Sets the pools from a list of hashes: `[{ queues: ["chat"], fibers: 100, processes: 2 }, ...]`.
    def workers=(list)
      use_workers(list)
    end

    # Like `workers=`, with errors that say where the list came from.
    def use_workers(list, where: "workers")
      raise ConfigurationError, "#{where}: must be a list of pools, got #{list.inspect}" unless list.is_a?(Array) && list.any?

      @pools = list.each_with_index.map { |hash, index| Pool.parse(hash, "#{where}[#{index}]") }
    end

    private
      # Bobbin's lines name Bobbin themselves ("bobbin worker 3 …", "bobbin: …"), as they must in a Rails app's log.
      def default_logger
        require "logger"
        Logger.new($stdout, level: Logger::INFO)
      end
  end
end
