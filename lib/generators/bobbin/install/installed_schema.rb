# frozen_string_literal: true

module Bobbin
  module Generators
    # The Bobbin schema version an app's files bring its tables to, read from the files the install generator
    # writes, so a run after a gem upgrade knows to add an upgrade migration and a second run knows not to:
    #
    #   db/migrate/…_create_bobbin_tables.rb        "Bobbin schema version N" in its comment; 1 without (written
    #                                                before the generator noted versions: assume the oldest)
    #   <migrations>/…_upgrade_bobbin_tables_to_N.rb N
    #   db/queue_schema.rb                           the template: as the create migration; a schema dump: the
    #                                                default of bobbin_schema.version (which Schema.up sets), 1 for
    #                                                Bobbin's tables without it, 0 without Bobbin's tables at all
    #                                                (another gem's schema, e.g. Solid Queue's)
    #
    # The files, not the database: the generator runs where the production database is out of reach. An app whose
    # files say older than its database holds gets a migration that finds nothing to do, which is harmless.
    class InstalledSchema
      MARKER = /Bobbin schema version (\d+)/
      UPGRADE = /_upgrade_bobbin_tables_to_(\d+)\.rb\z/

      # `schema_file` (db/queue_schema.rb for a separate database, else nil) and `migrations` (the folder of that
      # database's migrations), relative to the app's `root`.
      def initialize(root, migrations:, schema_file: nil)
        @root = root
        @migrations = migrations
        @schema_file = schema_file
      end

      # The newest version any of Bobbin's files installs; nil when the app has none of them (a new install). Read
      # once: what the generator then writes does not change the answer for the rest of its run.
      def version
        return @version if defined?(@version)

        @version = [ schema_file_version, *migration_versions ].compact.max
      end

      # True when the version is the oldest only for want of a note: a create migration or db/queue_schema.rb written
      # before the generator noted versions (up to version 8's), so the tables may be at any older version.
      def unnoted? = version == 1 && @unnoted

      # True when the app has Bobbin's files but they install an older schema than this Bobbin needs.
      def outdated?(current = Schema::VERSION) = !version.nil? && version < current

      # The migration that brings the tables to `version` (the name a run of the generator gives it).
      def self.upgrade_migration(version) = "upgrade_bobbin_tables_to_#{Integer(version)}"

      private
        def migration_versions
          Dir[File.join(@root, @migrations, "*.rb")].filter_map do |path|
            if path.end_with?("_create_bobbin_tables.rb") then noted_version(File.read(path))
            elsif (match = path.match(UPGRADE)) then match[1].to_i
            end
          end
        end

        def schema_file_version
          path = @schema_file && File.join(@root, @schema_file)
          return unless path && File.exist?(path)

          text = File.read(path)
          return noted_version(text) if text.include?("Bobbin::Schema.up")

          dumped = text[/create_table "bobbin_schema"[^\n]*\n\s*t\.integer "version", default: (\d+)/, 1]
          return dumped.to_i if dumped

          text.include?('create_table "bobbin_jobs"') ? 1 : 0
        end

        def noted_version(text)
          return text[MARKER, 1].to_i if text.match?(MARKER)

          @unnoted = true
          1
        end
    end
  end
end
