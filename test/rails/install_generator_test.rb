# frozen_string_literal: true

require "test_helper"
require "erb"
require "rails/generators"
require_relative "../support/version_one_schema"
require_relative "../../lib/generators/bobbin/install/install_generator"

# The install generator run in this process on a bare app skeleton (config/application.rb): what it writes for a
# new install, for an install whose files are at an older schema version, and that a second run writes nothing.
# The generated Rails app (install_test.rb) runs the same generator and migrations for real.
class InstallGeneratorTest < Bobbin::TestCase
  VERSION = Bobbin::Schema::VERSION

  setup do
    @database_url = ENV.delete("DATABASE_URL") # the generator reads it: each test sets it or not
    @app = Dir.mktmpdir("bobbin-generator")
    write("config/application.rb", "module App\n  class Application < Rails::Application\n    config.load_defaults 8.1\n  end\nend\n")
  end

  teardown do
    FileUtils.rm_rf(@app)
    @database_url ? ENV["DATABASE_URL"] = @database_url : ENV.delete("DATABASE_URL")
  end

  # Runs the block with `env` set in ENV (nil: unset), then puts ENV back.
  def with_env(env)
    saved = ENV.to_h.slice(*env.keys)
    env.each { |key, value| value.nil? ? ENV.delete(key) : ENV[key] = value }
    yield
  ensure
    env.each_key { |key| saved.key?(key) ? ENV[key] = saved[key] : ENV.delete(key) }
  end

  def write(file, text) = FileUtils.mkdir_p(File.dirname(path(file))).then { File.write(path(file), text) }

  def path(file) = File.join(@app, file)

  # Runs `bin/rails generate bobbin:install ARGS`; returns what it printed.
  def generate(*args)
    capture_io { Bobbin::Generators::InstallGenerator.start(args, destination_root: @app) }.first
  end

  def files(pattern) = Dir.glob(pattern, base: @app).sort

  def upgrades(folder) = files("#{folder}/*_upgrade_bobbin_tables_to_*.rb")

  test "primary database: a new install gets the create migration, noting the version; a second run adds nothing" do
    output = generate("--database", "primary")
    assert_equal 1, files("db/migrate/*_create_bobbin_tables.rb").size
    assert_includes File.read(path(files("db/migrate/*.rb").first)), "Bobbin schema version #{VERSION}."
    assert_match(/bin\/rails db:prepare/, output)

    output = generate("--database", "primary")
    assert_equal 1, files("db/migrate/*.rb").size, "nothing new"
    assert_match(/identical\s+Bobbin's schema \(version #{VERSION}, db\/migrate\)/, output)
    assert_match(/bin\/rails db:prepare\s+where the database is new \(Bobbin's files are at schema version #{VERSION}: nothing to upgrade\)/, output)
  end

  test "primary database: an install from before versions gets one upgrade migration that runs Schema.up; again, nothing new" do
    write("db/migrate/20250101000000_create_bobbin_tables.rb", VersionOneSchema::RAILS_MIGRATION)
    output = generate("--database", "primary")
    upgrade = upgrades("db/migrate")
    assert_equal [ "upgrade_bobbin_tables_to_#{VERSION}.rb" ], upgrade.map { |f| File.basename(f).sub(/\A\d+_/, "") }
    text = File.read(path(upgrade.first))
    assert_match(/class UpgradeBobbinTablesTo#{VERSION} < ActiveRecord::Migration\[\d\.\d\]\n  disable_ddl_transaction!\n\n  def up = Bobbin::Schema.up\(connection\)/, text)
    assert_match(/bin\/rails db:migrate\s+bring Bobbin's tables from an older schema version \(Bobbin's files do not note which\) to #{VERSION}/, output)

    generate("--database", "primary")
    assert_equal upgrade, upgrades("db/migrate"), "a second run adds nothing"
  end

  test "primary database: an upgrade migration of an older version is followed by one to this version" do
    write("db/migrate/20250101000000_create_bobbin_tables.rb", VersionOneSchema::RAILS_MIGRATION.sub("# Bobbin's tables", "# Bobbin schema version 2. Bobbin's tables"))
    write("db/migrate/20250601000000_upgrade_bobbin_tables_to_5.rb", "class UpgradeBobbinTablesTo5; end\n")
    generate("--database", "primary")
    assert_equal [ "5", VERSION.to_s ], upgrades("db/migrate").map { |f| f[/to_(\d+)\.rb/, 1] }
  end

  test "queue database: a new install gets db/queue_schema.rb, noting the version; a second run adds nothing" do
    generate
    assert_includes File.read(path("db/queue_schema.rb")), "Bobbin schema version #{VERSION},"
    generate
    assert_equal [], files("db/queue_migrate/*")
  end

  test "queue database: an old queue_schema.rb, or a dump of old tables, gets an upgrade migration in db/queue_migrate; again, nothing new" do
    write("db/queue_schema.rb", VersionOneSchema::QUEUE_SCHEMA_FILE)
    output = generate
    assert_equal 1, upgrades("db/queue_migrate").size
    assert_match(/in the queue database/, output)
    generate
    assert_equal 1, upgrades("db/queue_migrate").size, "a second run adds nothing"
    assert_equal VersionOneSchema::QUEUE_SCHEMA_FILE, File.read(path("db/queue_schema.rb")), "the schema file is the app's: left as it is"
  end

  test "queue database: a schema dump is read by its bobbin_schema version default" do
    dump = ->(version) { %(ActiveRecord::Schema[8.1].define(version: 2025_01_01_000000) do\n  create_table "bobbin_jobs", force: :cascade do |t|\n  end\n\n) + (version ? %(  create_table "bobbin_schema", id: false, force: :cascade do |t|\n    t.integer "version", default: #{version}, null: false\n  end\n) : "") + "end\n" }
    { VERSION => [], 7 => [ VERSION ], nil => [ VERSION ] }.each do |dumped, expected|
      FileUtils.rm_rf(path("db"))
      write("db/queue_schema.rb", dump.call(dumped))
      generate
      assert_equal expected, upgrades("db/queue_migrate").map { |f| f[/to_(\d+)\.rb/, 1].to_i }, "dumped at #{dumped.inspect}"
    end
  end

  test "queue database: another gem's queue_schema.rb (Solid Queue's) gets the create migration in db/queue_migrate; again, nothing" do
    write("db/queue_schema.rb", %(ActiveRecord::Schema[7.1].define(version: 1) do\n  create_table "solid_queue_jobs", force: :cascade do |t|\n  end\nend\n))
    write("config/recurring.yml", <<~YAML) # as `rails new` writes it (Solid Queue's installer)
      production:
        clear_solid_queue_finished_jobs:
          command: "SolidQueue::Job.clear_finished_in_batches(sleep_between_batches: 0.3)"
          schedule: every hour at minute 12
    YAML
    output = generate
    created = files("db/queue_migrate/*_create_bobbin_tables.rb")
    assert_equal 1, created.size, "a migration that creates the tables, named so"
    assert_empty upgrades("db/queue_migrate")
    assert_includes File.read(path(created.first)), "Bobbin schema version #{VERSION}"
    assert_match(/bin\/rails db:migrate\s+create Bobbin's tables beside those of db\/queue_schema.rb/, output)
    assert_match(/config\/recurring.yml keeps Solid Queue's clear_solid_queue_finished_jobs: Bobbin runs it now/, output)
    snapshot = files("**/*")
    generate
    assert_equal snapshot, files("**/*"), "a second run adds no migration"
  end

  # Jobs waiting in Solid Queue's tables at the switch were never mentioned (they stayed there, scheduled ones too), and a
  # Solid Queue kept running to finish them (Puma's plugin line, left in config/puma.rb, or bin/jobs) enqueued every
  # recurring task through Bobbin's adapter beside Bobbin's own scheduler: each tick ran twice (a trial).
  test "an app Solid Queue ran is told its waiting jobs stay in Solid Queue's tables, how to finish them without ticks run twice, and the puma.rb line" do
    write("config/environments/production.rb", "Rails.application.configure do\n  config.active_job.queue_adapter = :solid_queue\n" \
                                               "  config.solid_queue.connects_to = { database: { writing: :queue } }\nend\n")
    write("config/puma.rb", "port ENV.fetch(\"PORT\", 3000)\nplugin :tmp_restart\nplugin :solid_queue if ENV[\"SOLID_QUEUE_IN_PUMA\"]\n")
    output = generate
    assert_match(/Solid Queue no longer runs your jobs, and the jobs already in its tables \(waiting, scheduled, failed\) stay there/, output)
    assert_match(/keep Solid Queue running with SOLID_QUEUE_SKIP_RECURRING=true until its tables are empty/, output)
    assert_match(%r{config/queue.yml, bin/jobs, config/puma.rb:3 \(plugin :solid_queue\) and gem can go}, output)
  end

  # The upgrade path says to run the generator again; run without the option, it once set up production alone on top.
  # `rails new --minimal` comments Active Job's require out; the adapter line the generator writes then stopped the app
  # at boot (a trial).
  test "an app that left Active Job out (rails new --minimal) gets it back, and is told; a second run changes nothing" do
    write("config/application.rb", "require \"active_record/railtie\"\n# require \"active_job/railtie\"\n" + File.read(path("config/application.rb")))
    write("config/environments/production.rb", "Rails.application.configure do\nend\n")
    output = generate
    assert_match(/^require "active_job\/railtie"$/, File.read(path("config/application.rb")))
    assert_includes File.read(path("config/environments/production.rb")), "config.active_job.queue_adapter = :bobbin"
    assert_match(/Active Job was left out of this app \(rails new --minimal\): config\/application.rb now requires active_job\/railtie/, output)
    assert_no_match(/Active Job was left out/, generate)
  end

  # rails new --skip-active-record: the install wrote connects_to and its files, said "installed", and the app no longer
  # booted ("The `queue` database is not configured").
  test "an app that left Active Record out (rails new --skip-active-record) is refused, saying what it needs, and nothing is written" do
    application = "require \"rails\"\n# require \"active_record/railtie\"\nrequire \"active_job/railtie\"\n" + File.read(path("config/application.rb"))
    write("config/application.rb", application)
    write("config/environments/production.rb", "Rails.application.configure do\nend\n")
    before = files("**/*")
    out, err = capture_io { Bobbin::Generators::InstallGenerator.start([ "--environments", "all" ], destination_root: @app) }
    assert_match(/Bobbin keeps its jobs in a database through Active Record, which this app leaves out/, err)
    assert_match(/Nothing was changed/, err)
    assert_no_match(/Bobbin is installed/, out)
    assert_equal before, files("**/*"), "no file added"
    assert_equal application, File.read(path("config/application.rb"))
    assert_equal "Rails.application.configure do\nend\n", File.read(path("config/environments/production.rb"))

    write("config/application.rb", application.sub("require \"rails\"\n", "require \"rails\"\nrequire \"active_record/railtie\"\n"))
    assert_match(/Bobbin is installed/, generate, "with Active Record required (its commented line left) it installs")
  end

  # `--database jobs` wrote connects_to { writing: :jobs } and db/jobs_schema.rb beside a `queue:` entry in
  # config/database.yml: the app then stopped at boot ("The `jobs` database is not configured").
  test "config/puma.rb that loads the plugin already, in its own words, gets no second plugin line" do
    [ "plugin :bobbin\n", "plugin(:bobbin) if ENV.fetch(\"BOBBIN_IN_PUMA\", false)\n", "  plugin \"bobbin\"\n" ].each do |own|
      write("config/puma.rb", "port 3000\n#{own}")
      generate
      assert_equal "port 3000\n#{own}", File.read(path("config/puma.rb")), own
    end
    write("config/puma.rb", "port 3000\n# plugin :bobbin\n")
    generate
    assert_includes File.read(path("config/puma.rb")), "\nplugin :bobbin if ENV[\"BOBBIN_IN_PUMA\"]\n", "a commented-out line does not count"
  end

  test "a --database other than queue or primary is refused, and nothing is written" do
    write("config/database.yml", RAILS_NEW_POSTGRESQL)
    before = files("**/*")
    out, err = capture_io { Bobbin::Generators::InstallGenerator.start(%w[--database jobs --environments all], destination_root: @app) }
    assert_match(/Expected '--database' to be one of queue, primary; got jobs/, out + err)
    assert_equal before, files("**/*"), "no file added"
    assert_equal RAILS_NEW_POSTGRESQL, File.read(path("config/database.yml"))
    assert_not_includes File.read(path("config/application.rb")), "bobbin"
  end

  test "an install with --environments all, run again without it, stays as it is" do
    write("config/environments/production.rb", "Rails.application.configure do\n  config.active_job.queue_adapter = :solid_queue\nend\n")
    generate("--environments", "all")
    snapshot = files("**/*").to_h { |file| [ file, File.file?(path(file)) && File.read(path(file)) ] }
    output = generate
    assert_equal snapshot, files("**/*").to_h { |file| [ file, File.file?(path(file)) && File.read(path(file)) ] }
    assert_match(/Active Job uses Bobbin in every environment/, output)
    refute_match(/Development keeps its adapter/, output)
  end

  # rails new's default app (importmap) has a bin/dev that runs `rails server` and no Procfile.dev: told to add
  # `jobs: bin/bobbin start` to a Procfile.dev, a user wrote one that nothing reads, and no job ran.
  test "with --environments all, the summary says how bin/dev runs the workers: Procfile.dev where bin/dev reads one, else BOBBIN_IN_PUMA" do
    write("bin/dev", "#!/usr/bin/env ruby\nexec \"./bin/rails\", \"server\", *ARGV\n")
    output = generate("--environments", "all")
    assert_match(/with bin\/dev: BOBBIN_IN_PUMA=1 bin\/dev/, output)
    refute_match(/Procfile\.dev/, output)

    write("Procfile.dev", "web: bin/rails server\njs: yarn build --watch\n")
    assert_match(/with bin\/dev, add `jobs: bin\/bobbin start` to Procfile\.dev/, generate("--environments", "all"))
  end

  # A production SQLite database left unnamed (rails new --skip-solid comments it out), or named by a URL.
  def queue_entry(yaml, env: {})
    write("config/database.yml", yaml)
    output = generate
    saved = ENV.to_h.slice(*env.keys)
    env.each { |key, value| ENV[key] = value }
    entry = YAML.safe_load(ERB.new(File.read(path("config/database.yml"))).result, aliases: true).dig("production", "queue")
    [ entry, output ]
  ensure
    env&.each_key { |key| saved&.key?(key) ? ENV[key] = saved[key] : ENV.delete(key) }
  end

  test "queue database for a production SQLite database left unnamed: a file in storage/, beside the others" do
    entry, = queue_entry(<<~YAML)
      default: &default
        adapter: sqlite3
        pool: 5

      production:
        <<: *default
        # database: path/to/persistent/storage/production.sqlite3
    YAML
    assert_equal "storage/production_queue.sqlite3", entry["database"]
    assert_nil entry["url"]
  end

  test "queue database for a production database named by a URL: its own URL (QUEUE_DATABASE_URL), never the primary's" do
    entry, output = queue_entry(<<~YAML, env: { "DATABASE_URL" => "postgres://db.internal/app_production", "QUEUE_DATABASE_URL" => "postgres://db.internal/app_queue" })
      default: &default
        adapter: postgresql

      production:
        <<: *default
        url: <%= ENV["DATABASE_URL"] %>
    YAML
    assert_equal "postgres://db.internal/app_queue", entry["url"]
    assert_equal "production_queue", entry["database"]
    assert_match(/config\/database.yml: the queue database of production reads QUEUE_DATABASE_URL \(the primary of production is named by a URL\)/, output)
    assert_match(/^Set QUEUE_DATABASE_URL to the queue database's URL wherever the primary database's comes from a URL \(DATABASE_URL\)/, output)
  end

  # `rails new -d postgresql` names each primary database and leaves the server to DATABASE_URL, which Rails merges
  # into the primary only: a queue entry copying the primary's settings went to the local server, and db:prepare failed.
  RAILS_NEW_POSTGRESQL = <<~YAML
    default: &default
      adapter: postgresql
      encoding: unicode
      max_connections: <%= ENV.fetch("RAILS_MAX_THREADS") { 5 } %>

    development:
      <<: *default
      database: shop_development

    test:
      <<: *default
      database: shop_test

    production:
      primary: &primary_production
        <<: *default
        database: shop_production
        username: shop
        password: <%= ENV["SHOP_DATABASE_PASSWORD"] %>
      queue:
        <<: *primary_production
        database: shop_production_queue
        migrations_paths: db/queue_migrate
  YAML

  # An environment line with an anchor or a comment was not found: that environment got no queue database, silently,
  # and the app stopped at boot ("The `queue` database is not configured for the `development` environment").
  test "queue database for environments written `development: &development` or `production: # …`: each gets one; test's merge still works" do
    write("config/database.yml", <<~YAML)
      default: &default
        adapter: postgresql
        encoding: unicode

      development: &development
        <<: *default
        database: shop_development

      test:
        <<: *development
        database: shop_test

      production: # the server's
        <<: *default
        database: shop_production
    YAML
    generate("--environments", "all")
    config = YAML.safe_load(File.read(path("config/database.yml")), aliases: true)
    %w[development test production].each do |env|
      assert_equal({ "adapter" => "postgresql", "encoding" => "unicode", "database" => "shop_#{env}" }, config.dig(env, "primary"), env)
      assert_equal({ "adapter" => "postgresql", "encoding" => "unicode", "database" => "shop_#{env}_queue", "migrations_paths" => "db/queue_migrate" },
                   config.dig(env, "queue"), env)
    end
    text = File.read(path("config/database.yml"))
    generate("--environments", "all")
    assert_equal text, File.read(path("config/database.yml")), "a second run changes nothing"
  end

  # Rails' primary is the entry named primary, else the first: an app whose first was `main:` got a queue entry with no
  # adapter and a database named `production_queue` (it stopped at boot: "database configuration does not specify adapter").
  test "queue database for an environment whose primary is not named primary (its first entry, as Rails picks it): copied from it" do
    write("config/database.yml", <<~YAML)
      default: &default
        adapter: postgresql
        encoding: unicode

      production:
        main:
          <<: *default
          database: shop_production
          username: shop
        main_replica:
          <<: *default
          database: shop_production
          username: shop_readonly
          replica: true
    YAML
    output = generate
    config = YAML.safe_load(File.read(path("config/database.yml")), aliases: true)
    assert_equal({ "adapter" => "postgresql", "encoding" => "unicode", "database" => "shop_production_queue", "username" => "shop",
                   "migrations_paths" => "db/queue_migrate" }, config.dig("production", "queue"))
    assert_equal "shop_production", config.dig("production", "main", "database")
    assert_no_match(/QUEUE_DATABASE_URL/, output)
  end

  # A staging.rb that loads production.rb gets its config.bobbin.connects_to: staging, left without a queue database,
  # stopped at boot ("The `queue` database is not configured for the `staging` environment").
  test "queue database for the environments that get connects_to: one whose file loads production.rb, and with --environments all every one" do
    write("config/database.yml", <<~YAML)
      default: &default
        adapter: postgresql

      production:
        <<: *default
        database: shop_production

      staging:
        <<: *default
        database: shop_staging

      review:
        <<: *default
        database: shop_review
    YAML
    write("config/environments/production.rb", "Rails.application.configure do\nend\n")
    write("config/environments/staging.rb", "require_relative \"production\"\n\nRails.application.configure do\nend\n")
    write("config/environments/review.rb", "Rails.application.configure do\nend\n")
    generate
    config = YAML.safe_load(File.read(path("config/database.yml")), aliases: true)
    assert_equal "shop_production_queue", config.dig("production", "queue", "database")
    assert_equal "shop_staging_queue", config.dig("staging", "queue", "database"), "staging.rb loads production.rb's connects_to"
    assert_nil config.dig("review", "queue"), "review.rb does not: it stays as it was"
    assert_equal({ "adapter" => "postgresql", "database" => "shop_review" }, config["review"])
    generate("--environments", "all")
    config = YAML.safe_load(File.read(path("config/database.yml")), aliases: true)
    assert_equal "shop_review_queue", config.dig("review", "queue", "database"), "config/application.rb's connects_to reaches every environment"
  end

  test "queue database beside lines of ERB code in config/database.yml (<% if %>): installed, the queue entry keeps them" do
    write("config/database.yml", <<~YAML)
      default: &default
        adapter: postgresql
        <% if ENV["SHOP_DB_PORT"] %>
        port: <%= ENV["SHOP_DB_PORT"] %>
        <% end %>

      production:
        <<: *default
        database: shop_production
        <%# the replica's host, when there is one %>
        <% if ENV["SHOP_DB_HOST"] %>
        host: <%= ENV["SHOP_DB_HOST"] %>
        <% end %>
    YAML
    assert_match(/Bobbin is installed/, generate, "the run went on to its end")
    config = with_env("SHOP_DB_HOST" => "db.internal", "SHOP_DB_PORT" => "6432") { YAML.safe_load(ERB.new(File.read(path("config/database.yml"))).result, aliases: true) }
    assert_equal({ "adapter" => "postgresql", "port" => 6432, "host" => "db.internal", "database" => "shop_production" }, config.dig("production", "primary"))
    assert_equal({ "adapter" => "postgresql", "port" => 6432, "host" => "db.internal", "database" => "shop_production_queue", "migrations_paths" => "db/queue_migrate" },
                 config.dig("production", "queue"))
  end

  test "queue database with DATABASE_URL set: each queue entry added reads QUEUE_DATABASE_URL, and the summary says to set it" do
    write("config/database.yml", RAILS_NEW_POSTGRESQL)
    output = with_env("DATABASE_URL" => "postgres://db.internal/shop") { generate("--environments", "all") }
    assert_match(/^config\/database.yml: the queue database of development and test reads QUEUE_DATABASE_URL \(DATABASE_URL is set here\)\.$/, output)
    assert_match(/^DATABASE_URL is set here. Set QUEUE_DATABASE_URL to the queue database's URL wherever .* Rails merges DATABASE_URL into the primary database only/, output)
    entries = ->(queue_url) { with_env("QUEUE_DATABASE_URL" => queue_url) { YAML.safe_load(ERB.new(File.read(path("config/database.yml"))).result, aliases: true) } }
    config = entries.call("postgres://db.internal/shop_queue")
    %w[development test].each do |env|
      assert_equal({ "adapter" => "postgresql", "encoding" => "unicode", "max_connections" => 5, "url" => "postgres://db.internal/shop_queue",
                     "database" => "#{env == 'test' ? 'shop_test' : 'shop_development'}_queue", "migrations_paths" => "db/queue_migrate" }, config.dig(env, "queue"))
      assert_equal "shop_#{env}", config.dig(env, "primary", "database")
    end
    assert_equal "shop_production_queue", config.dig("production", "queue", "database")
    assert_nil config.dig("production", "queue", "url"), "an entry the app has is left as it is"
    assert_nil entries.call(nil).dig("development", "queue", "url"), "QUEUE_DATABASE_URL unset: the entry's own settings"

    output = with_env("DATABASE_URL" => "postgres://db.internal/shop") { generate("--environments", "all") }
    assert_no_match(/config\/database.yml:/, output, "nothing added")
    assert_match(/^DATABASE_URL is set here. Set QUEUE_DATABASE_URL to the queue database's URL/, output, "said again: production's entry (Solid Queue's) reads it too")

    write("config/database.yml", RAILS_NEW_POSTGRESQL)
    output = generate("--environments", "all")
    assert_nil entries.call("postgres://db.internal/shop_queue").dig("development", "queue", "url"), "without DATABASE_URL, the primary's settings"
    assert_no_match(/QUEUE_DATABASE_URL/, output)
  end

  test "Kamal's config/deploy.yml, as rails new writes it, runs Bobbin in Puma and on a job role instead of Solid Queue; again, nothing" do
    write("config/deploy.yml", <<~YAML)
      servers:
        web:
          - 192.168.0.1
        # job:
        #   hosts:
        #     - 192.168.0.1
        #   cmd: bin/jobs
      env:
        clear:
          # Run the Solid Queue Supervisor inside the web server's Puma process to do jobs.
          # When you start using multiple servers, you should split out job processing to a dedicated machine.
          SOLID_QUEUE_IN_PUMA: true

          # Set number of processes dedicated to Solid Queue (default: 1)
          # JOB_CONCURRENCY: 3
    YAML
    assert_match(/Kamal \(config\/deploy.yml\) runs Bobbin now/, generate)
    deploy = File.read(path("config/deploy.yml"))
    assert_equal <<~YAML, deploy
      servers:
        web:
          - 192.168.0.1
        # job:
        #   hosts:
        #     - 192.168.0.1
        #   cmd: bin/bobbin start
      env:
        clear:
          # Run Bobbin's supervisor inside the web server's Puma process to do jobs (plugin :bobbin in config/puma.rb).
          # When you start using multiple servers, you should split out job processing to a dedicated machine.
          BOBBIN_IN_PUMA: true

          # Set number of processes dedicated to Bobbin's workers (default: 1; config/bobbin.yml)
          # BOBBIN_PROCESSES: 3
    YAML
    assert_equal({ "clear" => { "BOBBIN_IN_PUMA" => true } }, YAML.safe_load(deploy)["env"])
    assert_no_match(/Kamal/, generate)
    assert_equal deploy, File.read(path("config/deploy.yml"))
  end

  # A Solid Queue app on Heroku or Render runs `worker: bin/jobs` from its Procfile: after the install that supervisor
  # claimed nothing (the adapter was :bobbin), production's jobs waited, and nothing said so.
  test "a Procfile process that runs Solid Queue runs bin/bobbin start instead, named in the summary; one with more to it is named; again, nothing" do
    write("Procfile", "web: bin/rails server\nworker: bin/jobs\nrelease: bin/rails db:migrate\nqueue: bundle exec rake solid_queue:start\n" \
                      "jobs: bin/jobs --recurring_schedule_file=config/schedule.yml\n")
    write("Procfile.dev", "web: bin/rails server\njobs: bin/jobs\n")
    output = generate
    assert_equal "web: bin/rails server\nworker: bin/bobbin start\nrelease: bin/rails db:migrate\nqueue: bin/bobbin start\n" \
                 "jobs: bin/jobs --recurring_schedule_file=config/schedule.yml\n", File.read(path("Procfile"))
    assert_match(%r{^Procfile:2 ran Solid Queue \(bin/jobs\): now bin/bobbin start\.$}, output)
    assert_match(%r{^Procfile:4 ran Solid Queue \(bundle exec rake solid_queue:start\): now bin/bobbin start\.$}, output)
    assert_match(%r{^Procfile:5 runs Solid Queue \(jobs: bin/jobs --recurring_schedule_file=config/schedule.yml\), which no longer gets any job: run bin/bobbin start there\.$}, output)
    assert_equal "web: bin/rails server\njobs: bin/jobs\n", File.read(path("Procfile.dev")), "development keeps its adapter in a production-only install"

    write("bin/dev", "#!/usr/bin/env sh\nexec foreman start -f Procfile.dev \"$@\"\n")
    output = generate("--environments", "all")
    assert_equal "web: bin/rails server\njobs: bin/bobbin start\n", File.read(path("Procfile.dev"))
    assert_match(%r{^Procfile.dev:2 ran Solid Queue \(bin/jobs\): now bin/bobbin start\.$}, output)
    assert_match(%r{bin/dev runs them \(Procfile\.dev\)}, output)
    assert_no_match(/Procfile:2|Procfile.dev:2/, generate("--environments", "all"), "nothing left to change")
  end

  def adapter_lines(file) = File.read(path(file)).lines.grep(/^[ \t]*config\.active_job\.queue_adapter/).map(&:strip)

  # A team leaving Sidekiq (or GoodJob, Resque) got Bobbin's line beside its old one, and whichever came last won (a trial).
  test "with --environments all, another adapter's line in application.rb and production.rb becomes Bobbin's, named in the summary; again, nothing" do
    write("config/application.rb", File.read(path("config/application.rb")).sub("config.load_defaults 8.1\n", "config.load_defaults 8.1\n    config.active_job.queue_adapter = :sidekiq\n"))
    write("config/environments/production.rb", "Rails.application.configure do\n  config.active_job.queue_adapter = \"good_job\" # since 2023\nend\n")
    output = generate("--environments", "all")
    assert_equal [ "config.active_job.queue_adapter = :bobbin" ], adapter_lines("config/application.rb")
    assert_includes File.read(path("config/application.rb")), "    config.active_job.queue_adapter = :bobbin\n    config.bobbin.connects_to = { database: { writing: :queue } }\n"
    assert_equal [ "config.active_job.queue_adapter = :bobbin" ], adapter_lines("config/environments/production.rb")
    line = File.readlines(path("config/application.rb")).index { |text| text.include?("queue_adapter = :bobbin") } + 1
    assert_match(/^config\/application.rb:#{line} set queue_adapter = :sidekiq: replaced by :bobbin\.$/, output)
    assert_match(/^config\/environments\/production.rb:2 set queue_adapter = :good_job: replaced by :bobbin\.$/, output)
    assert_match(/^Jobs already in Sidekiq's Redis run only on Sidekiq: keep it running until its queues and its scheduled and retry sets are empty/, output)
    assert_match(/^Jobs already in GoodJob's good_jobs table run only on GoodJob: .*config.good_job.enable_cron = false .*every tick runs twice\. Move those entries to config\/recurring.yml/, output)
    assert_match(/GoodJob's concurrency controls do nothing under Bobbin .*limits_concurrency/, output)

    snapshot = files("**/*").to_h { |file| [ file, File.file?(path(file)) && File.read(path(file)) ] }
    output = generate("--environments", "all")
    assert_equal snapshot, files("**/*").to_h { |file| [ file, File.file?(path(file)) && File.read(path(file)) ] }, "a second run changes nothing"
    assert_no_match(/replaced by|Sidekiq|GoodJob/, output)
  end

  # Sidekiq's apps often set the adapter in an initializer, which runs after application.rb and wins: the summary said
  # "Active Job uses Bobbin in every environment" and jobs went on to Sidekiq (a review). Named, left to the user.
  test "an initializer that sets another adapter is named in the summary, left as it is" do
    initializer = "Sidekiq.configure_server { |config| config.redis = {} }\nRails.application.config.active_job.queue_adapter = :sidekiq\n"
    write("config/initializers/sidekiq.rb", initializer)
    write("config/initializers/jobs/other.rb", "ActiveJob::Base.queue_adapter = \"good_job\" # legacy\nActiveJob::Base.queue_adapter = :bobbin\n")
    output = generate("--environments", "all")
    assert_equal initializer, File.read(path("config/initializers/sidekiq.rb"))
    assert_match(/^config\/initializers\/sidekiq.rb:2 sets queue_adapter = :sidekiq, after config\/application.rb and the environments' files: Active Job keeps :sidekiq wherever that initializer runs, so perform_later does not reach Bobbin\. Remove that line/, output)
    assert_match(/^config\/initializers\/jobs\/other.rb:1 sets queue_adapter = :good_job,/, output)
    assert_no_match(/other.rb:2/, output)
    assert_match(/^Jobs already in Sidekiq's Redis run only on Sidekiq/, output)
  end

  test "production only: production.rb's other adapter becomes Bobbin's (its commented example left); application.rb's is kept for development, and said" do
    write("config/application.rb", File.read(path("config/application.rb")).sub("config.load_defaults 8.1\n", "config.load_defaults 8.1\n    config.active_job.queue_adapter = 'sidekiq'\n"))
    write("config/environments/production.rb", "Rails.application.configure do\n  # config.active_job.queue_adapter = :resque\n  config.active_job.queue_adapter = :resque\nend\n")
    output = generate
    assert_equal [ "# config.active_job.queue_adapter = :resque", "config.active_job.queue_adapter = :bobbin", "config.bobbin.connects_to = { database: { writing: :queue } }" ],
                 File.read(path("config/environments/production.rb")).lines[1..3].map(&:strip)
    assert_equal [ "config.active_job.queue_adapter = 'sidekiq'" ], adapter_lines("config/application.rb")
    assert_match(/^config\/environments\/production.rb:3 set queue_adapter = :resque: replaced by :bobbin\.$/, output)
    line = File.readlines(path("config/application.rb")).index { |text| text.include?("'sidekiq'") } + 1
    assert_match(/^config\/application.rb:#{line} keeps queue_adapter = :sidekiq for development and test \(production.rb's :bobbin overrides it in production; --environments all replaces it\)\.$/, output)
    assert_no_match(/Sidekiq's Redis|GoodJob's/, output, "production's jobs were Resque's")
  end

  # Under schema_format :sql Rails loads db/queue_structure.sql, never db/queue_schema.rb: db:prepare created no tables (a trial).
  test "queue database with schema_format :sql: a create migration in db/queue_migrate, no queue_schema.rb; again, nothing" do
    write("config/application.rb", File.read(path("config/application.rb")).sub("config.load_defaults 8.1\n", "config.load_defaults 8.1\n    config.active_record.schema_format = :sql\n"))
    output = generate
    created = files("db/queue_migrate/*_create_bobbin_tables.rb")
    assert_equal 1, created.size
    assert_includes File.read(path(created.first)), "Bobbin schema version #{VERSION}"
    assert_not File.exist?(path("db/queue_schema.rb"))
    assert_match(/Bobbin's tables live in the queue database \(config.bobbin.connects_to; a migration in db\/queue_migrate: with schema_format :sql Rails loads db\/queue_structure.sql/, output)
    assert_match(/bin\/rails db:prepare\s+create the database and Bobbin's tables/, output)
    snapshot = files("**/*")
    generate
    assert_equal snapshot, files("**/*"), "a second run adds nothing"
  end

  test "queue database with schema_format :sql, installed before with only db/queue_schema.rb: the create migration, and db:migrate" do
    write("config/application.rb", File.read(path("config/application.rb")).sub("config.load_defaults 8.1\n", "config.load_defaults 8.1\n    config.active_record.schema_format = :sql\n"))
    generate
    FileUtils.rm_rf(path("db/queue_migrate"))
    write("db/queue_schema.rb", ERB.new(File.read(File.expand_path("../../lib/generators/bobbin/install/templates/db/queue_schema.rb.tt", __dir__))).result_with_hash(database: "queue"))
    output = generate
    assert_equal 1, files("db/queue_migrate/*_create_bobbin_tables.rb").size
    assert_match(/bin\/rails db:migrate\s+create Bobbin's tables \(db\/queue_migrate: under schema_format :sql, db\/queue_schema.rb is never loaded\)/, output)
  end

  test "schema_format :sql with a queue database that names no migrations_paths: the summary says to add it" do
    write("config/application.rb", File.read(path("config/application.rb")).sub("config.load_defaults 8.1\n", "config.load_defaults 8.1\n    config.active_record.schema_format = :sql\n"))
    write("config/database.yml", "production:\n  primary:\n    adapter: sqlite3\n    database: storage/production.sqlite3\n  queue:\n    adapter: sqlite3\n    database: storage/production_queue.sqlite3\n")
    output = generate
    assert_match(/^config\/database.yml: the queue database of production names no migrations_paths: add `migrations_paths: db\/queue_migrate` to it, or Rails never runs the migration in db\/queue_migrate\.$/, output)
    assert_no_match(/QUEUE_DATABASE_URL/, output)
  end
end
