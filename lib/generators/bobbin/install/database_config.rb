# frozen_string_literal: true

require "yaml"

module Bobbin
  module Generators
    # Adds a `queue` database to config/database.yml for an environment, as `rails new` lays out its own (primary,
    # cache, queue): a flat environment becomes `primary:` plus `queue:`; the queue entry copies the primary's
    # settings with its own database and migrations path. Edits the text, so the file's comments and ERB stay.
    class DatabaseConfig
      def initialize(text)
        @text = text
        @notes = []
      end

      attr_reader :text

      # What the user should know about the entries added (an environment whose queue database reads a URL).
      attr_reader :notes

      # True when `env` already has a queue database (or is not in the file).
      def queue?(env)
        section = structure[env]
        !section.is_a?(Hash) || section["queue"].is_a?(Hash)
      end

      # Adds the queue database to `env`; returns self.
      def add_queue(env)
        return self if queue?(env)

        lines = @text.lines
        start = lines.index { |line| line.match?(/\A#{Regexp.escape(env)}:\s*(#.*)?\z/) } or return self
        finish = (start + 1...lines.size).find { |i| lines[i].match?(/\A\S/) } || lines.size
        finish -= 1 while finish > start + 1 && lines[finish - 1].strip.empty?
        block = lines[start + 1...finish]
        nested = structure[env].values.all? { |value| value.is_a?(Hash) }
        primary = nested ? primary_lines(block) : block
        block = [ "  primary:\n", *block.map { |line| line.strip.empty? ? line : "  #{line}" } ] unless nested
        @text = [ *lines[0..start], *block, *queue_lines(primary, env), *lines[finish..] ].join
        @structure = nil
        self
      end

      private
        def structure
          @structure ||= YAML.safe_load(@text.gsub(/<%=?.*?%>/m, "erb"), aliases: true) || {}
        end

        # The lines of the `primary:` entry of a nested environment.
        def primary_lines(block)
          start = block.index { |line| line.match?(/\A  primary:/) } or return []
          block[start + 1..].take_while { |line| line.start_with?("    ") || line.strip.empty? }.map { |line| line.delete_prefix("  ") }
        end

        # The primary's settings but its database, URL and migrations. A primary named by a URL (`url:`, or no
        # database name: DATABASE_URL) gets a queue read from QUEUE_DATABASE_URL: copied, the primary's URL would win
        # over the queue's name and put the queue in the primary.
        def queue_lines(primary, env)
          settings = primary.reject { |line| line.strip.empty? || line.match?(/\A\s*(database|migrations_paths|url):/) }
          settings = settings.map { |line| line.sub(/<<: \*primary_(\w+)/, "<<: *default") }
          named = primary.find { |line| line.match?(/\A\s*database:/) }
          sqlite = sqlite?(env)
          database = named ? queue_database(named) : "database: #{sqlite ? "storage/#{env}_queue.sqlite3" : "#{env}_queue"}\n"
          url = !sqlite && (named.nil? || primary.any? { |line| line.match?(/\A\s*url:/) })
          @notes << "#{env}'s queue database reads QUEUE_DATABASE_URL (its primary is named by a URL); set it" if url
          [ "  queue:\n", *settings.map { |line| "  #{line}" }, *("    url: <%= ENV[\"QUEUE_DATABASE_URL\"] %>\n" if url),
            "    #{database}", "    migrations_paths: db/queue_migrate\n" ]
        end

        # True when `env`'s primary database is SQLite.
        def sqlite?(env)
          section = structure[env]
          config = section.values.all? { |value| value.is_a?(Hash) } ? section["primary"] : section
          config.is_a?(Hash) && config["adapter"].to_s.include?("sqlite")
        end

        # `database: storage/development.sqlite3` → `database: storage/development_queue.sqlite3`; `app_dev` → `app_dev_queue`.
        def queue_database(line)
          line.strip.sub(/\A(database:\s*)(\S+?)(\.sqlite3)?\z/) { "#{::Regexp.last_match(1)}#{::Regexp.last_match(2)}_queue#{::Regexp.last_match(3)}" } + "\n"
        end
    end
  end
end
