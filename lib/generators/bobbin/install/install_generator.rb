# frozen_string_literal: true

require "rails/generators"
require "rails/generators/active_record/migration"
require_relative "database_config"
require_relative "installed_schema"

module Bobbin
  module Generators
    # `bin/rails generate bobbin:install [--database queue|primary] [--environments production|all]`: config/bobbin.yml,
    # config/recurring.yml, bin/bobbin, Bobbin's schema (db/queue_schema.rb for its own database, or a migration),
    # the Active Job adapter, the fiber isolation level, the Puma plugin line. Running it again changes nothing, unless
    # Bobbin's files in the app are at an older schema version (after a gem upgrade): then it adds a migration that
    # brings the tables up to date (InstalledSchema), once.
    class InstallGenerator < ::Rails::Generators::Base
      include ::ActiveRecord::Generators::Migration

      source_root File.expand_path("templates", __dir__)

      class_option :database, type: :string, default: "queue", enum: %w[queue primary],
                              desc: "queue: Bobbin's tables in their own database (config.bobbin.connects_to); primary: in the app's"
      class_option :environments, type: :string, default: "production", enum: %w[production all],
                                  desc: "where Active Job uses Bobbin: production (config/environments/production.rb) or all (tests keep the test adapter)"

      ADAPTER = "config.active_job.queue_adapter = :bobbin"
      PRODUCTION_ONLY = "Active Job uses Bobbin in production (config/environments/production.rb). Development keeps its adapter;\n" \
                        "to run jobs on Bobbin there too: bin/rails generate bobbin:install --environments all"
      # A line setting (or, commented out, suggesting) Active Job's adapter, as `rails new` and Solid Queue write it.
      ADAPTER_LINE = /^([ \t]*)#?[ \t]*config\.active_job\.queue_adapter[ \t]*=.*$/
      # A GoodJob app moved over (a trial): nothing moves the jobs in good_jobs; a `good_job start` left to finish them
      # still ran config.good_job.cron, each entry enqueued through Bobbin's adapter beside recurring.yml's (every tick
      # twice), and GOOD_JOB_ENABLE_CRON=false did not stop it, config's `enable_cron = true` winning over it.
      GOOD_JOB_NOTE = "Jobs already in GoodJob's good_jobs table run only on GoodJob: keep `bundle exec good_job start` running until " \
                      "GoodJob::Job.where(finished_at: nil) is empty, with config.good_job.enable_cron = false (GOOD_JOB_ENABLE_CRON=false " \
                      "does not override a true in config): with its cron on, it enqueues each config.good_job.cron entry through Bobbin " \
                      "too, and every tick runs twice. Move those entries to config/recurring.yml (cron: becomes schedule:, set:'s queue: " \
                      "and priority: go beside it, kwargs: is a last Hash in args). GoodJob's concurrency controls do nothing under Bobbin " \
                      "(perform_later refuses a class that has them): declare limits_concurrency. Then GoodJob's mount in config/routes.rb, " \
                      "its config.good_job lines and the gem can go."

      # `.queue_adapter = ` another adapter than Bobbin's (`:sidekiq`, `"good_job"`, or computed), the value captured.
      SETS_OTHER_ADAPTER = /\.queue_adapter[ \t]*=(?![ \t]*[:"']bobbin\b)[ \t]*(.*?)[ \t]*(?:#[^"']*)?$/
      # A line (not commented out) setting another adapter than Bobbin's.
      OTHER_ADAPTER = /^([ \t]*)config\.active_job#{SETS_OTHER_ADAPTER}/
      # An initializer's line setting another adapter (Sidekiq's `Rails.application.config.active_job.queue_adapter = :sidekiq`):
      # initializers run after config/application.rb and the environments' files, so it wins in every environment.
      INITIALIZER_ADAPTER = /^[ \t]*(?:Rails\.application\.config\.active_job|config\.active_job|(?:::)?ActiveJob::Base)#{SETS_OTHER_ADAPTER}/
      # A Procfile line whose command runs Solid Queue's supervisor: bin/jobs, or its rake task through rails or rake.
      SOLID_QUEUE_COMMAND = %r{^[ \t]*[\w-]+[ \t]*:.*(?:\bbin/jobs\b|\bsolid_queue:start\b)}
      # Such a line that is only that command (`worker: bin/jobs`, `worker: bundle exec rake solid_queue:start`), its
      # `name: ` captured.
      SOLID_QUEUE_PROCESS = %r{^([ \t]*[\w-]+[ \t]*:[ \t]*)(?:bundle[ \t]+exec[ \t]+)?(?:bin/jobs(?:[ \t]+start)?|(?:bin/)?(?:rails|rake)[ \t]+solid_queue:start)[ \t]*$}
      # A Procfile line that runs Bobbin (the install's own, or the user's).
      PROCFILE_BOBBIN = %r{^[ \t]*[\w-]+[ \t]*:.*\bbin/bobbin[ \t]+start\b}
      # A line setting Bobbin's adapter.
      BOBBIN_ADAPTER = /^[ \t]*config\.active_job\.queue_adapter[ \t]*=[ \t]*[:"']bobbin\b/
      # Active Record's require in config/application.rb, commented out (rails new --skip-active-record) or not.
      WITHOUT_ACTIVE_RECORD = /^[ \t]*#[ \t]*require[ \t]+["']active_record\/railtie["']/
      WITH_ACTIVE_RECORD = /^[ \t]*require[ \t]+["'](?:active_record\/railtie|rails\/all)["']/
      # structure.sql: Rails then loads db/queue_structure.sql, never db/queue_schema.rb.
      SQL_SCHEMA = /^[ \t]*config\.active_record\.schema_format[ \t]*=[ \t]*(?::sql|["']sql["'])/

      # Bobbin keeps its jobs in a database through Active Record. In an app that leaves it out (rails new
      # --skip-active-record: its require commented out in config/application.rb), the install wrote its files and
      # connects_to, said "Bobbin is installed" and to run db:prepare (a command that app does not have), and the app no
      # longer booted ("The `queue` database is not configured"; a review). It stops first, writing nothing.
      def check_active_record
        path = "config/application.rb"
        return unless exist?(path) && read(path).match?(WITHOUT_ACTIVE_RECORD) && !read(path).match?(WITH_ACTIVE_RECORD)

        raise Thor::Error, "Bobbin keeps its jobs in a database through Active Record, which this app leaves out " \
                           "(config/application.rb: # require \"active_record/railtie\"). Require it there, add a database " \
                           "gem (pg or sqlite3) and config/database.yml, then run bin/rails generate bobbin:install again. " \
                           "Nothing was changed."
      end

      def create_config_files
        template "config/bobbin.yml", skip: true
        template "config/recurring.yml", skip: true
        template "bin/bobbin", skip: true
        chmod "bin/bobbin", 0o755 & ~File.umask, verbose: false
      end

      # A new install gets Bobbin's schema: db/queue_schema.rb, or a create migration in the primary database or
      # beside another gem's db/queue_schema.rb (Solid Queue's); an install whose files bring the tables to an older
      # schema version (a gem upgrade) gets an upgrade migration; an install at this version gets nothing.
      def create_schema
        if installed.version == 0 || (installed.version.nil? && !separate?) || (@sql_migration = sql_migration_needed?)
          migration_template "db/create_bobbin_tables.rb", "#{migrations}/create_bobbin_tables.rb"
        elsif installed.outdated?
          migration_template "db/upgrade_bobbin_tables.rb", "#{migrations}/#{InstalledSchema.upgrade_migration(Schema::VERSION)}.rb"
        elsif installed.version
          say_status :identical, "Bobbin's schema (version #{installed.version}, #{migrations})", :blue
        end
        separate_database if separate?
      end

      # `rails new --minimal` leaves Active Job out (its require commented out in config/application.rb), and the adapter
      # lines below then stopped the app at boot (NoMethodError for config.active_job; a trial): Active Job comes on.
      def enable_active_job
        path = "config/application.rb"
        commented = /^([ \t]*)#[ \t]*(require[ \t]+["']active_job\/railtie["'].*)$/
        return unless exist?(path) && read(path).match?(commented)

        write(path, read(path).sub(commented) { "#{::Regexp.last_match(1)}#{::Regexp.last_match(2)}" })
        @active_job_enabled = true
      end

      def set_adapter
        production_adapter
        return unless all?

        application_settings
        development_adapter
        test_adapter
      end

      def set_isolation_level
        return unless fibers?

        setting = "config.active_support.isolation_level = :fiber"
        return if read("config/application.rb").include?(setting)

        inject_into_file "config/application.rb", "\n    # Bobbin's fiber pools run each job in a fiber: Active Record's connections and\n" \
                                                  "    # Active Support's state follow the fiber, not the thread.\n    #{setting}\n",
                         after: /^\s*config\.load_defaults.*\n/
      end

      def add_puma_plugin
        return unless exist?("config/puma.rb")

        line = 'plugin :bobbin if ENV["BOBBIN_IN_PUMA"]'
        return if read("config/puma.rb").match?(/^[ \t]*plugin[ \t(]+[:"']bobbin\b/) # the app's own line, as it wrote it

        append_to_file "config/puma.rb", "\n# Run Bobbin's supervisor and workers beside Puma (single-server deployments, development).\n#{line}\n"
      end

      # Kamal, as `rails new` sets it up, runs Solid Queue inside Puma (SOLID_QUEUE_IN_PUMA in config/deploy.yml) or on a
      # job role (`cmd: bin/jobs`). With the adapter now :bobbin those would run nothing, and production's jobs would
      # wait forever: they run Bobbin instead (BOBBIN_IN_PUMA, `bin/bobbin start`).
      def set_deploy
        path = "config/deploy.yml"
        return unless exist?(path)

        text = original = read(path)
        text = text.sub(/^([ \t]*)# Run the Solid Queue Supervisor inside the web server's Puma process to do jobs\.$/) do
          "#{::Regexp.last_match(1)}# Run Bobbin's supervisor inside the web server's Puma process to do jobs (plugin :bobbin in config/puma.rb)."
        end
        text = text.sub(/^([ \t]*)SOLID_QUEUE_IN_PUMA:/) { "#{::Regexp.last_match(1)}BOBBIN_IN_PUMA:" } unless text.match?(/^[ \t]*BOBBIN_IN_PUMA:/)
        text = text.sub(/^([ \t]*)# Set number of processes dedicated to Solid Queue \(default: 1\)\n([ \t]*)# JOB_CONCURRENCY:/) do
          "#{::Regexp.last_match(1)}# Set number of processes dedicated to Bobbin's workers (default: 1; config/bobbin.yml)\n#{::Regexp.last_match(2)}# BOBBIN_PROCESSES:"
        end
        text = text.gsub(%r{^([ \t]*#?[ \t]*cmd:[ \t]*)bin/jobs[ \t]*$}) { "#{::Regexp.last_match(1)}bin/bobbin start" }
        @deploy_changed = text != original
        write(path, text)
      end

      # A Procfile (Heroku, Render, Dokku, foreman) whose process runs Solid Queue (`worker: bin/jobs`, as Solid Queue's
      # README has it, or its rake task) ran a supervisor that claimed nothing once the adapter was :bobbin, and
      # production's jobs waited with no error anywhere (as on Kamal above): that command becomes `bin/bobbin start`.
      # Procfile.dev only where development moves to Bobbin too (--environments all). A line with more to it (options,
      # a wrapper) is left as written and named in the summary.
      def set_procfiles
        @procfile_notes = []
        (all? ? %w[Procfile Procfile.dev] : %w[Procfile]).each do |file|
          next unless exist?(file)

          lines = read(file).lines
          lines.each_with_index do |line, index|
            next unless line.match?(SOLID_QUEUE_COMMAND)

            if (process = line[SOLID_QUEUE_PROCESS, 1])
              lines[index] = "#{process}bin/bobbin start\n"
              @procfile_notes << "#{file}:#{index + 1} ran Solid Queue (#{line[process.size..].strip}): now bin/bobbin start."
            else
              @procfile_notes << "#{file}:#{index + 1} runs Solid Queue (#{line.strip[0, 80]}), which no longer gets any job: run bin/bobbin start there."
            end
          end
          write(file, lines.join)
        end
      end

      def summary
        say "\nBobbin is installed.", :green
        say <<~TEXT
          #{all? ? 'Active Job uses Bobbin in every environment (config/application.rb) but test, which keeps the test adapter.' : PRODUCTION_ONLY}
          Bobbin's tables live in #{tables_place}.
          Next#{', in production (RAILS_ENV=production)' unless all?}:
            #{next_schema_step}
            bin/bobbin start                run the workers of config/bobbin.yml (bin/bobbin doctor checks them first)
            BOBBIN_IN_PUMA=1 bin/rails server   or run them inside Puma#{bin_dev_hint}
          Recurring jobs go in config/recurring.yml.
        TEXT
        adapter_notes.each { |note| say note }
        say "Kamal (config/deploy.yml) runs Bobbin now: BOBBIN_IN_PUMA, or bin/bobbin start on a job role." if @deploy_changed
        @procfile_notes.each { |note| say note }
        say "Active Job was left out of this app (rails new --minimal): config/application.rb now requires active_job/railtie." if @active_job_enabled
        @database_notes&.each { |note| say "config/database.yml: #{note}." }
        say @migrations_note, :yellow if @migrations_note
        if @database_notes.present? || (separate? && database_url?)
          say "#{'DATABASE_URL is set here. ' if database_url?}Set QUEUE_DATABASE_URL to the #{database} database's URL wherever the primary " \
              "database's comes from a URL (DATABASE_URL): Rails merges DATABASE_URL into the primary database only (Solid Queue's " \
              "queue database has the same rule), QUEUE_DATABASE_URL into the #{database} database; without it, the #{database} " \
              "database is looked for with config/database.yml's own settings (by default on the local server), and " \
              "bin/rails db:prepare fails there."
        end
        solid_queue_tasks = exist?("config/recurring.yml") ? read("config/recurring.yml").scan(/^\s+([\w-]+):\n\s+command: "SolidQueue::/).flatten : []
        if solid_queue_tasks.any?
          say "config/recurring.yml keeps Solid Queue's #{solid_queue_tasks.join(', ')}: Bobbin runs it now; remove it when Solid Queue goes."
        end
        return unless exist?("config/environments/production.rb") && read("config/environments/production.rb").include?("config.solid_queue")

        # Nothing moves the jobs in Solid Queue's tables, and a Solid Queue left running to finish them (bin/jobs, or
        # Puma's plugin where SOLID_QUEUE_IN_PUMA is still set) enqueued every recurring task through Bobbin's adapter
        # beside Bobbin's own scheduler: each tick ran twice (a trial).
        puma = exist?("config/puma.rb") ? read("config/puma.rb").lines.index { |line| line.match?(/^\s*plugin\s+:solid_queue\b/) } : nil
        say "Solid Queue no longer runs your jobs, and the jobs already in its tables (waiting, scheduled, failed) stay there: to finish " \
            "them, keep Solid Queue running with SOLID_QUEUE_SKIP_RECURRING=true until its tables are empty (without it, its scheduler " \
            "enqueues each recurring task through Bobbin too, and every tick runs twice). Then its config.solid_queue lines, " \
            "config/queue.yml, bin/jobs#{", config/puma.rb:#{puma + 1} (plugin :solid_queue)" if puma} and gem can go."
      end

      private
        def separate? = database != "primary"

        # DATABASE_URL set where the generator runs: the app may take its primary database from it.
        def database_url? = ENV["DATABASE_URL"].to_s.strip != ""

        def database = options[:database]

        # --environments all, or an app installed with it (config/application.rb sets the adapter): a later run without
        # the option (an upgrade) keeps that install as it is.
        def all? = options[:environments] == "all" || (exist?("config/application.rb") && read("config/application.rb").include?(ADAPTER))

        def connects_to = "config.bobbin.connects_to = { database: { writing: :#{database} } }"

        # The folder of the migrations of the database Bobbin's tables are in.
        def migrations = separate? ? "db/#{database}_migrate" : "db/migrate"

        # What Bobbin's files in the app install, read once before this run writes any.
        def installed
          @installed ||= InstalledSchema.new(destination_root, migrations: migrations, schema_file: ("db/#{database}_schema.rb" if separate?))
        end

        def tables_place
          return "the primary database (a migration in db/migrate)" unless separate?
          return "the #{database} database (config.bobbin.connects_to; db/#{database}_schema.rb)" unless sql_schema?

          "the #{database} database (config.bobbin.connects_to; a migration in #{migrations}: with schema_format :sql Rails loads " \
            "db/#{database}_structure.sql, never db/#{database}_schema.rb; db:prepare or db:migrate dumps the tables into it: commit it)"
        end

        # The adapter lines replaced (file:line of Bobbin's line now, the adapter it replaced), and, production only,
        # config/application.rb's other adapter kept.
        def adapter_notes
          notes = Array(@replaced_adapters).uniq.map do |path, adapter|
            "#{path}:#{read(path).lines.index { |line| line.match?(BOBBIN_ADAPTER) } + 1} set queue_adapter = #{adapter}: replaced by :bobbin."
          end
          initializer_adapters.each do |where, adapter|
            notes << "#{where} sets queue_adapter = #{adapter}, after config/application.rb and the environments' files: Active Job " \
                     "keeps #{adapter} wherever that initializer runs, so perform_later does not reach Bobbin. Remove that line " \
                     "(initializers are left to you)."
          end
          previous = (Array(@replaced_adapters) + initializer_adapters).map(&:last)
          if previous.include?(":sidekiq")
            notes << "Jobs already in Sidekiq's Redis run only on Sidekiq: keep it running until its queues and its scheduled " \
                     "and retry sets are empty (Sidekiq's web UI, or Sidekiq::Stats)."
          end
          notes << GOOD_JOB_NOTE if previous.include?(":good_job")
          kept = !all? && exist?("config/application.rb") && read("config/application.rb").lines.index { |line| line.match?(OTHER_ADAPTER) }
          if kept
            notes << "config/application.rb:#{kept + 1} keeps queue_adapter = #{adapter_named(read('config/application.rb').lines[kept][OTHER_ADAPTER, 2])} " \
                     "for development and test (production.rb's :bobbin overrides it in production; --environments all replaces it)."
          end
          notes
        end

        # [file:line, adapter] of each initializer line setting another adapter than Bobbin's (left as it is: read only).
        def initializer_adapters
          @initializer_adapters ||= Dir["config/initializers/**/*.rb", base: destination_root].sort.flat_map do |file|
            read(file).lines.each_with_index.filter_map do |line, index|
              match = line.match(INITIALIZER_ADAPTER)
              [ "#{file}:#{index + 1}", adapter_named(match[1]) ] if match
            end
          end
        end

        def next_schema_step
          if @sql_migration && installed.version
            return "bin/rails db:migrate            create Bobbin's tables (#{migrations}: under schema_format :sql, db/#{database}_schema.rb is never loaded)"
          end
          if installed.version == Schema::VERSION
            return "bin/rails db:prepare            where the database is new (Bobbin's files are at schema version #{Schema::VERSION}: nothing to upgrade)"
          end
          return "bin/rails db:prepare            create the database and Bobbin's tables" unless installed.outdated?
          if installed.version.zero?
            return "bin/rails db:migrate            create Bobbin's tables beside those of db/#{database}_schema.rb (or bin/rails bobbin:migrate)"
          end

          from = installed.unnoted? ? "an older schema version (Bobbin's files do not note which)" : "schema version #{installed.version}"
          "bin/rails db:migrate            bring Bobbin's tables from #{from} to #{Schema::VERSION} " \
            "(#{separate? ? "in the #{database} database; " : ''}or bin/rails bobbin:migrate)"
        end

        def separate_database
          template "db/queue_schema.rb", "db/#{database}_schema.rb", skip: true unless sql_schema?
          path = "config/database.yml"
          return unless exist?(path)

          environments = (all? ? %w[development test production] : %w[production]) | environments_connected
          config = environments.reduce(DatabaseConfig.new(read(path), database_url: database_url?)) { |yml, env| yml.add_queue(env) }
          write(path, config.text)
          @database_notes = config.notes
          unpathed = config.without_migrations_paths(environments)
          return if unpathed.empty? || !(installed.version == 0 || installed.outdated? || @sql_migration)

          @migrations_note = "config/database.yml: the queue database of #{unpathed.join(', ')} names no migrations_paths: add " \
                             "`migrations_paths: #{migrations}` to it, or Rails never runs the migration in #{migrations}."
        end

        # The app's other environments that get config.bobbin.connects_to: with --environments all every one (config/application.rb
        # sets it), else those whose file loads production's (`require_relative "production"`, as a staging.rb often does).
        # Without a queue database in config/database.yml they stopped at boot ("The `queue` database is not configured for
        # the `staging` environment"; a trial).
        def environments_connected
          Dir[File.join(destination_root, "config/environments/*.rb")].sort.filter_map do |file|
            name = File.basename(file, ".rb")
            name if all? || File.read(file).match?(/^[ \t]*require(?:_relative)?\b.*["'](?:\.\/)?production(?:\.rb)?["']/)
          end
        end

        # production.rb: the adapter line `rails new` wrote (`:solid_queue`, or a commented example) says :bobbin;
        # with --environments all, only a line naming another adapter changes (it would override application.rb).
        def production_adapter
          path = "config/environments/production.rb"
          return unless exist?(path)

          text = replace_other_adapters(path, read(path))
          match = text.match(ADAPTER_LINE)
          if match.nil?
            text = text.sub(/configure do\n/) { "#{::Regexp.last_match(0)}  #{ADAPTER}\n" } unless all?
          elsif !all? && !text.match?(BOBBIN_ADAPTER) # the commented example
            text = text.sub(ADAPTER_LINE) { "#{match[1]}#{ADAPTER}" }
          end
          text = text.sub(/^([ \t]*)#{Regexp.escape(ADAPTER)}\n/) { "#{::Regexp.last_match(0)}#{::Regexp.last_match(1)}#{connects_to}\n" } if separate? && !all? && !text.include?(connects_to)
          write(path, text)
        end

        # With --environments all, a development.rb naming another adapter would override config/application.rb's.
        def development_adapter
          path = "config/environments/development.rb"
          write(path, replace_other_adapters(path, read(path))) if exist?(path)
        end

        def application_settings
          path = "config/application.rb"
          write(path, replace_other_adapters(path, read(path)))
          adapter = /^([ \t]*)#{Regexp.escape(ADAPTER)}[ \t]*\n/
          if separate? && !read(path).include?(connects_to) && read(path).match?(adapter) # the line that replaced another adapter's
            write(path, read(path).sub(adapter) { "#{::Regexp.last_match(0)}#{::Regexp.last_match(1)}#{connects_to}\n" })
          end
          settings = [ ADAPTER, (connects_to if separate?) ].compact
          missing = settings.reject { |setting| read(path).include?(setting) }
          return if missing.empty?

          inject_into_file "config/application.rb", "\n    # Jobs run on Bobbin (config/bobbin.yml).\n#{missing.map { |s| "    #{s}\n" }.join}",
                           after: /^\s*config\.load_defaults.*\n/
        end

        # A line of `path` setting another adapter (Sidekiq's, GoodJob's; a trial found it kept, Bobbin's line added
        # beside it, and whichever came last won) becomes Bobbin's, or goes where the file has Bobbin's already; each is
        # named in the summary. Returns the new text.
        def replace_other_adapters(path, text)
          lines = text.lines
          lines.each_with_index do |line, index|
            match = line.match(OTHER_ADAPTER) or next
            (@replaced_adapters ||= []) << [ path, adapter_named(match[2]) ]
            lines[index] = lines.any? { |other| other.match?(BOBBIN_ADAPTER) } ? "" : "#{match[1]}#{ADAPTER}\n"
          end
          lines.join
        end

        # `:sidekiq` for `:sidekiq`, `"good_job"` or `'resque'`; a computed value as written.
        def adapter_named(value) = value[/\A(?::(\w+)|"(\w+)"|'(\w+)')\z/] ? ":#{::Regexp.last_match.captures.compact.first}" : value

        # With --environments all, tests keep Active Job's test adapter, which Rails' job test helpers need
        # (assert_enqueued_with, perform_enqueued_jobs): they use a configured adapter when there is one, so without
        # this line config/application.rb's :bobbin would reach them. A test.rb that sets an adapter is left alone.
        def test_adapter
          path = "config/environments/test.rb"
          return unless exist?(path) && !read(path).match?(/^[ \t]*config\.active_job\.queue_adapter[ \t]*=/)

          inject_into_file path, "\n  # Rails' job test helpers need the test adapter (config/application.rb sets :bobbin); remove this line to\n" \
                                 "  # run the tests against Bobbin.\n  config.active_job.queue_adapter = :test\n",
                           after: /configure do\n(?:[ \t]*# Settings specified here.*\n)?/
        end

        # Writes `text` to `path` unless it is already there (a second run changes nothing).
        def write(path, text)
          create_file(path, text, force: true) unless text == read(path)
        end

        def fibers? = read("config/bobbin.yml").match?(/^\s*-?\s*fibers:/)

        # config.active_record.schema_format = :sql in config/application.rb or an environment's file.
        def sql_schema?
          @sql_schema = [ "config/application.rb", *Dir["config/environments/*.rb", base: destination_root] ]
                        .any? { |file| exist?(file) && read(file).match?(SQL_SCHEMA) } if @sql_schema.nil?
          @sql_schema
        end

        # Under :sql, Rails ignores db/queue_schema.rb (it loads db/queue_structure.sql) and db:prepare created no tables
        # (a trial): the queue database's tables come from a migration in its migrations path, which db:prepare runs on a
        # new database and dumps into db/queue_structure.sql. Any of Bobbin's migrations there runs Schema.up.
        def sql_migration_needed?
          separate? && sql_schema? && Dir[File.join(destination_root, migrations, "*_{create,upgrade}_bobbin_tables*.rb")].empty?
        end

        def read(path) = File.read(File.join(destination_root, path))

        def exist?(path) = File.exist?(File.join(destination_root, path))

        # How bin/dev runs the workers too: a Procfile.dev entry where bin/dev runs foreman on it (jsbundling,
        # cssbundling); where it runs `rails server` itself (importmap, rails new's default) a Procfile.dev is never read.
        def bin_dev_hint
          return "" unless all? && exist?("bin/dev")

          return "; with bin/dev: BOBBIN_IN_PUMA=1 bin/dev" unless exist?("Procfile.dev")

          read("Procfile.dev").match?(PROCFILE_BOBBIN) ? "; bin/dev runs them (Procfile.dev)" : "; with bin/dev, add `jobs: bin/bobbin start` to Procfile.dev"
        end
    end
  end
end
