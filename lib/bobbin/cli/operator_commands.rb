# frozen_string_literal: true

module Bobbin
  class CLI
    # `bobbin jobs|retry|discard|queues|processes|dashboard`: the operator layer on the command line. Output is
    # plain aligned text for people (and `cut`/`awk`); exit 0 when done, 1 when an action could not be done to a
    # job it named (missing, or in a state the action leaves alone), 64 for a bad command line.
    class OperatorCommands
      include Printable

      # Rows a `bobbin jobs` page may ask for: a page is loaded whole, and 100,000,000 took 1.6 GB for 500,000 rows.
      MAX_LIMIT = 10_000

      def initialize(cli)
        @cli = cli
      end

      def run(command, argv)
        options = {}
        filter = {}
        parser(command, options, filter).parse!(argv)
        failed_only(command, filter) if options[:failed]
        refuse_arguments(command, argv) unless %w[retry discard].include?(command)
        @cli.boot(options)
        unlocked do
          case command
          when "jobs" then list(filter, options)
          when "queues" then queues
          when "processes" then processes
          else act(command, argv, filter, options)
          end
        end
      rescue ArgumentError, OptionParser::ParseError => error # a --state not known says which are (it named only the wrong one)
        raise UsageError, error.is_a?(OptionParser::InvalidArgument) && error.args.first == "--state" ? "#{error.message} (one of #{Operator::Filter::STATES.join(', ')})" : error.message
      end

      # The block's value (an exit status), waiting only briefly for a lock another session holds on Bobbin's tables
      # (during a migration or a VACUUM FULL, when an operator needs these commands most): then said at once, with who
      # holds it, instead of waiting in silence until it ends. Exit 75.
      def unlocked(&)
        Store.waiting_briefly_for_locks(&)
      rescue ActiveRecord::ActiveRecordError => error
        raise unless Store.locked?(error)

        said = Store.lock_holders
        warn(printable("bobbin: #{Store.lock_waited}#{": #{said}" unless said.empty?}; try again when it ends"))
        75
      end

      # Serves Bobbin::Dashboard with Rack's own server (WEBrick or Puma when installed) until INT/TERM.
      def dashboard(argv)
        options = serve_options("dashboard", 9292, argv) { |o, opts| o.on("--read-only", "show, never change") { opts[:read_only] = true } }
        serve("dashboard", options) do |auth|
          Dashboard.new(auth: auth, read_only: options[:read_only]).tap do |app|
            # Not a server that refuses every page: without --auth-token in production it started, then said 403 (a review).
            raise ConfigurationError, "bobbin dashboard: #{app.unguarded}: give it --auth-token TOKEN (HTTP basic auth)" if app.unguarded
          end
        end
      end

      # Serves the Prometheus exposition (Bobbin::Metrics) on every path until INT/TERM.
      def metrics(argv)
        options = serve_options("metrics", 9394, argv)
        serve("metrics", options) { |auth| Metrics.rack_app(auth: auth) }
      end

      private
        # `bobbin jobs 14` listed every job, the 14 silently dropped.
        def refuse_arguments(command, argv)
          return if argv.empty?

          hint = "; filter with --state, --queue, --class, --search (a job's details: the dashboard's job page)" if command == "jobs"
          raise UsageError, "bobbin #{command} takes options only, got #{argv.join(' ').inspect}#{hint}"
        end

        # `--failed` is every failed job: with `--state ready` it discarded ready jobs, saying only how many.
        def failed_only(command, filter)
          if filter[:state] && filter[:state] != "failed"
            raise UsageError, "bobbin #{command} --failed selects failed jobs, not #{filter[:state]} ones: drop --state, or use --all with it"
          end

          filter[:state] = "failed"
        end

        def serve_options(command, port, argv)
          options = { port: port, host: "127.0.0.1" }
          OptionParser.new do |o|
            o.banner = "Usage: bobbin #{command} [options]"
            @cli.database_options(o, options)
            o.on("-p", "--port PORT", Integer, "port (default #{port})") do |v|
              # 99999 served on 34463 (the port modulo 65536) while saying 99999; -1 and 0 ended in a backtrace or a port unsaid
              raise UsageError, "bobbin #{command}: --port #{v} is not a TCP port (1 to 65535)" unless (1..65_535).cover?(v)

              options[:port] = v
            end
            o.on("--host HOST", "address to bind (default 127.0.0.1; another needs --auth-token)") { |v| options[:host] = v }
            o.on("--auth-token TOKEN", "require this token (HTTP basic auth password; default BOBBIN_AUTH_TOKEN)") do |token|
              # `--auth-token --port 9399` or `-p9399` (its value left out) took the option for the token and dropped the port
              if token.match?(/\A-(-|[a-zA-Z])/)
                raise UsageError, "bobbin #{command}: --auth-token needs a value, got the option #{token} (a token may not start with - and a letter)"
              end

              options[:token] = token
            end
            yield(o, options) if block_given?
          end.parse!(argv)
          refuse_arguments(command, argv)
          # The token from the environment, where no other user reads it: on the command line any user of the machine
          # read it in `ps` or /proc/PID/cmdline (a Rails app's whole boot, before Puma retitles the process; for good under
          # a server that does not), as did every tool that logs a unit's or a container's command. Set but empty: as an
          # empty --auth-token, refused as the server starts.
          options[:token] ||= ENV["BOBBIN_AUTH_TOKEN"]
          options
        rescue OptionParser::ParseError => error # a trailing `--auth-token` with no value, an unknown flag: exit 64
          raise UsageError, error.message
        end

        def serve(command, options, &app)
          @cli.boot(options)
          Dashboard::Server.new(name: command, **options.slice(:port, :host, :token), &app).run
          0
        end

        def parser(command, options, filter)
          OptionParser.new do |o|
            o.banner = if %w[retry discard].include?(command)
              "Usage: bobbin #{command} ID... [options]\n   or: bobbin #{command} --failed|--all [filters] [options]"
            else
              "Usage: bobbin #{command} [options]"
            end
            @cli.database_options(o, options)
            next if %w[queues processes].include?(command)

            o.on("--state STATE", Operator::Filter::STATES, "one of #{Operator::Filter::STATES.join(', ')}") { |v| filter[:state] = v }
            o.on("--queue QUEUE") { |v| filter[:queue] = v }
            o.on("--class CLASS", "job class name") { |v| filter[:class_name] = v }
            o.on("--search TEXT", "substring of the arguments or last error") { |v| filter[:search] = v }
            o.on("--process ID", "jobs claimed by process ID") { |v| filter[:process_id] = v }
            o.on("--stalled", "jobs that held a fiber pool's event loop past its stall threshold") { filter[:stalled] = true }
            o.on("--finished-before TIME", "ISO 8601") { |v| filter[:finished_before] = v }
            o.on("--finished-after TIME", "ISO 8601") { |v| filter[:finished_after] = v }
            if command == "jobs"
              # UsageError, not OptionParser's InvalidArgument: OptionParser puts the flag before its message (it read
              # "--limit --limit 10001: …") or, for --limit=N, in place of it.
              o.on("--limit N", Integer, "rows per page (default 50, at most #{MAX_LIMIT})") do |v|
                raise UsageError, "--limit #{v}: a page has 1 row or more" unless v.positive?
                raise UsageError, "--limit #{v}: a page has at most #{MAX_LIMIT} rows (go on with --after)" if v > MAX_LIMIT

                options[:limit] = v
              end
              o.on("--after CURSOR", "the page after CURSOR (printed under a full page)") { |v| options[:cursor] = v }
            else
              o.on("--failed", "every failed job the filters select") { options[:failed] = options[:all] = true }
              o.on("--all", "every job the filters select (retry: failed and discarded; discard: failed and waiting)") { options[:all] = true }
              o.on("--by NAME", "who to record as doing it (default $USER)") { |v| options[:by] = v }
            end
          end
        end

        def list(filter, options)
          page = Operator.jobs(filter, cursor: options[:cursor], limit: options.fetch(:limit, 50))
          return puts("no jobs").then { 0 } if page.jobs.empty?

          table([ %w[ID STATE QUEUE CLASS ATTEMPTS AT ERROR] ] + page.jobs.map { |job| job_cells(job) })
          puts("more: --after #{page.next_cursor}") if page.next_cursor
          0
        end

        # A job's line: its attempts with the crashes it was in flight at (recovery gives those back, so attempts may
        # pass the maximum), when it runs, started or ended, and the first line of a failure's or a waiting retry's
        # error, or the key a blocked job waits on.
        def job_cells(job)
          error = if job.shown_state == "blocked" then "waiting on #{job.concurrency_key} (limit #{job.concurrency_limit})"
          else job.shown_error.to_s[0, 60]
          end
          attempts = "#{job.attempts}/#{job.attempts_allowed}#{" (#{job.crashes} #{'crash'.pluralize(job.crashes)})" if job.crashes.to_i.positive?}"
          [ job.id.to_s, job.shown_state, job.queue, job.class_name, attempts, job.shown_at&.utc&.strftime("%Y-%m-%d %H:%M:%S").to_s, error ]
        end

        # Prints rows as columns as wide as their longest cell (the last one as it is).
        def table(rows)
          rows = rows.map { |cells| cells.map { |cell| printable(cell) } }
          widths = rows.transpose.map { |cells| cells.map(&:size).max }
          rows.each { |cells| puts(cells.each_with_index.map { |cell, i| i == cells.size - 1 ? cell : cell.ljust(widths[i]) }.join(" ").rstrip) }
        end

        # retry/discard: the ids given, or (--failed/--all) every job the filters select. Exit 1 when an id given
        # was not acted on, saying why.
        def act(command, ids, filter, options)
          by = options[:by] || ENV["USER"] || "cli"
          if options[:all]
            raise ArgumentError, "give job ids or --failed/--all, not both" if ids.any?

            count = Operator.public_send(:"#{command}_all", filter, by: by)
            puts("#{command == 'retry' ? 'retried' : 'discarded'} #{count} job#{'s' unless count == 1}")
            return 0
          end
          raise ArgumentError, "#{command} needs job ids, or --failed" if ids.empty?
          # `discard 605064 --queue nosuch` discarded job 605064, the filter ignored (a trial).
          raise ArgumentError, "filters go with --failed or --all; give job ids without them" if filter.any?

          ids.map { |id| Integer(id, 10) rescue raise(ArgumentError, "#{id.inspect} is not a job id") }
             .map { |id| act_one(command, id, by) }.all? ? 0 : 1
        end

        def act_one(command, id, by)
          return true.tap { puts("#{command == 'retry' ? 'retried' : 'discarded'} #{id}") } if Operator.public_send(command, id, by: by)

          job = JobRecord.find_by(id: id)
          warn("bobbin: job #{id} #{job ? "is #{job.state}: #{command} acts on #{command == 'retry' ? 'failed or discarded' : 'failed or waiting'} jobs" : 'not found'}")
          false
        end

        def queues
          list = Operator.queues
          return puts("no queues with waiting, running or failed jobs").then { 0 } if list.empty?

          puts(format("%-24s %8s %10s %8s %8s %8s  %s", "QUEUE", "DUE", "SCHEDULED", "BLOCKED", "RUNNING", "FAILED", "LATENCY"))
          list.each do |q|
            puts(format("%-24s %8d %10d %8d %8d %8d  %s%s", printable(q.name), q.ready, q.scheduled, q.blocked, q.running, q.failed, duration(q.latency),
                        q.paused ? "  paused" : ""))
          end
          0
        end

        def processes
          list = Operator.processes
          return puts("no processes registered").then { 0 } if list.empty?

          puts(format("%-6s %-10s %-24s %-13s %-8s %-9s %-9s %-8s %-7s %-13s %-7s %s", "ID", "KIND", "HOST:PID", "MODE", "BUSY", "RUNNING",
                      "BEAT AGO", "RSS", "DB", "LAG/MAX MS", "STALLS", "QUEUES"))
          list.each do |p|
            puts(format("%-6d %-10s %-24s %-13s %-8s %-9d %-9s %-8s %-7s %-13s %-7s %s%s", p.id, printable(p.kind), "#{printable(p.hostname)[0, 16]}:#{p.pid}", "#{printable(p.mode || '-')}#{',quiet' if p.quiet?}",
                        p.capacity ? "#{p.busy}/#{p.capacity}" : "-", p.running, duration(p.heartbeat_age), p.rss_kb ? "#{p.rss_kb / 1024}M" : "-",
                        p.db_pool ? "#{p.db_in_use}/#{p.db_pool}" : "-", lag(p.health), p.health["stalls"] || "-", printable(p.queues || "-"),
                        p.stale? ? "  STALE" : ""))
          end
          0
        end

        # A fiber pool's loop lag now and at most, in ms ("-" for thread pools and supervisors).
        def lag(health)
          now, max = health.values_at("loop_lag_ms", "max_loop_lag_ms")
          now ? "#{now.round}/#{max.to_f.round}" : "-"
        end

        def duration(seconds) = seconds < 120 ? "#{seconds.round(1)}s" : "#{(seconds / 60).round}m"
    end
  end
end
