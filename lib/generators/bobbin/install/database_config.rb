# frozen_string_literal: true

require "yaml"

module Bobbin
  module Generators
    # Adds a `queue` database to config/database.yml for an environment, as `rails new` lays out its own (primary,
    # cache, queue): a flat environment becomes `primary:` plus `queue:`; the queue entry copies the primary's
    # settings with its own database and migrations path. Edits the text, so the file's comments and ERB stay.
    # `database_url`: DATABASE_URL is set where the generator runs, so the app may take its primary from it.
    class DatabaseConfig
      def initialize(text, database_url: false)
        @text = text
        @database_url = database_url
        @url_queues = {}
      end

      attr_reader :text

      # What the user should know about the entries added: the queues that read QUEUE_DATABASE_URL, and why.
      def notes
        return [] if @url_queues.empty?

        reasons = @url_queues.group_by(&:last).map do |reason, pairs|
          reason == :url ? "the primary of #{sentence(pairs.map(&:first))} is named by a URL" : "DATABASE_URL is set here"
        end
        [ "the queue database of #{sentence(@url_queues.keys)} reads QUEUE_DATABASE_URL (#{reasons.join('; ')})" ]
      end

      # The environments among `envs` whose queue database names no migrations_paths: Rails then runs db/migrate's
      # migrations there, and never those of db/queue_migrate.
      def without_migrations_paths(envs)
        envs.select { |env| structure[env].is_a?(Hash) && structure[env]["queue"].is_a?(Hash) && !structure[env]["queue"].key?("migrations_paths") }
      end

      # True when `env` already has a queue database (or is not in the file).
      def queue?(env)
        section = structure[env]
        !section.is_a?(Hash) || section["queue"].is_a?(Hash)
      end

      # Adds the queue database to `env`; returns self.
      def add_queue(env)
        return self if queue?(env)

        lines = @text.lines
        # `development: &development` (which test may merge) and `production: # a comment` are found too: skipped, the
        # environment got no queue database and the app stopped at boot ("The `queue` database is not configured").
        start = lines.index { |line| line.match?(/\A#{Regexp.escape(env)}:[ \t]*(&[^\s#]+)?[ \t]*(#.*)?\n?\z/) } or return self
        finish = (start + 1...lines.size).find { |i| lines[i].match?(/\A\S/) } || lines.size
        finish -= 1 while finish > start + 1 && lines[finish - 1].strip.empty?
        block = lines[start + 1...finish]
        nested = structure[env].values.all? { |value| value.is_a?(Hash) }
        primary = nested ? primary_lines(block, primary_name(env)) : block
        unless nested
          # A flat environment's anchor goes to its primary, as `rails new` anchors `primary: &primary_production`:
          # `<<: *development` elsewhere still merges the settings it did, not the primary and queue entries.
          anchor = lines[start][/&[^\s#]+/]
          lines[start] = lines[start].sub(/[ \t]*&[^\s#]+/, "") if anchor
          block = [ "  primary:#{" #{anchor}" if anchor}\n", *block.map { |line| line.strip.empty? ? line : "  #{line}" } ]
        end
        @text = [ *lines[0..start], *block, *queue_lines(primary, env), *lines[finish..] ].join
        @structure = nil
        self
      end

      private
        # The file's YAML, its ERB output tags read as "erb" and its lines of ERB code (`<% if ENV["DB_HOST"] %>`) left
        # out: read as "erb" too, they made YAML the generator could not parse, and it stopped half-way with a backtrace.
        def structure
          @structure ||= YAML.safe_load(@text.gsub(/^[ \t]*<%(?!=).*?%>[ \t]*\n/m, "").gsub(/<%=?.*?%>/m, "erb"), aliases: true) || {}
        end

        # The name of a nested environment's primary database, as Rails picks it: the entry named primary, else the first
        # (`main:`, `app:`). Only `primary:` was looked for, and the queue entry of an app whose first was named otherwise
        # got no adapter (the app stopped at boot: "database configuration does not specify adapter") and a database
        # named after the environment, with a note that its primary was named by a URL (a trial).
        def primary_name(env)
          section = structure[env]
          section.key?("primary") ? "primary" : section.keys.first.to_s
        end

        # The lines of the entry `name` (the primary) of a nested environment.
        def primary_lines(block, name)
          start = block.index { |line| line.match?(/\A  #{Regexp.escape(name)}:/) } or return []
          block[start + 1..].take_while { |line| line.start_with?("    ") || line.strip.empty? }.map { |line| line.delete_prefix("  ") }
        end

        # The primary's settings but its database, URL and migrations. A primary named by a URL (`url:`, or no
        # database name: DATABASE_URL) gets a queue read from QUEUE_DATABASE_URL: copied, the primary's URL would win
        # over the queue's name and put the queue in the primary. So does any primary (but SQLite's) when DATABASE_URL
        # is set here: Rails merges it into the primary only, and the copied settings (no host) would send the queue
        # to the local server. QUEUE_DATABASE_URL unset, the `url:` line is empty (YAML null) and the settings apply.
        def queue_lines(primary, env)
          settings = primary.reject { |line| line.strip.empty? || line.match?(/\A\s*(database|migrations_paths|url):/) }
          settings = settings.map { |line| line.sub(/<<: \*primary_(\w+)/, "<<: *default") }
          named = primary.find { |line| line.match?(/\A\s*database:/) }
          sqlite = sqlite?(env)
          database = named ? queue_database(named) : "database: #{sqlite ? "storage/#{env}_queue.sqlite3" : "#{env}_queue"}\n"
          by_url = named.nil? || primary.any? { |line| line.match?(/\A\s*url:/) }
          url = !sqlite && (by_url || @database_url)
          @url_queues[env] = by_url ? :url : :database_url if url
          [ "  queue:\n", *settings.map { |line| "  #{line}" }, *("    url: <%= ENV[\"QUEUE_DATABASE_URL\"] %>\n" if url),
            "    #{database}", "    migrations_paths: db/queue_migrate\n" ]
        end

        def sentence(words) = words.size > 1 ? "#{words[0..-2].join(', ')} and #{words.last}" : words.first.to_s

        # True when `env`'s primary database is SQLite.
        def sqlite?(env)
          section = structure[env]
          config = section.values.all? { |value| value.is_a?(Hash) } ? section[primary_name(env)] : section
          config.is_a?(Hash) && config["adapter"].to_s.include?("sqlite")
        end

        # `database: storage/development.sqlite3` → `database: storage/development_queue.sqlite3`; `app_dev` → `app_dev_queue`.
        def queue_database(line)
          line.strip.sub(/\A(database:\s*)(\S+?)(\.sqlite3)?\z/) { "#{::Regexp.last_match(1)}#{::Regexp.last_match(2)}_queue#{::Regexp.last_match(3)}" } + "\n"
        end
    end
  end
end
