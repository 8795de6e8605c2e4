# frozen_string_literal: true

require "test_helper"
require_relative "generated_app"

# A Rails 8 app coming from another job system, as trial users' were: config/application.rb sets Sidekiq's adapter and
# `schema_format = :sql` (db/*_structure.sql). The generator (--environments all) replaces the adapter line and gives the
# queue database a migration, so db:prepare creates Bobbin's tables and dumps them into db/queue_structure.sql.
class RailsInstallMigratingTest < Bobbin::TestCase
  # `rails new`, its config/application.rb set as such an app's, then the generator twice and db:prepare.
  class MigratingApp < GeneratedApp
    def install
      rails_new
      application = read("config/application.rb").sub(/^([ \t]*)config\.load_defaults.*\n/) do
        "#{::Regexp.last_match(0)}#{::Regexp.last_match(1)}config.active_job.queue_adapter = :sidekiq\n" \
          "#{::Regexp.last_match(1)}config.active_record.schema_format = :sql\n"
      end
      File.write(path("config/application.rb"), application)
      @outputs[:install] = run!("bin/rails", "generate", "bobbin:install", "--environments", "all")
      @snapshots[:installed] = snapshot
      @outputs[:again] = run!("bin/rails", "generate", "bobbin:install", "--environments", "all")
      @snapshots[:again] = snapshot
      @outputs[:prepare] = run!("bin/rails", "db:prepare")
    end
  end

  def app = self.class.app

  def self.app = @app ||= MigratingApp.new.tap(&:install)

  # What the queue database holds, seen by the app: Bobbin's tables and their schema version.
  def queue_tables
    app.run!("bin/rails", "runner", <<~RUBY).lines.last
      connection = Bobbin::JobRecord.connection
      print "jobs=\#{connection.table_exists?(:bobbin_jobs)} version=\#{Bobbin::Schema.version(connection)} db=\#{Bobbin::JobRecord.connection_db_config.name}"
    RUBY
  end

  test "the app's Sidekiq line becomes Bobbin's, and the summary names it", long: true do
    adapters = app.read("config/application.rb").lines.grep(/^\s*config\.active_job\.queue_adapter/).map(&:strip)
    assert_equal [ "config.active_job.queue_adapter = :bobbin" ], adapters
    line = app.read("config/application.rb").lines.index { |text| text.include?("queue_adapter = :bobbin") } + 1
    assert_match(/^config\/application.rb:#{line} set queue_adapter = :sidekiq: replaced by :bobbin\.$/, app.outputs[:install])
    assert_match(/^Jobs already in Sidekiq's Redis run only on Sidekiq/, app.outputs[:install])
    assert_equal app.snapshots[:installed], app.snapshots[:again], "a second run changes nothing"
    assert_no_match(/replaced by/, app.outputs[:again])
  end

  test "schema_format :sql: db:prepare creates Bobbin's tables and dumps them into db/queue_structure.sql; again from scratch too", long: true do
    assert_equal "jobs=true version=#{Bobbin::Schema::VERSION} db=queue", queue_tables
    assert_equal 1, Dir[app.path("db/queue_migrate/*_create_bobbin_tables.rb")].size
    assert_not File.exist?(app.path("db/queue_schema.rb"))
    assert_match(/CREATE TABLE (IF NOT EXISTS )?"?(public\.)?"?bobbin_jobs"?/, app.read("db/queue_structure.sql"))

    # A fresh clone's databases: db:prepare loads db/queue_structure.sql.
    app.run!("bin/rails", "db:drop", "db:create", "db:prepare", env: { "DISABLE_DATABASE_ENVIRONMENT_CHECK" => "1" })
    assert_equal "jobs=true version=#{Bobbin::Schema::VERSION} db=queue", queue_tables
    assert_match(/"?bobbin_schema"?/, app.read("db/queue_structure.sql"))
  end
end
