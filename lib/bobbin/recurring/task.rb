# frozen_string_literal: true

module Bobbin
  module Recurring
    # One recurring task as configured (config/recurring.yml or `Bobbin.recurring`): a schedule fugit parses
    # (cron, with an optional seconds field and time zone, or "every day at 3am"), and either a job class with
    # arguments or a command (Ruby code from the app's own configuration, run by CommandJob). Schedules are in
    # Bobbin.config.recurring_time_zone unless the expression names a zone ("0 3 * * * Europe/Paris").
    class Task < Data.define(:key, :schedule, :cron, :class_name, :arguments, :command, :queue, :priority, :description)
      KEYS = %w[schedule class args command queue priority description].freeze

      # Builds a Task from a Hash of KEYS; raises ConfigurationError naming `where` and the key at fault.
      def self.parse(key, hash, where)
        hash = mapping!(hash, where).transform_keys(&:to_s)
        unknown = hash.keys - KEYS
        raise ConfigurationError, "#{where}: unknown key #{unknown.first.inspect} (known: #{KEYS.join(', ')})" if unknown.any?

        cron = cron(hash["schedule"], where).tap { |parsed| check_interval(hash["schedule"].to_s, parsed, where) }
        new(key: key.to_s, schedule: hash["schedule"].to_s, cron: cron, **target(hash, where),
            queue: queue(hash["queue"], where), priority: priority(hash["priority"], where), description: hash["description"]&.to_s)
      end

      # A task of `schedule` alone, for its ticks (a stored task's next run).
      def self.timing(key, schedule)
        new(key: key.to_s, schedule: schedule, cron: cron(schedule, key), class_name: nil, arguments: [], command: nil, queue: nil, priority: nil,
            description: nil)
      end

      # `hash`, a task's mapping; raises ConfigurationError naming `where` when it is not one.
      def self.mapping!(hash, where)
        return hash if hash.is_a?(Hash)

        raise ConfigurationError, "#{where}: a recurring task must be a mapping of #{KEYS.join(', ')}, got #{hash.inspect}"
      end

      # fugit (and et-orbi: ~75 ms here) loads with the first schedule, not with every process that runs jobs. A
      # schedule that names no zone gets Bobbin.config.recurring_time_zone (UTC, or a Rails app's config.time_zone, as
      # Solid Queue gives it): fugit would read it in the process's zone (TZ, the system's), and schedulers on hosts in
      # different zones would each store their own ticks.
      def self.cron(schedule, where)
        # fugit reads a blank string as "* * * * *": a task that forgot its schedule would run every minute.
        raise ConfigurationError, "#{where}.schedule: missing (cron \"*/5 * * * *\", \"every day at 3am\", \"every second\")" if schedule.to_s.strip.empty?

        require "fugit"
        cron = Fugit.parse_cronish(schedule.to_s) || raise(ConfigurationError, "#{where}.schedule: #{schedule.inspect} is not a schedule " \
                                                                                "fugit understands (cron \"*/5 * * * *\", \"every day at 3am\", \"every second\")")
        cron.timezone ? cron : Fugit::Cron.parse("#{cron.to_cron_s} #{Bobbin.config.recurring_time_zone}")
      end

      # Seconds in each unit "every N <unit>" may name.
      UNITS = { "second" => 1, "minute" => 60, "hour" => 3600, "day" => 86_400 }.freeze

      # "every 90 seconds" has no cron: fugit reads it as every minute ("every 36 hours" as daily, "every 7 minutes" as
      # minutes 0, 7, …, 56, then 0 again; "every 7 days" as days 1, 8, 15, 22, 29 of each month, then the 1st), and it
      # passed at boot (a trial). Such a schedule is refused, saying what fugit read it as, where the configuration is
      # read (not each time a stored task's next run is shown).
      def self.check_interval(schedule, cron, where)
        count, unit = schedule.strip.downcase.match(/\Aevery\s+(\d+)\s*(second|minute|hour|day)s?\z/)&.captures
        return unless count

        wanted = count.to_i * UNITS.fetch(unit)
        start = Time.utc(2026, 1, 1)
        ticks = [ cron.next_time(start).to_t ]
        ticks << cron.next_time(ticks.last).to_t while ticks.last < start + [ 2 * wanted, UNITS.fetch(unit) * 120 ].max # past the next unit's turn
        return if ticks.each_cons(2).all? { |a, b| b - a == wanted }

        raise ConfigurationError, "#{where}.schedule: #{schedule.inspect} cannot be kept by cron (fugit reads it as " \
                                  "\"#{cron.to_cron_s.delete_suffix(' UTC')}\"); use an interval that divides the next unit evenly " \
                                  "(every 30 seconds, every 20 minutes, every 6 hours) or a cron expression"
      end

      def self.target(hash, where)
        given = %w[class command].select { |name| hash.key?(name) }
        raise ConfigurationError, "#{where}: give exactly one of class: (a job class) or command: (Ruby code)" unless given.size == 1
        # Left blank (`class:` with nothing after it), it passed at boot and the task failed at every tick, or ran nothing.
        raise ConfigurationError, "#{where}.#{given.first}: blank (give #{given.first == 'class' ? 'a job class' : 'Ruby code'})" if hash[given.first].to_s.strip.empty?

        arguments = hash.fetch("args", [])
        arguments = [ arguments ] unless arguments.is_a?(Array)
        raise ConfigurationError, "#{where}.args: a command takes no arguments" if hash.key?("command") && hash.key?("args")

        { class_name: hash["class"]&.to_s, command: hash["command"]&.to_s, arguments: arguments }
      end

      # A queue or priority no job row can have (an empty or comma'd queue, a priority past 32 bits) passed at boot and
      # was refused at every tick, so the task never ran: refused here, as the enqueue would.
      def self.queue(value, where)
        value.nil? ? nil : Client::Fields.queue(value.to_s, "#{where}.queue")
      rescue EnqueueError => error
        raise ConfigurationError, error.message
      end

      def self.priority(value, where)
        return value if value.nil? || (value.is_a?(Integer) && Client::Fields::INT32.cover?(value))

        raise ConfigurationError, "#{where}.priority: must be a whole number from #{Client::Fields::INT32.min} to " \
                                  "#{Client::Fields::INT32.max} (lower runs first), got #{value.inspect}"
      end

      # The ticks of the schedule after `since` and up to `now`, oldest first, at most `limit` of them.
      def ticks(since, now, limit: 1_000)
        ticks = []
        tick = next_time(since)
        while tick <= now && ticks.size < limit
          ticks << tick
          tick = next_time(tick)
        end
        ticks
      end

      # The latest tick at or before `now` (fugit's previous_time is strictly before the current second).
      def latest_tick(now)
        previous = cron.previous_time(now.utc).to_t.utc
        candidate = cron.next_time(previous).to_t.utc
        latest = candidate <= now ? candidate : previous
        latest - repeated_by(latest).to_i # a repeat's first time (an hour before, or 30 minutes on Lord Howe Island: a trial)
      end

      # The first tick after `now`. Every time goes to fugit in UTC: given a local Time of the hour a process's own
      # zone repeats (01:10 EDT, the night New York's clocks go back), et-orbi cannot tell the zone from "EDT" and
      # raised, so the scheduler skipped that catch-up tick (a trial).
      def next_time(now = Time.now)
        tick = cron.next_time(now.utc).to_t.utc
        tick = cron.next_time(tick).to_t.utc while repeated_by(tick)
        tick
      end

      # The columns of this task's row in bobbin_recurring_tasks; raises ConfigurationError naming the task when JSON
      # cannot write its args (NaN or Infinity, from Ruby or recurring.yml's `.nan`; a string in no encoding it converts).
      def attributes
        { key: key, schedule: schedule, class_name: class_name, command: command, arguments: stored_arguments,
          queue: queue, priority: priority, description: description }
      end

      # The job row this task enqueues (the job class's own options unless the task sets queue or priority).
      def job_row
        return Client::Enqueuer.row(CommandJob, [ key ], **overrides) if command

        job_class = self.job_class
        return Client::Enqueuer.row(job_class, arguments, **overrides) if job_class.respond_to?(:bobbin_options)
        return active_job_row(job_class) if defined?(::ActiveJob::Base) && job_class < ::ActiveJob::Base

        raise ConfigurationError, "recurring task #{key}: #{class_name} is not a job class (include Bobbin::Job or inherit ActiveJob::Base)"
      end

      private
        def stored_arguments
          JSON.generate(arguments)
        rescue JSON::GeneratorError, EncodingError => error
          raise ConfigurationError, "recurring task #{key}: args cannot be written as JSON (#{error.message[0, 120]})"
        end

        # Only the lookup: a NoMethodError (a NameError too) from building the job is not an unknown class.
        def job_class
          Object.const_get(class_name)
        rescue NameError => error
          raise ConfigurationError, "recurring task #{key}: unknown job class #{class_name} (#{error.message.lines.first.strip})"
        rescue ScriptError => error # its file requires a missing gem, or does not parse
          raise ConfigurationError, "recurring task #{key}: job class #{class_name} could not be loaded (#{error.class}: #{error.message.lines.first.strip})"
        end

        def overrides = { queue: queue, priority: priority }.compact

        # For a tick in the stretch that the zone's clocks repeat when daylight saving time ends, of a schedule that names
        # its hours, the seconds since that wall time ticked before (it ticks once); else nil. (fugit's ticks are instants:
        # "30 1 * * *" in New York has two on that night, 01:30 EDT and 01:30 EST.) The clocks go back by what the zone's
        # offset fell in the hours before the tick: an hour mostly, 30 minutes on Lord Howe Island, 2 hours at Troll (an
        # hour alone ticked those twice: a review). A schedule of every hour or more often ticks on through the repeated
        # stretch, as cron does.
        def repeated_by(tick)
          return if cron.hours.nil?

          back = offset(tick - 3 * 3600) - offset(tick)
          back if back.positive? && wall(tick - back) == wall(tick)
        end

        def offset(time) = ::EtOrbi::EoTime.new(time.to_f, cron.timezone).utc_offset

        # The arguments as Solid Queue passes a recurring task's (so its recurring.yml ports as is): hash keys as
        # symbols, and a last Hash as keyword arguments (`args: [ 42, { status: "done" } ]` → `perform(42, status: "done")`).
        def active_job_arguments
          symbolized = { arguments: arguments }.deep_symbolize_keys[:arguments] # hashes in arrays too
          symbolized.last.is_a?(Hash) ? [ *symbolized[0...-1], Hash.ruby2_keywords_hash(symbolized.last) ] : symbolized
        end

        def wall(time) = ::EtOrbi::EoTime.new(time.to_f, cron.timezone).strftime("%F %T")

        # The queue and priority as Active Job's set(queue:, priority:) gives them, as Solid Queue's recurring tasks do: the
        # queue with the app's queue_name_prefix (written as is, a tick's job went to the bare queue, which no worker of the
        # app's prefixed queues took: a review).
        def active_job_row(job_class)
          job = job_class.new(*active_job_arguments).set(overrides)
          ::ActiveJob::QueueAdapters::BobbinAdapter.new.row(job, nil)
        end
    end
  end
end
