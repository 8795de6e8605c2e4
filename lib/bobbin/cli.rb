# frozen_string_literal: true

require "optparse"
require_relative "config/boot"
require_relative "cli/operator_commands"

module Bobbin
  # `bobbin COMMAND [options]`: the command line for workers and operators.
  class CLI
    USAGE = <<~TEXT
      Usage: bobbin COMMAND [options]
        start    run the configured pools under a supervisor (-c config/bobbin.yml; TERM/INT/HUP graceful, QUIT now, TSTP quiet, TTIN dump)
        work     run one worker pool in the foreground (TERM/INT/HUP: graceful stop, QUIT: immediate, TSTP: quiet, TTIN: dump)
        doctor   check a configuration against the database before deploy (exit 1 when a check fails; 78 when it cannot
                 run them: a configuration it cannot use, no section for the environment, a database it cannot use,
                 Bobbin's tables missing or older; 69 when the database is down or refuses it, as for every command)
        pause Q  stop workers from claiming jobs of queue Q;  resume Q  let them again
        migrate  create or upgrade Bobbin's tables
        counts   print job counts by state
        recurring  list recurring tasks with their last and next runs
        jobs     list jobs, newest first (--state S --queue Q --class C --search TEXT --limit N --after CURSOR)
        retry ID...|--failed [filters]    run failed/discarded jobs again (exit 1 if one could not be)
        discard ID...|--failed [filters]  give up on failed/waiting jobs (never running ones)
        queues   list queues: due, scheduled, blocked, running, failed, latency, paused
        processes  list worker processes: mode, capacity, busy, heartbeat age, memory, connections
        dashboard  serve the web dashboard (--port 9292 --host 127.0.0.1; RACK_ENV=development unless --auth-token)
        metrics    serve Prometheus metrics (--port 9394 --host 127.0.0.1; --auth-token for HTTP basic auth)
      Every command that uses the database takes -d URL (default DATABASE_URL) and -r FILE; bobbin COMMAND --help lists its options.
    TEXT

    # Under `bobbin doctor --help`: a failed check and checks that could not run are told apart.
    DOCTOR_EXIT = <<~TEXT.chomp.prepend("\n")
      Exit 0 when the configuration fits; 1 when a check fails (each is listed); 78 when the checks cannot run, with one
      line on stderr: a configuration it cannot use (a bad file or flag, no section for the environment), a database it
      cannot use, Bobbin's tables missing or at an older schema version, a missing -r file; 69 when the database is down
      or turns the connection away.
    TEXT

    # The flags that carry settings, checked by the same rules as config/bobbin.yml.
    FLAGS = { polling_interval: "--polling-interval", notified_polling_interval: "--notified-polling-interval",
              shutdown_timeout: "--shutdown-timeout", stall_threshold: "--stall-threshold", thread_lane: "--thread-lane" }.freeze

    # The signals whose default would suspend `start` or `work` as it boots (see hold_signals).
    HELD_SIGNALS = %w[TSTP TTIN].freeze

    # Runs the command in `argv`; returns the process exit status.
    def self.start(argv) = new.start(argv)

    def start(argv)
      argv = utf8(argv)
      command = argv.shift
      case command
      when "work" then work(argv)
      when "start" then start_supervisor(argv)
      when "doctor" then doctor(argv)
      when "pause", "resume" then toggle(command, argv)
      when "migrate" then database_command(command, argv).first.then { |options| boot(options, tables: false).then { migrate(options) } }.then { 0 }
      when "counts" then boot(database_command(command, argv).first).then { unlocked { puts(JSON.pretty_generate(Bobbin.counts)).then { 0 } } }
      when "recurring" then boot(database_command(command, argv).first).then { unlocked { list_recurring.then { 0 } } }
      when "jobs", "retry", "discard", "queues", "processes" then OperatorCommands.new(self).run(command, argv)
      when "dashboard" then OperatorCommands.new(self).dashboard(argv)
      when "metrics" then OperatorCommands.new(self).metrics(argv)
      else usage(command)
      end
    rescue Bobbin::DatabaseUnreachable => error # EX_UNAVAILABLE: a restart mends it once the database is back
      warn("bobbin: #{error.message}")
      69
    rescue Bobbin::ConfigurationError, OptionParser::ParseError => error # EX_CONFIG: a restart will not mend it
      warn("bobbin: #{error.message}")
      78
    rescue UsageError => error
      warn("bobbin: #{error.message}")
      64
    rescue ActiveRecord::StatementInvalid => error # a command's write to a replica (pause, retry, discard): exit 1 and a backtrace
      raise unless DatabaseProblem.read_only_server?(error)

      warn("bobbin: #{DatabaseProblem.describe(error)}")
      69
    end

    # A command line that names something wrong (a bad filter, an id that is not a number): exit 64.
    class UsageError < StandardError; end

    # Boots from `--database URL` / `-r FILE` as the worker commands do (for the operator commands).
    def boot(options, tables: true)
      Boot.run(database: options[:database], requires: Array(options[:require]), tables: tables)
    end

    # Adds -d URL and -r FILE, which every command that touches the database takes (read by `boot`).
    def database_options(parser, options)
      parser.on("-r", "--require FILE", "load FILE first: job classes, or a file that calls Bobbin.connect (repeatable)") do |v|
        (options[:require] ||= []) << v
      end
      parser.on("-d", "--database URL", "database URL (default DATABASE_URL or the Rails app's)") { |v| options[:database] = v }
    end

    private
      # The command line as UTF-8 text. Without a UTF-8 locale (LANG unset: a slim container, cron, `docker exec`) Ruby
      # hands it over as binary bytes: `bobbin pause café` paused, then failed in JSON's backtrace, and on SQLite every
      # filter with a letter beyond ASCII (`bobbin retry --failed --queue café`) failed in the driver's.
      def utf8(argv)
        argv.map do |argument|
          text = argument.dup.force_encoding(Encoding::UTF_8)
          text.valid_encoding? ? text : raise(UsageError, "the argument #{argument.b.dump} is not UTF-8 text")
        end
      end

      # Asked for (help, -h, --help, nothing), the usage goes to stdout; after an unknown command, to stderr with exit 64.
      def usage(command)
        return puts(USAGE).then { 0 } if command.nil? || %w[-h --help help].include?(command)

        warn("bobbin: unknown command #{command.inspect}")
        warn(USAGE)
        64
      end

      # Parses the command line of a command that needs only the database: -d, -r, --help and exactly the
      # `operands` named (e.g. "QUEUE"). Returns [options, *operands].
      def database_command(command, argv, *operands)
        options = {}
        parser = OptionParser.new do |o|
          o.banner = [ "Usage: bobbin #{command}", *operands, "[options]" ].join(" ")
          database_options(o, options)
        end
        parser.parse!(argv)
        if argv.size != operands.size
          wrong = argv.size < operands.size ? "#{operands[argv.size]} missing" : "unexpected #{argv.drop(operands.size).join(' ').inspect}"
          raise UsageError, "#{command}: #{wrong} (usage: #{parser.banner.delete_prefix('Usage: ')})"
        end
        [ options, *argv ]
      rescue OptionParser::ParseError => error
        raise UsageError, error.message
      end

      def start_supervisor(argv)
        held = hold_signals
        mode = configured(argv)[:mode]
        Boot.before_work
        Supervisor.new(mode: mode).start(held_signals: held)
      end

      # TSTP (quiet) and TTIN (dump) that come while the app boots, before the supervisor's or worker's own traps: held, to
      # be acted on once they are in. Their default suspends the process: a TSTP sent to quiet a `bobbin start` still
      # booting (a deploy's, or Ctrl-Z) left it stopped, deaf to the TERM that followed, until killed (a review).
      def hold_signals
        [].tap { |held| HELD_SIGNALS.each { |signal| trap(signal) { held << signal unless held.include?(signal) } } }
      end

      def doctor(argv)
        options = { mode: "fork" }
        Doctor.new(mode: configured(argv, options, supervisor_parser(options, "doctor"))[:mode]).run
      end

      # Parses start/doctor options (or work's), boots the app or database and loads the pools they describe.
      def configured(argv, options = { mode: "fork" }, parser = supervisor_parser(options), optional: false)
        parse(parser, argv, options)
        ConfigFile.exists!(options[:config]) if options[:config]
        boot(options)
        load_pools(options, optional: optional && !options[:config])
        options
      end

      def toggle(command, argv)
        options, queue = database_command(command, argv, "QUEUE")
        raise UsageError, "#{command}: QUEUE must be a queue's name, got #{queue.inspect}" if queue.strip.empty?

        boot(options)
        unlocked { toggled(command, queue) }
      end

      def toggled(command, queue)
        changed = begin
          Bobbin.public_send(command, queue).positive?
        rescue ArgumentError => error # a pattern, a name longer than any queue's: one line, not a backtrace
          raise UsageError, "#{command}: #{error.message}"
        end
        shown = Printable.printable(queue) # `bobbin pause $'\e[2J'` cleared the screen as it confirmed
        if command == "pause"
          puts(changed ? "paused #{shown}" : "paused #{shown} (it already was)")
        else
          puts(changed ? "resumed #{shown}" : "was not paused: #{shown}")
        end
        0
      end

      # As `bobbin jobs` (OperatorCommands#unlocked): counts, pause, resume and recurring waited in silence for the whole
      # lock (a VACUUM FULL, a migration's rewrite), when an operator needs them most.
      def unlocked(&) = OperatorCommands.new(self).unlocked(&)

      # `bobbin migrate`: brings Bobbin's tables to this version and says what it did.
      def migrate(options)
        begin
          before = Bobbin.migrate! # read in its turn: two at once, the second found version 1 in the first's half-made tables
        rescue ActiveRecord::ActiveRecordError => error # a role that may not create tables: one line, not a backtrace
          # A database down (a Rails app connects at its first query) or restarting as a deploy's migrate runs: exit 69,
          # as every other command, not 78, which told the deploy that no retry would mend it.
          failed = DatabaseProblem.unreachable?(error) ? DatabaseUnreachable : ConfigurationError
          raise failed, "migrate failed: #{migrate_problem(error, Boot.described(Boot.source(options[:database])))}"
        end
        done = case before
        when 0 then "created Bobbin's tables (schema version #{Schema::VERSION})"
        when Schema::VERSION then "Bobbin's tables are at schema version #{Schema::VERSION} already"
        when (Schema::VERSION + 1)... then "#{Schema.newer(before)}: nothing done"
        else "upgraded Bobbin's tables from schema version #{before} to #{Schema::VERSION}"
        end
        puts(done)
      end

      # What stopped a migrate: for a role missing a privilege, the one a migrate needs (not the workers' grants). `where`
      # names what gave the database: in a Rails app "is DATABASE_URL right?" sent the user to a variable it never read.
      def migrate_problem(error, where)
        unless DatabaseProblem.denied?(error)
          return DatabaseProblem.describe(error, where).delete_prefix("database error before starting: ")
        end

        "the database role may not create or change Bobbin's tables (#{DatabaseProblem.first_line(error.cause || error)}): " \
          "run it as a role with CREATE on the schema (its owner, or the tables' owner on an upgrade)"
      end

      def list_recurring
        tasks = RecurringTask.order(:key).to_a
        return puts("no recurring tasks (a supervisor records them when it starts)") if tasks.empty?

        last_runs = RecurringTask.last_runs(tasks.map(&:key))
        tasks.each do |task|
          last_run_at, job = last_runs[task.key]
          line = format("%-30s %-24s last %-25s next %s", task.key, task.schedule, last_run_at&.utc&.iso8601 || "never",
                        task.next_run_at&.utc&.iso8601 || "unknown (a schedule this version cannot read)")
          puts(Printable.printable("#{line}#{outcome(job)}"))
        end
      end

      # How a task's last job went, while its row is kept: " (job 42 failed: RuntimeError: boom)"; "" without one.
      def outcome(job)
        return "" unless job

        " (job #{job.id} #{job.shown_state}#{": #{job.shown_error[0, 60]}" if job.shown_error})"
      end

      # start's and doctor's options: a pool's, without work's --drain (a supervisor has no end to drain to).
      def supervisor_parser(options, command = "start")
        pool_parser(options).tap do |o|
          o.banner = "Usage: bobbin #{command} [options]#{DOCTOR_EXIT if command == 'doctor'}"
          o.on("-c", "--config FILE", "pools and settings (default config/bobbin.yml when present)") { |v| options[:config] = v }
          o.on("--processes N", Integer, "processes for the one pool given by flags") { |v| options[:processes] = v }
          o.on("--mode MODE", %w[fork async], "fork (default): a process per slot; async: threads in one process") { |v| options[:mode] = v }
        end
      end

      def load_pools(options, optional: false)
        # One the app loaded as it booted (a Rails app's config/bobbin.yml, also when -c names it) is not loaded again: over
        # what config.bobbin and the initializers set after it (a review).
        config = options[:config] || ("config/bobbin.yml" if File.exist?("config/bobbin.yml"))
        ConfigFile.load(config, optional: optional) if config && !ConfigFile.loaded?(config)
        load_recurring
        pool = options.slice(:queues, :fibers, :threads, :processes, :polling_interval, :stall_threshold, :thread_lane).transform_keys(&:to_s)
        Bobbin.config.set(**options.slice(:shutdown_timeout, :notified_polling_interval))
        Bobbin.config.workers = [ flagged_pool(pool) ] if pool.any?
      end

      # The one pool the flags describe: with --fibers or --threads, the flags alone; otherwise the configured pool
      # with the flags' changes (`start -q critical` runs only that queue), which needs exactly one configured pool.
      def flagged_pool(flags)
        return flags if flags.key?("fibers") || flags.key?("threads")

        pools = Bobbin.config.pools
        unless pools.one?
          raise ConfigurationError, "#{flags.keys.map { |key| "--#{key.tr('_', '-')}" }.join(', ')}: the configuration has #{pools.size} " \
                                    "pools; give --fibers N or --threads N to run one pool from the flags instead"
        end
        pools.first.settings.merge(flags)
      end

      # config/recurring.yml, unless the Rails app loaded it: the supervisor schedules its tasks, workers run
      # its commands.
      def load_recurring
        path = "config/recurring.yml"
        Recurring.load_file(path) if File.exist?(path) && !defined?(Bobbin::Railtie)
      end

      # One pool in this process, with the settings of the config file `start` reads (heartbeats, thresholds,
      # retention: processes judge each other by them); the pool is the flags', else the file's one pool.
      # A config/bobbin.yml without this environment's section is left alone, as a Rails app's (-c FILE must have it).
      def work(argv)
        options = {}
        held = hold_signals
        configured(argv, options, worker_parser(options), optional: true)
        HELD_SIGNALS.each { |signal| trap(signal, "DEFAULT") } if options[:drain] # a drain takes no signals of its own
        pool = one_pool
        Boot.before_work
        ConnectionBudget.warn_server([ pool.with(processes: 1) ], :fork, "bobbin worker", supervised: false) # as bobbin start does
        worker = Worker.new(**pool.worker_options)
        options[:drain] ? worker.run_until_empty : worker.start(held_signals: held)
        worker.exit_status
      end

      def worker_parser(options)
        pool_parser(options).tap do |o|
          o.banner = "Usage: bobbin work [options]"
          o.on("-c", "--config FILE", "settings, and the pool when it has one (default config/bobbin.yml when present)") { |v| options[:config] = v }
          o.on("--drain", "run until no job is due, then exit") { options[:drain] = true }
        end
      end

      def one_pool
        pools = Bobbin.config.pools
        return pools.first if pools.one?

        raise ConfigurationError, "bobbin work runs one pool and the configuration has #{pools.size}: give --fibers N or --threads N " \
                                  "(and --queues), or run them all with bobbin start"
      end

      # The options of one pool, and where its jobs and database are.
      def pool_parser(options)
        OptionParser.new do |o|
          o.on("-q", "--queues LIST", Array, "queues, in order; * and prefix* wildcards (default *)") { |v| options[:queues] = v }
          o.on("--fibers N", Integer, "run up to N jobs as fibers on one event loop") { |v| options[:fibers] = v }
          o.on("--threads N", Integer, "run up to N jobs on a pool of N threads") { |v| options[:threads] = v }
          o.on("--polling-interval SECONDS", Float, "idle wait between claims without notifications (default 1)") { |v| options[:polling_interval] = v }
          o.on("--notified-polling-interval SECONDS", Float, "the same while notifications work (default 10)") { |v| options[:notified_polling_interval] = v }
          o.on("--shutdown-timeout SECONDS", Float, "wait this long for jobs on TERM") { |v| options[:shutdown_timeout] = v }
          o.on("--stall-threshold SECONDS", /\A(?:off|\d+(?:\.\d+)?)\z/, "fibers: report a job holding the loop this long (default 0.1; off)") do |v|
            options[:stall_threshold] = v == "off" ? false : v.to_f
          end
          o.on("--thread-lane N", Integer, "fibers: threads for runs_on: :thread jobs (default 2; 0: none)") { |v| options[:thread_lane] = v }
          database_options(o, options)
        end
      end

      # Parses flags and checks their values as Bobbin.configure would, naming the flag. These commands take no operand:
      # one left over is refused (`bobbin start config/jobs.yml`, without -c, ran config/bobbin.yml's pools).
      def parse(parser, argv, options)
        parser.parse!(argv)
        if argv.any?
          usage = parser.banner.lines.first.chomp.delete_prefix("Usage: ")
          raise UsageError, "#{usage.split[1]}: unexpected #{argv.join(' ').inspect} (usage: #{usage})"
        end
        FLAGS.each { |key, flag| Setting.check(key, options[key], flag) if options.key?(key) }
      end
  end
end
