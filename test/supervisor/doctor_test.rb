# frozen_string_literal: true

require "test_helper"
require "tmpdir"
require "support/active_jobs"
require "support/second_server"
require_relative "../rails/rails_app_processes"

# A job class with the class attributes GoodJob's concurrency extension defines; its test sets them as
# good_job_control_concurrency_with does (empty otherwise: other tests' doctors see this class too).
class GoodJobLimitedDoctorJob < ActiveJob::Base
  class_attribute :good_job_concurrency_config, instance_accessor: false, default: {}
  class_attribute :good_job_concurrency_rules, instance_accessor: false, default: []
end

class DoctorTest < Bobbin::TestCase
  include RailsAppProcesses
  include SecondServer

  # Active Job is loaded in this process (as in a Rails app) and uses Bobbin unless a test says otherwise.
  setup { ActiveJob::Base.queue_adapter = :bobbin }
  teardown { @tmpdirs&.each { |dir| FileUtils.rm_rf(dir) } }

  # An empty directory, removed after the test.
  def tmpdir = Dir.mktmpdir("bobbin-doctor").tap { |dir| (@tmpdirs ||= []) << dir }

  def doctor(workers, mode: :fork, root: tmpdir)
    pools = workers.each_with_index.map { |hash, i| Bobbin::Pool.parse(hash, "workers[#{i}]") }
    out = StringIO.new
    [ Bobbin::Doctor.new(pools, mode: mode, out: out, root: root).run, out.string ]
  end

  # The report's warning lines, but for the one a Ruby before 3.4 always gets (FiberSafety: offload-safe C calls stay on
  # the event loop), which its own test checks.
  def warnings(report) = report.lines.grep(/^  ! /).grep_v(/^  ! Ruby #{Regexp.escape(RUBY_VERSION)} keeps offload-safe C calls/)

  # A fake Rails app root: config/application.rb and config/environments/NAME.rb with the given contents.
  def rails_root(application, environments)
    root = tmpdir
    FileUtils.mkdir_p(File.join(root, "config/environments"))
    File.write(File.join(root, "config/application.rb"), application)
    environments.each { |name, text| File.write(File.join(root, "config/environments/#{name}.rb"), text) }
    root
  end

  # A recurring task of a class no file defines passed doctor, and the scheduler said "unknown job class" at every tick
  # (a trial).
  test "a recurring task whose job cannot be built is a problem; one that can is not" do
    Bobbin.config.recurring("tick", class: "SleepJob", args: [ 0, "tick" ], schedule: "every minute")
    status, report = doctor([ { "threads" => 1 } ])
    assert_match(/^Recurring: 1 task\(s\)$/, report)
    refute_match(/recurring task/, report)
    assert_equal 0, status, report

    Bobbin.config.recurring("gone", class: "NoSuchJob", schedule: "every minute")
    status, report = doctor([ { "threads" => 1 } ])
    assert_equal 1, status, report
    assert_match(/✗ recurring task gone: unknown job class NoSuchJob/, report)
  end

  # A worker held 12 connections each to a primary, a replica and a shard where the report's total said 12 (a trial).
  test "the report names the app's other databases (a replica, shards) and the connections they add per process" do
    saved = ActiveRecord::Base.configurations
    env = ActiveRecord::ConnectionHandling::DEFAULT_ENV.call.to_s
    primary = ActiveRecord::Base.connection_db_config.configuration_hash
    ActiveRecord::Base.configurations = { env => { "primary" => primary,
                                                   "primary_replica" => primary.merge(database: "app_replica", replica: true, pool: 7),
                                                   "shard_two" => primary.merge(database: "app_shard_two", pool: 5) } }
    _, report = doctor([ { "fibers" => 50, "processes" => 2 } ])
    assert_match(/also, to the app's other databases as its code uses them \(models, a cache store\), up to each one's pool per process: primary_replica \(app_replica\) 7, shard_two \(app_shard_two\) 5; × 2 processes = 24 more connections at most/, report)
  ensure
    ActiveRecord::Base.configurations = saved
  end

  test "a configuration that fits passes, and the report shows per-pool and total needs" do
    status, report = doctor([ { "queues" => [ "chat" ], "fibers" => 100, "processes" => 2 }, { "threads" => 5 } ])
    assert_equal 0, status, report
    assert_match(/workers\[0\] fibers: 100 × 2 processes.*jobs' DB connections 25 at most \(3 needed\) \+ Bobbin's own 2/, report)
    assert_match(/workers\[1\] threads: 5 × 1 process.*jobs' DB connections 5 at most \(5 needed\) \+ Bobbin's own 2/, report)
    assert_match(/total: 3 worker processes, 209 concurrent jobs, #{postgres? ? 67 : 64} database connections/, report,
                 "25 + 2 per fiber process (its fibers may lease all the Active Record pool's 25; 100 fibers and 2 lane threads), 5 + 2 for the thread one, " \
                 "3 for the supervisor (its clock, heartbeat and main loop; and a listener per process on PostgreSQL)")
    assert_match(/Active Record pool: 25 configured, 5 needed per process\n  fiber pools' jobs may open all 25 though they need 3: a pool: of 3 for the workers/, report)
    assert_match(/OK: this configuration fits/, report)
  end

  # Another process holding a write transaction open on the SQLite file (a console's BEGIN IMMEDIATE, a stuck script)
  # leaves every enqueue, claim and outcome waiting for it and failing with "database is locked": doctor said OK.
  test "an SQLite database write-locked by another process fails the check, naming the file" do
    skip("SQLite only") if postgres?
    script = 'db = SQLite3::Database.new(ARGV[0]); db.execute("BEGIN IMMEDIATE"); puts("locked"); $stdout.flush; $stdin.read'
    IO.popen([ RbConfig.ruby, "-rsqlite3", "-e", script, File.expand_path(TestDatabase.sqlite_path) ], "r+") do |holder|
      assert_equal "locked\n", holder.gets
      status, report = doctor([ { "threads" => 2 } ])
      assert_equal 1, status, report
      assert_match(/✗ the SQLite database #{Regexp.escape(File.expand_path(TestDatabase.sqlite_path))} is write-locked by another process/, report)
      holder.close_write
    end
    status, report = doctor([ { "threads" => 2 } ])
    assert_equal 0, status, report
  end

  # A replica's URL (or default_transaction_read_only on for the role or database): doctor said OK, and every worker
  # then stopped at boot on its process row's INSERT.
  test "PostgreSQL: a database that takes no writes fails the check" do
    skip_unless_postgres
    Bobbin::Record.connection.execute("SET default_transaction_read_only = on")
    status, report = doctor([ { "threads" => 2 } ])
    assert_equal 1, status, report
    assert_match(/✗ the database "\w+" takes no writes \(transaction_read_only is on\): its URL reaches a replica/, report)
  ensure
    Bobbin::Record.connection.execute("RESET default_transaction_read_only") if postgres?
  end

  # The lane runs its runs_on: :thread jobs beside the fibers: fibers: 2 with the default lane of 2 ran 4 jobs at once,
  # each in a transaction on a connection of its own, where the report said 2 concurrent jobs and 2 connections at most.
  test "a fiber pool's thread lane counts in the jobs it runs at once and the connections they may hold" do
    skip_unless_postgres # SQLite's one writer lets one transaction through at a time
    _, report = doctor([ { "fibers" => 2 } ])
    at_most = report[/jobs' DB connections (\d+) at most/, 1].to_i
    # The lane's jobs first: an idle lane adds no capacity, a busy one adds its threads to the fibers'.
    Bobbin.enqueue_all(Array.new(2) { |i| [ LaneTransactionSleepJob, [ "lane-#{i}", 2 ] ] } + Array.new(2) { |i| [ TransactionSleepJob, [ "fiber-#{i}", 2 ] ] })
    worker = Thread.new { drain_within(60, fibers: 2) }
    in_transaction = <<~SQL
      SELECT count(*) FROM pg_stat_activity WHERE application_name = '#{TestDatabase.application_name}' AND state LIKE 'idle in transaction%'
    SQL
    held = wait_for("the four jobs in their transactions at once", timeout: 15) { Bobbin::Record.connection.select_value(in_transaction) >= 4 }
    assert held
    worker.value
    assert_equal 4, LedgerEntry.count
    assert_operator 4, :<=, at_most, "the connections its jobs held at once, against the report's:\n#{report}"
    assert_match(/total: 1 worker processes, 4 concurrent jobs/, report)
  end

  test "the notifications line says how soon new jobs wake idle workers, as the README does" do
    _, report = doctor([ { "fibers" => 10 } ])
    if postgres?
      assert_match(/^Notifications: LISTEN\/NOTIFY round trip OK/, report)
    else
      assert_match(/^Notifications: SQLite — workers in the enqueuing process wake at once, other processes within 5–50 ms \(they watch the database file: every 5 ms while it changes, every 50 ms once it has not changed for 1 s\)$/, report)
    end
  end

  test "with Bobbin's tables in a database of their own, the jobs' connections to it count too" do
    Bobbin::Record.establish_connection(TestDatabase.url_with_pool(4)) # as config.bobbin.connects_to does
    _, report = doctor([ { "fibers" => 100, "processes" => 2 } ])
    assert_match(/Bobbin's database \(connects_to\): 8 Active Record connections at most \(enqueues from jobs\)/, report, "4 per process")
    assert_match(/total: 2 worker processes, 204 concurrent jobs, #{postgres? ? 67 : 65} database connections/, report,
                 "(25 + 4 + 2) per process, and a listener on PostgreSQL, + 3 for the supervisor (its pool is 4)")
  ensure
    Bobbin::Record.remove_connection
  end

  # A queue database on another server (its URL another host's): doctor checked the app's server alone and said "OK",
  # `bobbin start` warned of nothing, and the queue's server (max_connections 12) refused the workers' sessions, failing
  # 295 of 300 jobs (a trial).
  test "with Bobbin's database on another PostgreSQL server, each server's max_connections is checked against the connections opened there", long: true do
    with_second_server(max_connections: 12, superuser_reserved_connections: 1) do |url|
      Bobbin::Record.establish_connection("#{url}&pool=4") # as config.bobbin.connects_to does
      connected = true
      Bobbin::Record.with_connection { |connection| Bobbin::Schema.up(connection) }
      workers = [ { "fibers" => 50, "processes" => 2 } ]
      pools = [ Bobbin::Pool.parse(workers.first, "workers[0]") ]
      status, report = doctor(workers)
      assert_equal 1, status, report
      assert_match(/^PostgreSQL on the server of \w+ \(bobbin_second\): max_connections 12 \(1 reserved for superusers\), \d+ in use now, 17 of Bobbin's connections at most$/, report,
                   "on Bobbin's server: its own 2 and a listener per process, 4 (its pool) per process for enqueues, 3 for the supervisor")
      assert_match(/✗ Bobbin needs 17 connections on the server of \w+ \(bobbin_second\) but PostgreSQL allows 11/, report)
      app = /^PostgreSQL on the server of \w+ \(#{Regexp.escape(ActiveRecord::Base.connection_db_config.database)}\): .*, (\d+) of Bobbin's connections at most\n  \d+ left/
      assert_equal Bobbin::ConnectionBudget.jobs_at_most(pools, :fork).to_s, report[app, 1], "on the app's server, the jobs' queries:\n#{report}"
      warnings = Bobbin::ConnectionBudget.server_warnings(pools, :fork)
      assert_equal 1, warnings.size, warnings.inspect
      assert_match(/\Athese pools may open 17 database connections on the server of \w+ \(bobbin_second\), but PostgreSQL allows 11 /, warnings.first,
                   "what bobbin start logs as it boots")
    ensure
      Bobbin::Record.remove_connection if connected # before the server stops
    end
  end

  test "a loaded gem that blocks fiber pools is named with its alternative, and the fiber settings are listed" do
    Gem.loaded_specs["mysql2"] = Gem::Specification.new("mysql2", "0.5.6")
    _, report = doctor([ { "fibers" => 10 } ])
    assert_match(/! mysql2 is loaded: its calls block a fiber pool's event loop \(use trilogy, or give the jobs that need it runs_on: :thread\)/, report)
    assert_match(/stall detector: a job holding the loop over 100 ms is reported; thread lane: 2 threads; offload: #{Bobbin::FiberSafety.offload? ? "4 threads" : "off"}/, report)
    assert_match(/event loop: io-event (URing|EPoll) \(IO_EVENT_SELECTOR chooses\)/, report)
    _, threads_only = doctor([ { "threads" => 5 } ])
    refute_match(/mysql2|stall detector/, threads_only, "thread pools are not concerned")
  ensure
    Gem.loaded_specs.delete("mysql2")
  end

  # A deploy renamed a job class's queue (queue_as) and not the pools': its jobs waited, and doctor said "OK" (a trial).
  test "jobs waiting in queues that neither the pools nor a running worker select are named" do
    Bobbin.enqueue_all([ [ SleepJob, [ 0 ], { queue: "emails" } ], [ SleepJob, [ 0 ], { queue: "emails" } ], [ SleepJob, [ 0 ], { queue: "mail" } ],
                         [ SleepJob, [ 0 ], { queue: "llm_chat" } ], [ SleepJob, [ 0 ], { queue: "reports" } ] ])
    Bobbin::ProcessRecord.register(kind: "worker", name: "elsewhere", metadata: { queues: "reports" })
    status, report = doctor([ { "queues" => [ "mail", "llm_*" ], "threads" => 2 } ])
    assert_equal 0, status, report
    assert_includes warnings(report), "  ! jobs wait in 1 queue(s) that neither these pools nor a running worker select: emails (2); " \
                                      "add them to a pool's queues, or they never run\n"
    _, report = doctor([ { "queues" => [ "*" ], "threads" => 2 } ])
    assert_empty warnings(report).grep(/jobs wait in/)
  end

  # A deploy quiets the old workers (TSTP) before it starts the new ones: a queue only a quiet worker selects has no
  # worker to run its jobs, and doctor said "OK" (a review).
  test "a quiet worker does not count as selecting its queues" do
    SleepJob.enqueue_in(3600, 0, "legacy") # waiting, and not claimed meanwhile
    Bobbin::JobRecord.update_all(queue: "legacy")
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("work", "--queues", "legacy", "--threads", "1", "--polling-interval", "60")
      wait_for("the worker registered") { Bobbin::ProcessRecord.where(kind: "worker").exists? }
      _, report = doctor([ { "queues" => [ "new" ], "threads" => 2 } ])
      assert_empty warnings(report).grep(/jobs wait in/), "a worker that claims selects legacy"

      Process.kill(Bobbin::Worker::QUIET_SIGNAL, pids.first)
      wait_for("its row says quiet") { Bobbin::Operator.processes.select { |p| p.kind == "worker" }.all?(&:quiet?) }
      _, report = doctor([ { "queues" => [ "new" ], "threads" => 2 } ])
      assert_includes warnings(report), "  ! jobs wait in 1 queue(s) that neither these pools nor a running worker select: legacy (1); " \
                                        "add them to a pool's queues, or they never run\n"
    end
  end

  test "a thread pool larger than the Active Record pool fails the check" do
    status, report = doctor([ { "threads" => 40 } ])
    assert_equal 1, status
    assert_match(/the Active Record pool is 25 but a worker process needs 40/, report)
  end

  test "more connections than PostgreSQL's max_connections fails the check" do
    skip_unless_postgres
    status, report = doctor([ { "threads" => 20, "processes" => 6 } ])
    assert_equal 1, status
    assert_match(/PostgreSQL: max_connections \d+/, report)
    assert_match(/Bobbin needs 141 connections but PostgreSQL allows \d+: raise max_connections, or fewer threads \(or fiber pools\), or fewer processes$/,
                 report, "6 × (20 + 2 + 1 listening) + 3 for the supervisor")

    status, report = doctor([ { "threads" => 2 } ])
    assert_equal 0, status, report
    assert_match(/^  \d+ left for everything else: Puma takes up to workers × threads for each database it uses/, report,
                 "what is left for the app's own processes")

    status, report = doctor([ { "fibers" => 200, "processes" => 6 } ])
    assert_equal 1, status
    assert_match(/PostgreSQL allows \d+: raise max_connections, or a smaller Active Record pool for the workers \(pool: 3: fibers wait their turn\), or fewer processes$/,
                 report, "fiber pools: the remedy is the pool of 25 they may fill, not fiber pools")
  end

  # A server with every connection slot taken (what a user runs doctor for when sessions are refused) crashed doctor with
  # a backtrace as its notification check connected, after the report's first lines.
  test "PostgreSQL: a notification check the server refuses (too many clients) is a failed check, not a crash" do
    skip_unless_postgres
    max = Bobbin::Record.connection.select_value("SHOW max_connections").to_i
    # Every slot, the superusers' too (this role is one), taken until the server refuses, and each one another process
    # frees taken again while doctor runs: counted once and taken, a slot an earlier test's process freed in between let
    # the check connect (CI 159).
    held = []
    done = false
    take = lambda do
      held << PG.connect(TestDatabase.url) while held.size <= max
    rescue PG::ConnectionBad => error
      raise unless error.message.include?("too many clients")
    end
    take.call
    taker = Thread.new { (take.call; sleep(0.005)) until done }
    status, report = doctor([ { "threads" => 2 } ])
    assert_equal 1, status, report
    assert_match(/✗ the LISTEN\/NOTIFY check could not connect: the database refused the connection, it has too many already \(.*too many clients/, report)
  ensure
    done = true
    taker&.join
    held&.each(&:close)
  end

  test "fiber pools without fiber isolation fail the check" do
    ActiveSupport::IsolatedExecutionState.isolation_level = :thread
    status, report = doctor([ { "fibers" => 10 } ])
    assert_equal 1, status
    assert_match(/fiber pools need config.active_support.isolation_level = :fiber/, report)
  ensure
    ActiveSupport::IsolatedExecutionState.isolation_level = :fiber
  end

  test "the adapter Active Job uses in this process is reported, and any other than bobbin fails the check" do
    status, report = doctor([ { "fibers" => 10 } ])
    assert_equal 0, status, report
    assert_match(/^Active Job adapter in this process: bobbin$/, report)

    ActiveJob::Base.queue_adapter = :inline
    status, report = doctor([ { "fibers" => 10 } ])
    assert_equal 1, status
    assert_match(/^Active Job adapter in this process: inline$/, report)
    assert_match(/✗ Active Job uses the inline adapter, so perform_later does not reach Bobbin: set config.active_job.queue_adapter = :bobbin/, report)
  ensure
    ActiveJob::Base.queue_adapter = :bobbin
  end

  test "in a Rails app root, each environment's adapter is listed, and each line setting another one is named" do
    root = rails_root(<<~APPLICATION, "production" => <<~PRODUCTION, "development" => "# nothing about jobs\n", "test" => <<~TEST)
      module App
        class Application < Rails::Application
          # config.active_job.queue_adapter = :resque
          config.active_job.queue_adapter = :bobbin
        end
      end
    APPLICATION
      Rails.application.configure do
        config.eager_load = true
        config.active_job.queue_adapter = :solid_queue # what `rails new` writes
      end
    PRODUCTION
      Rails.application.configure do
        config.active_job.queue_adapter = ENV.fetch("ADAPTER", "test")
      end
    TEST
    status, report = doctor([ { "fibers" => 10 } ], root: root)
    assert_equal 0, status, "warnings, not problems: the adapter this process uses is bobbin\n#{report}"
    assert_match(/^  application +bobbin  config\/application.rb:4$/, report)
    assert_match(/^  development +from config\/application.rb$/, report)
    assert_match(/^  production +solid_queue  config\/environments\/production.rb:3$/, report)
    assert_match(/^  test +ENV.fetch\("ADAPTER", "test"\)  config\/environments\/test.rb:2 \(computed: not checked\)$/, report)
    assert_equal [ "  ! config/environments/production.rb:3 sets queue_adapter = :solid_queue: jobs in production do not go to Bobbin\n" ],
                 warnings(report)
  end

  test "an adapter set in config/application.rb other than bobbin is named for the environments that inherit it" do
    root = rails_root("config.active_job.queue_adapter = 'sidekiq'\n", "production" => "config.active_job.queue_adapter = :bobbin\n")
    _, report = doctor([ { "fibers" => 10 } ], root: root)
    assert_match(/^  application +sidekiq  config\/application.rb:1$/, report)
    assert_match(/^  production +bobbin  config\/environments\/production.rb:1$/, report)
    assert_equal [ "  ! config/application.rb:1 sets queue_adapter = :sidekiq: jobs in environments that do not set their own do not go to Bobbin\n" ],
                 warnings(report)
  end

  test "an initializer that sets another adapter (Sidekiq's) is listed after the environments and named" do
    root = rails_root("config.active_job.queue_adapter = :bobbin\n", "production" => "# nothing about jobs\n")
    FileUtils.mkdir_p(File.join(root, "config/initializers"))
    File.write(File.join(root, "config/initializers/sidekiq.rb"), "Sidekiq.strict_args!\nRails.application.config.active_job.queue_adapter = :sidekiq\n")
    File.write(File.join(root, "config/initializers/other.rb"), "Rails.application.config.time_zone = 'UTC'\n")
    _, report = doctor([ { "fibers" => 10 } ], root: root)
    assert_match(/^  initializer +sidekiq  config\/initializers\/sidekiq.rb:2 \(runs after the files above\)$/, report)
    assert_equal [ "  ! config/initializers/sidekiq.rb:2 sets queue_adapter = :sidekiq: jobs in every environment that initializer runs in do not go to Bobbin\n" ],
                 warnings(report)
  end

  test "the test adapter in config/environments/test.rb (what bobbin:install --environments all writes) is no warning" do
    root = rails_root("config.active_job.queue_adapter = :bobbin\n", "test" => "config.active_job.queue_adapter = :test\n",
                      "development" => "config.active_job.queue_adapter = :test\n")
    _, report = doctor([ { "fibers" => 10 } ], root: root)
    assert_match(/^  test +test  config\/environments\/test.rb:1$/, report)
    assert_equal [ "  ! config/environments/development.rb:1 sets queue_adapter = :test: jobs in development do not go to Bobbin\n" ],
                 warnings(report), "in development it is still named"
  end

  test "on a Ruby before 3.4 a fiber pool's report says offload-safe C calls stay on the event loop; on 3.4 it does not" do
    _, report = doctor([ { "fibers" => 10 } ])
    line = "  ! Ruby #{RUBY_VERSION} keeps offload-safe C calls (zlib, ...) on the event loop: Ruby >= 3.4 hands them to threads\n"
    if Gem::Version.new(RUBY_VERSION) >= Gem::Version.new("3.4")
      refute_includes report.lines, line
      assert_match(/offload: 4 threads/, report)
    else
      assert_includes report.lines, line
      assert_match(/offload: off/, report)
    end
  end

  test "outside a Rails app root there is no per-environment section" do
    _, report = doctor([ { "fibers" => 10 } ])
    refute_match(/per environment/, report)
  end

  test "bobbin doctor in the booted dummy Rails app reports the adapter its production environment uses" do
    status, output = bobbin_in_rails_app("doctor", "--fibers", "5", env: "production")
    assert_equal 0, status.exitstatus, output
    assert_match(/^Active Job adapter in this process: bobbin$/, output)
    assert_match(/^  production +bobbin  config\/environments\/production.rb:\d+$/, output)
    assert_empty warnings(output)
  end

  test "bobbin doctor fails in a Rails app whose production.rb overrides the adapter, naming the line" do
    app = File.join(tmpdir, "app")
    FileUtils.cp_r(RailsAppProcesses::APP, app)
    production = File.join(app, "config/environments/production.rb")
    File.write(production, File.read(production).sub("config.active_job.queue_adapter = :bobbin", "config.active_job.queue_adapter = :async"))
    line = File.readlines(production).index { |text| text.include?("queue_adapter = :async") } + 1

    status, output = bobbin_in_rails_app("doctor", "--fibers", "5", env: "production", app: app)
    assert_equal 1, status.exitstatus, output
    assert_match(/^Active Job adapter in this process: async$/, output)
    assert_match(/^  ! config\/environments\/production.rb:#{line} sets queue_adapter = :async: jobs in production do not go to Bobbin$/, output)
    assert_match(/✗ Active Job uses the async adapter/, output)
  end

  test "bobbin doctor fails naming a job class that keeps GoodJob's concurrency controls and no limits_concurrency, and passes once it has one" do
    GoodJobLimitedDoctorJob.good_job_concurrency_config = { perform_limit: 1, key: -> { arguments.first } }
    status, output = doctor([ { "fibers" => 5 } ])
    assert_equal 1, status, output
    assert_match(/✗ GoodJobLimitedDoctorJob: GoodJob's concurrency controls .* do nothing under Bobbin.*limits_concurrency.*: its perform_later raises$/, output)

    GoodJobLimitedDoctorJob.limits_concurrency(to: 1, key: ->(account) { account })
    status, output = doctor([ { "fibers" => 5 } ])
    assert_equal 0, status, output
  ensure
    GoodJobLimitedDoctorJob.good_job_concurrency_config = {}
    GoodJobLimitedDoctorJob.bobbin_concurrency = nil
  end

  # `-c config/bobbin.yml`, the default spelled out, loaded the file a second time after the app had booted: its settings
  # and pools replaced what config.bobbin and the initializers had set over it (a review).
  test "bobbin doctor -c config/bobbin.yml in a Rails app reads the file once: an initializer's setting still wins over it", long: true do
    app = File.join(tmpdir, "app")
    FileUtils.cp_r(RailsAppProcesses::APP, app)
    File.write(File.join(app, "config/bobbin.yml"), "development:\n  shutdown_timeout: 25\n")
    FileUtils.mkdir_p(File.join(app, "config/initializers"))
    File.write(File.join(app, "config/initializers/bobbin.rb"), "Bobbin.configure { |config| config.shutdown_timeout = 10 }\n")
    report = File.join(tmpdir, "report.rb")
    File.write(report, "at_exit { puts \"shutdown_timeout=\#{Bobbin.config.shutdown_timeout}\" }\n")
    [ [], %w[-c config/bobbin.yml], [ "-c", File.join(app, "config/bobbin.yml") ] ].each do |flags|
      status, output = bobbin_in_rails_app("doctor", "--fibers", "5", *flags, "--require", report, env: "development", app: app)
      assert_equal 0, status.exitstatus, output
      assert_match(/^shutdown_timeout=10\.0$/, output, flags.inspect)
    end
  end

  # Moving job classes one at a time (self.queue_adapter = :bobbin on each, the global adapter another) is the documented
  # way to switch, and doctor's failure stopped the deploy step that runs it (a trial): a warning then, still a failure
  # while no class uses Bobbin.
  test "bobbin doctor in a Rails app moving job classes to Bobbin one by one warns, naming them; with none moved it fails", long: true do
    app = File.join(tmpdir, "app")
    FileUtils.cp_r(RailsAppProcesses::APP, app)
    variables = { "RAILS_APP_QUEUE_ADAPTER" => "async" }
    status, output = bobbin_in_rails_app("doctor", "--fibers", "5", env: "development", app: app, variables: variables)
    assert_equal 1, status.exitstatus, output
    assert_match(/✗ Active Job uses the async adapter, so perform_later does not reach Bobbin/, output)

    File.write(File.join(app, "app/jobs/moved_job.rb"), "class MovedJob < ApplicationJob\n  self.queue_adapter = :bobbin\nend\n")
    File.write(File.join(app, "app/jobs/also_moved_job.rb"), "class AlsoMovedJob < ApplicationJob\n  self.queue_adapter = :bobbin\nend\n")
    status, output = bobbin_in_rails_app("doctor", "--fibers", "5", env: "development", app: app, variables: variables)
    assert_equal 0, status.exitstatus, output
    assert_match(/^Active Job adapter in this process: async$/, output)
    assert_match(/^  ! Active Job uses the async adapter, but 2 job class\(es\) loaded here set Bobbin's \(AlsoMovedJob, MovedJob\): their perform_later reaches Bobbin, that of the \d+ other\(s\) async; set config.active_job.queue_adapter = :bobbin once every class has moved$/, output)
    assert_no_match(/✗/, output)
  end

  # The generator sets :bobbin for the whole app; a team moving gradually keeps the classes not moved yet on Sidekiq with
  # self.queue_adapter. Doctor said "OK: this configuration fits" and nothing of them (a review): a warning naming them.
  test "bobbin doctor in a Rails app whose adapter is Bobbin warns of job classes that set another, naming them" do
    app = File.join(tmpdir, "app")
    FileUtils.cp_r(RailsAppProcesses::APP, app)
    File.write(File.join(app, "app/jobs/not_moved_job.rb"), "class NotMovedJob < ApplicationJob\n  self.queue_adapter = :async\nend\n")
    status, output = bobbin_in_rails_app("doctor", "--fibers", "5", env: "development", app: app)
    assert_equal 0, status.exitstatus, output
    assert_match(/^Active Job adapter in this process: bobbin$/, output)
    assert_equal [ "  ! Active Job uses Bobbin, but 1 job class(es) loaded here set another adapter (NotMovedJob: async): their perform_later does not reach Bobbin\n" ],
                 warnings(output)
  end
end
