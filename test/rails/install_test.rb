# frozen_string_literal: true

require "test_helper"
require_relative "generated_app"
require_relative "puma_beside"
require_relative "../support/version_one_schema"

# A real Rails 8 app (`rails new`, `bundle add bobbin`, `bin/rails generate bobbin:install`, `bin/rails db:prepare`)
# with Bobbin's tables in a separate queue database, run in real processes: bin/bobbin, Puma with the plugin.
class RailsInstallTest < Bobbin::TestCase
  include PumaBeside

  def app = GeneratedApp.installed

  # The file's text once a job wrote it: File.write creates the file before it writes, and "" would be taken for done.
  def wait_for_file(name, timeout: 90) = wait_for("tmp/#{name}", timeout: timeout) { File.exist?(app.path("tmp/#{name}")) && app.read("tmp/#{name}").presence }

  test "bobbin:install sets the adapter in production (over Solid Queue's), a queue database, bin/bobbin; again it changes nothing", long: true do
    production = app.snapshots[:installed]
    changed = production.keys.select { |file| production[file] != app.snapshots[:before][file] }.sort
    assert_equal %w[bin/bobbin config/application.rb config/bobbin.yml config/database.yml config/environments/production.rb
                    config/puma.rb config/recurring.yml db/queue_schema.rb], changed
    assert_equal app.snapshots[:installed], app.snapshots[:again], "a second run changes nothing"
    assert_equal app.snapshots[:all], app.snapshots[:all_again], "a second run with --environments all changes nothing"
    assert_match(/Bobbin is installed.*Development keeps its adapter.*--environments all\n.*\nNext, in production .*bin\/rails db:prepare/m,
                 app.outputs[:install])
    assert_match(/Solid Queue no longer runs your jobs/, app.outputs[:install])
    output, status = app.outputs[:start_production_only]
    assert_equal 78, status.exitstatus, output
    assert_match(/\Abobbin: Bobbin's tables are missing \(.*\) in development's database, and Active Job in development uses async, not Bobbin .*/, output)
    assert_match(%r{bin/rails generate bobbin:install --environments all, then bin/rails db:prepare}, output,
                 "bin/bobbin start in development after the default install (production only) says why and what to run")

    production_rb = app.read("config/environments/production.rb")
    assert_includes production_rb, "  config.active_job.queue_adapter = :bobbin\n  config.bobbin.connects_to = { database: { writing: :queue } }\n"
    assert_not_includes production_rb, ":solid_queue"
    assert_includes app.read("config/application.rb"), "config.active_support.isolation_level = :fiber"
    assert_includes app.read("config/puma.rb"), 'plugin :bobbin if ENV["BOBBIN_IN_PUMA"]'
    assert File.executable?(app.path("bin/bobbin"))
    database_yml = YAML.safe_load(app.read("config/database.yml").gsub(/<%=.*?%>/, "5"), aliases: true)
    assert_equal "db/queue_migrate", database_yml.dig("production", "queue", "migrations_paths")
    assert_equal "db/queue_migrate", database_yml.dig("development", "queue", "migrations_paths"), "--environments all adds every environment's"
    assert_includes app.read("config/environments/test.rb"), "\n  config.active_job.queue_adapter = :test\n"
    adapters = %w[development test].map { |env| app.run!("bin/rails", "runner", "print ActiveJob::Base.queue_adapter_name", env: { "RAILS_ENV" => env }).lines.last }
    assert_equal %w[bobbin test], adapters, "--environments all: Bobbin in development; tests keep the test adapter Rails' job test helpers need"
  end

  # rails new without Kamal writes production's SQLite `database:` lines commented out (this app's primary; Solid
  # Queue's queue entry, which the generator keeps, likewise): the adapter's ArgumentError at Bobbin's first query was a
  # backtrace and exit 1, from bin/bobbin start and from the Puma plugin's (which stopped Puma).
  test "bin/bobbin start where config/database.yml names no SQLite file (rails new's production without Kamal) is one line, exit 78", long: true do
    skip("the SQLite app's production entries; PostgreSQL's name their databases") if app.postgres?
    production_rb, database_yml = app.read("config/environments/production.rb"), app.read("config/database.yml")
    # Solid Queue's line the generator leaves (its summary says so) needs the gem, which this app (--skip-solid) lacks.
    File.write(app.path("config/environments/production.rb"), production_rb.sub(/^\s*config\.solid_queue\..*\n/, ""))
    without_queue_file = database_yml.sub(%r{^(\s+)(database: storage/production_queue\.sqlite3)$}, '\1# \2')
    refute_equal database_yml, without_queue_file
    { "primary" => without_queue_file, "queue" => without_queue_file.sub("# database: path/to/persistent/storage/production.sqlite3", "database: storage/production.sqlite3") }.each do |entry, yml|
      File.write(app.path("config/database.yml"), yml)
      %w[start doctor].each do |command|
        output, status = app.capture("bin/bobbin", command, env: { "RAILS_ENV" => "production" })
        assert_equal 78, status.exitstatus, output
        assert_match(%r{\Abobbin: the production #{entry} database in config/database.yml names no SQLite file .*database: storage/production(_queue)?\.sqlite3}, output)
        refute_match(/\.rb:\d+:in /, output, "no backtrace")
      end
    end
  ensure
    File.write(app.path("config/environments/production.rb"), production_rb) if production_rb
    File.write(app.path("config/database.yml"), database_yml) if database_yml
  end

  test "db:prepare puts Bobbin's tables in the queue database only; config/bobbin.yml is loaded at boot; " \
       "perform_later in a rolled-back transaction enqueues nothing; bin/bobbin start runs the job", long: true do
    output = app.run!("bin/rails", "runner", <<~RUBY)
      Bobbin::JobRecord.delete_all # the app is shared with this file's other tests (the Puma test leaves its job)
      ActiveRecord::Base.transaction { FileJob.perform_later("rolled-back"); raise ActiveRecord::Rollback }
      job = FileJob.perform_later("committed")
      puts "queue_db=\#{Bobbin::JobRecord.connection_db_config.name} primary_has_jobs=\#{ActiveRecord::Base.connection.table_exists?(:bobbin_jobs)}"
      puts "pools=\#{Bobbin.config.pools.map(&:to_s).inspect} rails_logger=\#{Bobbin.logger.equal?(Rails.logger)}"
      puts "jobs=\#{Bobbin::JobRecord.pluck(:class_name, :arguments).map { |c, a| [ c, JSON.parse(a)["arguments"] ] }.inspect} id=\#{job.provider_job_id}"
    RUBY
    assert_match(/queue_db=queue primary_has_jobs=false/, output)
    assert_match(/pools=\["fibers: 50 × 1 process, queues \*"\] rails_logger=true/, output, "config/bobbin.yml's development section, Rails.logger")
    id = output[/id=(\d+)/, 1]
    assert_match(/jobs=\[\["FileJob", \["committed"\]\]\]/, output, "the rolled-back job was never enqueued")

    pid = app.spawn("bin/bobbin", "start", log: app.path("log/bobbin-start.log"))
    ensure_killed(pid) do
      assert_equal "#{id} bobbin", wait_for_file("committed")[/\A\d+ \w+/]
      Process.kill(:TERM, pid)
      assert wait_exit(pid, timeout: 60)&.success?, File.read(app.path("log/bobbin-start.log"))
    end
    assert_not File.exist?(app.path("tmp/rolled-back"))
    terminal = File.read(app.path("log/bobbin-start.log"))
    assert_match(/^bobbin worker \d+ \(pid \d+\) started: .*\n(.*\n)*Bobbin Performed FileJob #{id} from default .*succeeded/, terminal,
                 "in development, bin/bobbin start writes the app's log to its output too (the forked worker's lines included)")
    assert_no_match(/bobbin_recurring_runs|FROM "bobbin_processes" WHERE "bobbin_processes"."last_heartbeat_at"/, terminal,
                    "housekeeping queries stay out of it")
  end

  test "with a queue database, the app's enqueue_after_transaction_commit = true keeps the deferral Rails 8 ignores it for; false turns it off", long: true do
    application_rb = app.read("config/application.rb")
    File.write(app.path("config/application.rb"), application_rb.sub("class Application < Rails::Application\n", <<~RUBY))
      class Application < Rails::Application
          config.active_job.enqueue_after_transaction_commit = ENV["EATC"] == "true" if ENV["EATC"]
    RUBY
    deferred = %w[true false].to_h do |setting|
      [ setting, app.run!("bin/rails", "runner", "print ActiveJob::Base.enqueue_after_transaction_commit", env: { "EATC" => setting }).lines.last ]
    end
    assert_equal({ "true" => "true", "false" => "false" }, deferred)
  ensure
    File.write(app.path("config/application.rb"), application_rb) if application_rb
  end

  test "an app installed before schema versions: bobbin:install adds an upgrade migration, db:migrate runs it on the queue database", long: true do
    VersionOneSchema::Record.establish_connection(app.queue_database)
    old_app = VersionOneSchema::Record.connection_pool
    old_app.with_connection { |connection| VersionOneSchema.install(connection) }
    ids = VersionOneSchema.jobs_in_flight(ready: %w[old-0])
    old_app.disconnect!
    File.write(app.path("db/queue_schema.rb"), VersionOneSchema::QUEUE_SCHEMA_FILE)
    before = app.snapshot

    output = app.run!("bin/rails", "generate", "bobbin:install", "--environments", "all")
    assert_match(%r{create\s+db/queue_migrate/\d+_upgrade_bobbin_tables_to_#{Bobbin::Schema::VERSION}\.rb}, output)
    assert_match(/bin\/rails db:migrate\s+bring Bobbin's tables from an older schema version \(Bobbin's files do not note which\) to #{Bobbin::Schema::VERSION} \(in the queue database/, output)
    added = app.snapshot.keys - before.keys
    assert_equal [ "db/queue_migrate/" ], added.map { |file| file[%r{\A.*/}] }, "the one new file is the migration"
    assert_equal before, app.snapshot.slice(*before.keys), "no other file changed"

    app.run!("bin/rails", "db:migrate")
    old_app.with_connection do |connection|
      assert_equal Bobbin::Schema::VERSION, Bobbin::Schema.version(connection)
      [ VersionOneSchema::JobRow, VersionOneSchema::ProcessRow ].each(&:reset_column_information)
      assert_equal [ [ ids["ready"].first, "ready" ], [ ids["running"].first, "running" ], [ ids["failed"].first, "failed" ] ],
                   VersionOneSchema::JobRow.order(:id).pluck(:id, :state), "the old install's jobs are as they were"
      assert_equal [ 0 ], VersionOneSchema::JobRow.distinct.pluck(:stalls)
      VersionOneSchema::JobRow.delete_all # the app is shared with this file's other tests
      VersionOneSchema::ProcessRow.delete_all
    end
  ensure
    VersionOneSchema::Record.remove_connection
  end

  # Rails loads the schema dump into a database without schema_migrations before it migrates, and a dump's
  # create_table has force: :cascade: tables made by bobbin:migrate lost every job at the README's next step (a trial).
  test "bin/rails db:migrate after bin/rails bobbin:migrate keeps the queue database's jobs, with a real schema dump beside it", long: true do
    stub = app.read("db/queue_schema.rb")
    app.run!("bin/rails", "db:schema:dump:queue")
    assert_match(/create_table "bobbin_jobs", force: :cascade/, app.read("db/queue_schema.rb"))
    app.run!("bin/rails", "db:drop:queue", "db:create:queue")
    assert_match(/created Bobbin's tables \(schema version #{Bobbin::Schema::VERSION}\)/, app.run!("bin/rails", "bobbin:migrate"))
    app.run!("bin/rails", "runner", "FileJob.perform_later('kept-through-db-migrate')")

    app.run!("bin/rails", "db:migrate")
    assert_match(/"ready": 1/, app.run!("bin/rails", "bobbin:counts"))
  ensure
    File.write(app.path("db/queue_schema.rb"), stub) if stub
  end

  test "the Puma plugin runs the supervisor beside Puma, and stops it with Puma", long: true do
    app.run!("bin/rails", "runner", 'FileJob.perform_later("from-puma")')
    log = app.path("log/puma.log")
    pid = app.spawn("bin/rails", "server", "-b", "127.0.0.1", "-p", "0", "-P", app.path("tmp/pids/puma-test.pid"), log: log,
                    env: thread_dump_env(log).merge("BOBBIN_IN_PUMA" => "1"))
    ensure_killed(pid) do
      ran_in = wait_for_file("from-puma").split.last.to_i
      assert_not_equal pid, ran_in, "a worker process forked beside Puma ran it"
      Process.kill(:TERM, pid)
      wait_puma_exit(pid, log, "TERM")
      assert_match(/Stopping Bobbin/, File.read(log))
      assert_raises(Errno::ESRCH) { Process.kill(0, ran_in) }
    end
  end

  test "in a clustered Puma the plugin starts Bobbin again after a phased restart, Puma stops when Bobbin dies, and Bobbin stops with Puma's TERM", long: true do
    skip("the plugin does the same on either database; SQLite's suite runs it") if postgres?
    # A clustered Puma's master reaps every child it has, Bobbin's supervisor too: its death was missed, and Puma
    # went on serving with no worker behind it.
    File.write(app.path("tmp/puma-cluster.rb"), <<~RUBY)
      workers 2
      preload_app! false # a phased restart needs workers that load the app themselves
      bind "tcp://127.0.0.1:0"
      plugin :bobbin
    RUBY
    log = app.path("log/puma-cluster.log")
    pid, first = start_puma("tmp/puma-cluster.rb", log)
    ensure_killed(pid) do
      Process.kill(:USR1, pid)
      second = wait_for("Bobbin started again after the phased restart", timeout: 90) { supervisors(log)[1] }
      assert_match(/Starting phased worker restart.*Stopping Bobbin \(pid #{first}\)|Stopping Bobbin \(pid #{first}\).*Starting phased worker restart/m, File.read(log))
      assert_raises(Errno::ESRCH, "the old supervisor stopped") { Process.kill(0, first) }
      app.run!("bin/rails", "runner", 'FileJob.perform_later("after-phased")')
      wait_for_file("after-phased")
      Process.kill(:KILL, second)
      wait_puma_exit(pid, log, "its supervisor's death")
      assert_match(/Bobbin's supervisor \(pid #{second}\) exited; stopping Puma/, File.read(log))
      assert_equal 2, supervisors(log).size, "no supervisor started but these two"
    end

    # A clustered Puma ran the plugin's after_stopped hook only once its workers had stopped: one stuck in Puma's own
    # shutdown kept Bobbin up for worker_shutdown_timeout (30 s; two trials). Bobbin now stops as Puma's workers do.
    File.write(log, "")
    pid, supervisor = start_puma("tmp/puma-cluster.rb", log)
    ensure_killed(pid) do
      Process.kill(:TERM, pid)
      wait_puma_exit(pid, log, "TERM")
      output = File.read(log)
      assert_operator output.index("Stopping Bobbin (pid #{supervisor}) beside Puma..."), :<, output.index("- Gracefully shutting down workers..."), output
      assert_no_match(/exited; stopping Puma/, output, "the stop it asked for is not taken for a crash")
      assert_equal 1, output.scan("Stopping Bobbin (pid #{supervisor})").size, "told once (a second TERM: \"TERM while stopping\" in its log)"
      assert_raises(Errno::ESRCH) { Process.kill(0, supervisor) }
    end
  end
end
