# frozen_string_literal: true

require_relative "config/boot" # Boot.syntax_problem: a job file that does not parse

module Bobbin
  # `bobbin doctor`: checks a configuration before deploy. Prints what each pool needs and what the database
  # offers; `run` returns 1 when something will fail in production, else 0.
  class Doctor
    # A line of config/application.rb or config/environments/*.rb that sets Active Job's adapter.
    ADAPTER_SETTING = /\A[^#]*\bqueue_adapter\s*=(?!=)\s*(?<value>[^#]*?)\s*(?:#.*)?\s*\z/
    # The adapter named by a symbol or string literal (`:bobbin`, `"bobbin"`); anything else is computed.
    LITERAL_ADAPTER = /\A(?::(?<name>\w+)|"(?<name>\w+)"|'(?<name>\w+)')\z/
    # Seconds the SQLite write check waits for another process's write transaction to end.
    LOCK_WAIT = 2

    # The adapter Active Job uses in this process (`"bobbin"`, `"async"`, …), or nil when nothing uses Active Job: in a
    # Rails app that loads it; elsewhere only once something has loaded ActiveJob::Base.
    def self.active_job_adapter
      return unless defined?(::ActiveJob)
      return unless (defined?(::ActiveJob::Railtie) && ::Rails.application) || (::ActiveJob.autoload?(:Base).nil? && defined?(::ActiveJob::Base))

      adapter_of(::ActiveJob::Base)
    end

    # The adapter a job class uses: Active Job's own, or the one the class (or a parent) sets with self.queue_adapter.
    def self.adapter_of(job_class)
      return job_class.queue_adapter_name.to_s if job_class.respond_to?(:queue_adapter_name) && job_class.queue_adapter_name

      job_class.queue_adapter.class.name.demodulize.delete_suffix("Adapter").underscore
    end

    # True when Active Job's `adapter` in environment `env` is as it should be: bobbin, or the test adapter in test (Rails'
    # convention there: its job test helpers need it, and bobbin:install --environments all keeps it).
    def self.expected_adapter?(adapter, env) = adapter == "bobbin" || (adapter == "test" && env.to_s == "test")

    # `root`: where to look for a Rails app's config/ (the directory `bobbin doctor` runs in).
    def initialize(pools = Bobbin.config.pools, mode: :fork, out: $stdout, root: Dir.pwd)
      @pools = pools
      @mode = mode.to_sym
      @out = out
      @root = root
      @problems = []
    end

    # Prints the report; returns the exit status.
    def run
      report_pools
      report_pool_size
      report_server
      report_writable
      report_write_lock
      report_fibers
      report_notifications
      report_job_files # first: report_active_job looks at the job classes they define
      report_active_job
      report_recurring
      report_adapter_settings
      report_unselected_queues
      @out.puts(@problems.empty? ? "OK: this configuration fits." : "#{@problems.size} problem(s):")
      @problems.each { |problem| @out.puts("  ✗ #{problem}") }
      @problems.empty? ? 0 : 1
    end

    private
      def report_pools
        @out.puts("Pools (#{@mode} mode):")
        @pools.each_with_index do |pool, index|
          @out.puts(format("  workers[%d] %-40s jobs' DB connections %d at most (%d needed) + Bobbin's own %d per process%s", index,
                           pool.to_s, ConnectionBudget.job_connections_at_most(pool),
                           ConnectionBudget.job_connections(pool.mode, pool.size), ConnectionBudget::OWN_CONNECTIONS,
                           ConnectionBudget.listeners([ pool ], :async).positive? ? " + 1 listening" : ""))
        end
        queue = ConnectionBudget.queue_database_at_most(@pools, @mode)
        @out.puts("  Bobbin's database (connects_to): #{queue} Active Record connections at most (enqueues from jobs)") if queue.positive?
        @out.puts("  total: #{processes} worker processes, #{ConnectionBudget.concurrency(@pools)} concurrent jobs, " \
                  "#{total_connections} database connections at most (including the supervisor's)")
        report_other_databases
      end

      # The app's other databases (a replica, shards, a cache store's): its jobs open connections to each as they use it, up to
      # that database's own pool per process, beyond the total above (one worker held 12 each on a primary, a replica
      # and a shard, 36 where the total said 12: a trial). They count against their own servers' limits.
      def report_other_databases
        others = other_databases
        return if others.empty?

        listed = others.map { |config| "#{config.name} (#{config.database}) #{limit(pool_size_of(config))}" }.join(", ")
        more = processes * others.sum { |config| pool_size_of(config) }
        @out.puts("  also, to the app's other databases as its code uses them (models, a cache store), up to each one's pool per process: #{listed}; " \
                  "× #{processes} processes = #{more.finite? ? "#{more} more connections at most" : 'more connections, as many as its code opens'}")
      end

      # database.yml's other configurations for this environment: not the primary, not Bobbin's own database.
      def other_databases
        env = ActiveRecord::ConnectionHandling::DEFAULT_ENV.call.to_s
        mine = [ ActiveRecord::Base.connection_db_config, Record.connection_db_config ].map(&:name)
        ActiveRecord::Base.configurations.configs_for(env_name: env, include_hidden: true).reject { |config| mine.include?(config.name) }
      end

      def limit(size) = size.finite? ? size : "no limit"

      # A configuration's pool size; without a limit (Rails 8.1 reads a negative pool: so), as many as its code opens.
      def pool_size_of(config) = (config.respond_to?(:max_connections) ? config.max_connections : config.pool) || Float::INFINITY

      def report_pool_size
        needed = per_process_pool
        size = ConnectionBudget.size_of(ActiveRecord::Base.connection_pool)
        @out.puts("Active Record pool: #{limit(size)} configured, #{needed} needed per process")
        fibers = @pools.select { |pool| pool.mode == :fibers }.map { |pool| ConnectionBudget.job_connections(:fibers, pool.size) }.max
        if fibers && size > fibers
          @out.puts("  fiber pools' jobs may open #{size.finite? ? "all #{size}" : 'one each'} though they need #{fibers}: a pool: of " \
                    "#{fibers} for the workers (database.yml, or RAILS_MAX_THREADS in Rails' default) holds them to it")
        end
        @problems << "the Active Record pool is #{size} but a worker process needs #{needed}: set pool: #{needed} in database.yml " \
                     "#{ConnectionBudget::POOL_KEY}(or ?#{ConnectionBudget::URL_POOL_KEY}=#{needed} in DATABASE_URL)" if size < needed
      end

      # Each PostgreSQL server's max_connections against the connections opened there: the app's and Bobbin's database's
      # apart when they are on two servers (ConnectionBudget.servers).
      def report_server
        servers = ConnectionBudget.servers(@pools, @mode)
        if servers.empty?
          return @out.puts("Database: #{ActiveRecord::Base.connection_pool.with_connection(&:adapter_name)} (no connection limit)")
        end

        servers.each do |pool, needed|
          max, reserved, in_use = ConnectionBudget.server_numbers(pool)
          available = max - reserved
          on = ConnectionBudget.on_server(pool) if servers.size > 1
          @out.puts("PostgreSQL#{on}: max_connections #{max} (#{reserved} reserved for superusers), #{in_use} in use now" \
                    "#{", #{needed} of Bobbin's connections at most" if on}")
          if needed <= available # the app's own processes count too: Puma beside Bobbin used up the rest (a trial)
            @out.puts("  #{available - needed} left for everything else: Puma takes up to workers × threads for each " \
                      "database it uses (plugin :bobbin or not), a fiber server (Falcon) up to processes × its pool, a console or a " \
                      "cron job one more each")
            next
          end

          @problems << "Bobbin needs #{needed} connections#{on} but PostgreSQL allows #{available}: #{connection_remedies.join(', or ')}"
        end
      end

      # Whether Bobbin's PostgreSQL takes writes. A replica's URL (or a failover's old primary, default_transaction_read_only
      # on for the role or database) passed every check, and the workers then stopped at boot.
      def report_writable
        return unless Store.postgresql?
        return unless Record.with_connection { |connection| connection.select_value("SHOW transaction_read_only", "Bobbin Doctor") } == "on"

        @problems << DatabaseProblem.read_only_server("transaction_read_only is on")
      end

      # Whether Bobbin's SQLite file takes a write. Another process holding a write transaction open on it (a console's
      # BEGIN IMMEDIATE, a stuck script) left every enqueue, claim and outcome waiting for it and failing with "database
      # is locked", while doctor said OK (a trial). Bobbin's own write transactions take milliseconds.
      def report_write_lock
        file = Store::DatabaseFile.open
        return unless file && File.exist?(file.path)

        db = SQLite3::Database.new(file.path, flags: SQLite3::Constants::Open::READWRITE)
        db.busy_timeout = (LOCK_WAIT * 1000).round
        db.execute("BEGIN IMMEDIATE")
        db.execute("ROLLBACK")
      rescue SQLite3::BusyException
        @problems << "the SQLite database #{file.path} is write-locked by another process (a write transaction held open over " \
                     "#{format('%g', LOCK_WAIT)}s: a console, a script, a tool that hung): jobs are neither enqueued nor claimed " \
                     "until it ends (\"database is locked\"); end it (fuser -v #{file.path} lists the processes that have it open)"
      ensure
        db&.close
      end

      # What would bring the connections within the server's limit, for these pools.
      def connection_remedies
        fibers = @pools.select { |pool| pool.mode == :fibers }.map { |pool| ConnectionBudget.job_connections(:fibers, pool.size) }.max
        remedies = [ "raise max_connections" ]
        remedies << "fewer threads (or fiber pools)" if @pools.any? { |pool| pool.mode == :threads }
        remedies << "a smaller Active Record pool for the workers (pool: #{fibers}: fibers wait their turn)" if fibers && ConnectionBudget.size_of(ActiveRecord::Base.connection_pool) > fibers
        remedies << "fewer processes" if processes > 1
        remedies
      end

      def report_fibers
        return unless @pools.any? { |pool| pool.mode == :fibers }

        level = ActiveSupport::IsolatedExecutionState.isolation_level
        @out.puts("Isolation level: #{level.inspect}")
        @problems << "fiber pools need config.active_support.isolation_level = :fiber (it is #{level.inspect})" unless level == :fiber
        FiberSafety.warnings.each { |line| @out.puts("  ! #{line}") }
        report_fiber_settings
        report_fiber_stacks
      end

      # Whether this machine can give each worker process its fibers' stacks (vm.max_map_count).
      def report_fiber_stacks
        Worker::FiberExecutor.check_stacks!(Worker::FiberExecutor.per_process(@pools, @mode))
      rescue ConfigurationError => error
        @problems << error.message
      end

      # Whether new jobs wake idle workers at once: a NOTIFY from one session reaching a LISTEN on another, end to end.
      def report_fiber_settings
        config = Bobbin.config
        stalls = config.stall_threshold ? "a job holding the loop over #{(config.stall_threshold * 1000).round} ms is reported" : "off"
        offload = FiberSafety.offload? && config.offload_threads.positive? ? "#{config.offload_threads} threads" : "off"
        @out.puts("  stall detector: #{stalls}; thread lane: #{config.thread_lane} threads; offload: #{offload} (per fiber pool)")
        @out.puts("  event loop: io-event #{Worker::FiberExecutor.selector.name.split('::').last} (IO_EVENT_SELECTOR chooses)")
      rescue ConfigurationError => error
        @problems << error.message
      end

      def report_notifications
        return @out.puts("Notifications: off (idle workers poll every polling_interval)") unless Bobbin.config.notifications

        db_config = Record.connection_db_config
        unless Store.for_adapter(db_config.adapter) == Store::PostgreSQL
          # The watcher backs off while the file is quiet, so the first job after a quiet spell waits the longest.
          fast, slow = [ Wakeups::Watcher::INTERVAL, Wakeups::Watcher::QUIET_INTERVAL ].map { |seconds| (seconds * 1000).round }
          return @out.puts("Notifications: SQLite — workers in the enqueuing process wake at once, other processes within " \
                           "#{fast}–#{slow} ms (they watch the database file: every #{fast} ms while it changes, every " \
                           "#{slow} ms once it has not changed for #{format('%g', Wakeups::Watcher::QUIET)} s)")
        end
        return @out.puts("Notifications: LISTEN/NOTIFY round trip OK (idle workers start new jobs within milliseconds)") if Wakeups::Listener.round_trip?(db_config)

        @problems << "a NOTIFY did not reach a LISTEN within #{Wakeups::Listener::PROBE_TIMEOUT}s (PgBouncer in transaction mode " \
                     "between Bobbin and PostgreSQL?): point workers at PostgreSQL directly, or set notifications: false to poll"
      rescue ActiveRecord::ConnectionNotEstablished => error # its two sessions of its own: max_connections reached crashed doctor
        @problems << "the LISTEN/NOTIFY check could not connect: #{DatabaseProblem.describe(error)}"
      end

      # The adapter Active Job uses in this booted process, when the app uses Active Job.
      def report_active_job
        name = Doctor.active_job_adapter or return
        @out.puts("Active Job adapter in this process: #{name}")
        report_good_job
        return report_classes_elsewhere if name == "bobbin"
        return report_classes_moved(name) if bobbin_job_classes.any?

        @problems << "Active Job uses the #{name} adapter, so perform_later does not reach Bobbin: set " \
                     "config.active_job.queue_adapter = :bobbin (config/environments/*.rb override config/application.rb)"
      end

      # A team moving job classes to Bobbin one by one (self.queue_adapter = :bobbin on each, the global adapter still
      # another) is doing what the README suggests: a failure here stopped its deploys (a trial). A warning.
      def report_classes_moved(adapter)
        moved = bobbin_job_classes
        rest = job_classes.size - moved.size
        @out.puts("  ! Active Job uses the #{adapter} adapter, but #{moved.size} job class(es) loaded here set Bobbin's (#{a_few(moved.map(&:name))}): " \
                  "their perform_later reaches Bobbin, that of the #{rest} other(s) #{adapter}; set " \
                  "config.active_job.queue_adapter = :bobbin once every class has moved")
      end

      # The other way round: the app's adapter is Bobbin (as the generator sets it) and classes not moved yet keep another
      # with self.queue_adapter = :sidekiq. Their perform_later does not reach Bobbin, and doctor said only "OK" (a review).
      def report_classes_elsewhere
        elsewhere = job_classes - bobbin_job_classes
        return if elsewhere.empty?

        listed = a_few(elsewhere.map { |job_class| "#{job_class.name}: #{Doctor.adapter_of(job_class)}" })
        @out.puts("  ! Active Job uses Bobbin, but #{elsewhere.size} job class(es) loaded here set another adapter (#{listed}): " \
                  "their perform_later does not reach Bobbin")
      end

      # An app moved from GoodJob (a trial) kept job classes limited by GoodJob's concurrency controls, whose perform_later
      # Bobbin refuses, and config.good_job.cron with enable_cron: a `good_job start` left to finish GoodJob's jobs then
      # enqueued every cron entry through Bobbin's adapter beside recurring.yml's, each tick run twice. Doctor said "OK".
      def report_good_job
        bobbin_job_classes.each do |job_class|
          problem = ::ActiveJob::QueueAdapters::BobbinAdapter.good_job_concurrency_problem(job_class)
          @problems << "#{problem}: its perform_later raises" if problem
        end
        good_job = defined?(::Rails.application) && ::Rails.application&.config.try(:good_job)
        return unless good_job && good_job[:enable_cron] && good_job[:cron].present?

        @out.puts("  ! config.good_job.cron has #{good_job[:cron].size} entries and enable_cron is on: a good_job start (left to finish " \
                  "GoodJob's jobs) enqueues each through Bobbin beside config/recurring.yml, and every tick runs twice; set " \
                  "config.good_job.enable_cron = false")
      end

      # The first three of `names`, sorted, and "…" for the rest.
      def a_few(names)
        names = names.sort
        names.first(3).join(", ") + (names.size > 3 ? ", …" : "")
      end

      # The named job classes loaded in this process that run no subclass of their own (ApplicationJob and other bases left
      # out), and of those, the ones whose adapter is Bobbin's.
      def job_classes
        @job_classes ||= begin
          named = ::ActiveJob::Base.descendants.select(&:name)
          named.reject { |job_class| named.any? { |other| other < job_class } }
        end
      end

      def bobbin_job_classes = @bobbin_job_classes ||= job_classes.select { |job_class| Doctor.adapter_of(job_class) == "bobbin" }

      # In a Rails app's root: the adapter each environment gets from config/application.rb and its own file
      # (which overrides it), with a warning naming each line that sets one other than bobbin.
      def report_adapter_settings
        application = File.join(@root, "config", "application.rb")
        return unless File.exist?(application)

        base = adapter_setting(application)
        environments = Dir[File.join(@root, "config", "environments", "*.rb")].sort
                                                                           .to_h { |file| [ File.basename(file, ".rb"), adapter_setting(file) ] }
        @out.puts("Active Job adapter per environment (config/application.rb, overridden by config/environments/*.rb):")
        @out.puts(format("  %-12s %s", "application", base ? describe_setting(base) : "not set: Active Job's default, async"))
        environments.each do |env, setting|
          @out.puts(format("  %-12s %s", env, setting ? describe_setting(setting) : "from config/application.rb"))
        end
        # Sidekiq's apps often set it in an initializer, which runs after both and wins: doctor listed application.rb's
        # :bobbin and said only "set config.active_job.queue_adapter = :bobbin" (a review).
        initializers = Dir[File.join(@root, "config", "initializers", "**", "*.rb")].sort.filter_map { |file| adapter_setting(file) }
        initializers.each { |setting| @out.puts(format("  %-12s %s (runs after the files above)", "initializer", describe_setting(setting))) }
        warn_adapter(base, "environments that do not set their own") if base
        environments.each { |env, setting| warn_adapter(setting, env) if setting }
        initializers.each { |setting| warn_adapter(setting, "every environment that initializer runs in") }
      end

      # Jobs waiting in a queue that neither these pools nor any running worker select wait for ever, and nothing else
      # says so (a trial: a job class's queue_as renamed in a deploy, the pools not). A warning: a worker elsewhere,
      # down just now, may select it. A quiet worker (TSTP, as a deploy starts) claims nothing: it selects no queue.
      def report_unselected_queues
        waiting = JobRecord.where(state: %w[ready blocked]).group(:queue).count
        return if waiting.empty?

        running = ProcessRecord.live.where(kind: "worker").filter_map { |process| process.own_metadata.then { |meta| meta["queues"] unless meta["quiet"] } }
        selections = (@pools.map(&:queues) + running).map { |queues| Store::QueueSelection.new(queues) }
        unselected = waiting.reject { |queue, _| selections.any? { |selection| selection.match?(queue) } }
        return if unselected.empty?

        named = unselected.sort_by { |queue, count| [ -count, queue ] }.first(5).map { |queue, count| "#{Printable.printable(queue)} (#{count})" }
        @out.puts("  ! jobs wait in #{unselected.size} queue(s) that neither these pools nor a running worker select: " \
                  "#{named.join(', ')}#{', …' if unselected.size > 5}; add them to a pool's queues, or they never run")
      end

      # Each recurring task's job as its first tick would build it: a class no file defines passed the check, and the
      # scheduler then said "unknown job class" at every tick (a trial).
      def report_recurring
        tasks = Bobbin.config.recurring_tasks.values
        return if tasks.empty?

        @out.puts("Recurring: #{tasks.size} task(s)")
        tasks.each do |task|
          task.job_row
        rescue ConfigurationError => error
          @problems << error.message
        end
      end

      # In a Rails app that loads its code lazily (eager_load off: development, and any environment that sets it so), a
      # job file that does not load (a syntax error, ENV.fetch of a variable not set) passed doctor and failed its jobs
      # later (a trial); where code is eager-loaded the app would not boot. Each file under app/jobs is loaded here.
      def report_job_files
        return unless defined?(::Rails.application) && ::Rails.application && ::Rails.respond_to?(:autoloaders)

        jobs = ::Rails.root.join("app", "jobs").to_s
        Dir[File.join(jobs, "**", "*.rb")].sort.each do |file|
          ::Rails.autoloaders.main.load_file(file)
        rescue ScriptError, StandardError => error
          said = error.is_a?(SyntaxError) ? Boot.syntax_problem(error) : DatabaseProblem.first_line(error)[0, 200] # not "syntax errors found"
          @problems << "#{file.delete_prefix("#{::Rails.root}/")} does not load (#{error.class}: #{said}): " \
                       "its jobs would fail, and an app that eager-loads would not boot"
        end
      end

      def adapter_setting(file)
        found = nil
        File.foreach(file).with_index(1) do |line, number|
          value = line[ADAPTER_SETTING, :value] or next
          found = { adapter: value[LITERAL_ADAPTER, :name], value: value, where: "#{file.delete_prefix("#{@root}/")}:#{number}" }
        end
        found
      end

      def describe_setting(setting)
        setting[:adapter] ? "#{setting[:adapter]}  #{setting[:where]}" : "#{setting[:value]}  #{setting[:where]} (computed: not checked)"
      end

      def warn_adapter(setting, scope)
        return if setting[:adapter].nil? || Doctor.expected_adapter?(setting[:adapter], scope)

        @out.puts("  ! #{setting[:where]} sets queue_adapter = :#{setting[:adapter]}: jobs in #{scope} do not go to Bobbin")
      end

      def processes = @mode == :async ? 1 : @pools.sum(&:processes)

      def per_process_pool = ConnectionBudget.per_process(@pools, @mode)

      def total_connections = ConnectionBudget.total(@pools, @mode)
  end
end
