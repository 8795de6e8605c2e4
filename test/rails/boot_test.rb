# frozen_string_literal: true

require "test_helper"
require_relative "rails_app_processes"

# Boots the dummy Rails app (test/rails_app: `rails new` layout, Bundler.require, queue_adapter = :bobbin) in real
# processes: what a Rails app does with Bobbin in its Gemfile, without any `require` of the adapter by hand.
class RailsBootTest < Bobbin::TestCase
  include RailsAppProcesses

  # `bobbin migrate` in a Rails app whose database could not be reached said "is DATABASE_URL right?", where
  # config/database.yml was what to fix, though the other commands named it (a review).
  test "bobbin migrate names what gave the database it could not reach: the app's config/database.yml entry, or the -d URL" do
    once_per_run # a PostgreSQL server that is not there, whatever the suite's database
    port = TCPServer.open("127.0.0.1", 0) { |server| server.addr[1] } # closed again: nothing listens there
    url = "postgres://127.0.0.1:#{port}/bobbin_nowhere"
    status, output = bobbin_in_rails_app("migrate", env: "development", variables: { "BOBBIN_RAILS_APP_DATABASE_URL" => url })
    refute status.success?
    assert_match(/bobbin: migrate failed: cannot connect to the database: .*; is the server running, and is config\/database\.yml \(development primary: database "bobbin_nowhere" on 127\.0\.0\.1:#{port}\) right\?$/, output)
    refute_match(/DATABASE_URL/, output)

    status, output = bobbin_in_rails_app("migrate", "-d", url, env: "development")
    refute status.success?
    assert_match(/bobbin: (migrate failed: )?cannot connect to the database: .*; is the server running, and is the -d URL right\?$/, output)
    refute_match(/DATABASE_URL|database\.yml/, output)
  end

  %w[production development].each do |env|
    test "#{env}: perform_later in the booted app stores a Bobbin job, and `bobbin work` from the app's root runs it" do
      status, output = run_in_rails_app("-e", <<~RUBY, env: env)
        require "./config/environment"
        job = LedgerJob.perform_later("hello")
        puts "adapter=\#{ActiveJob::Base.queue_adapter_name} provider_job_id=\#{job.provider_job_id}"
      RUBY
      assert status.success?, output
      id = output[/^adapter=bobbin provider_job_id=(\d+)$/, 1] or flunk("the app's adapter is not bobbin:\n#{output}")
      assert_equal [ [ "LedgerJob", "ready" ] ], Bobbin::JobRecord.where(id: id).pluck(:class_name, :state)

      status, output = bobbin_in_rails_app("work", "--queues", "rails_app", "--fibers", "5", "--drain", env: env)
      assert status.success?, output
      assert_equal [ "hello provider_job_id=#{id} adapter=bobbin" ], LedgerEntry.where("key LIKE 'hello %'").pluck(:key), output
      assert_equal "succeeded", Bobbin::JobRecord.find(id).state
      assert_no_match(/perform_later here does not reach/, output)
    end
  end

  # Sentry, Honeybadger and the like hear of a job's error through Rails.error, as under Solid Queue or Sidekiq: the app's
  # executor, which Bobbin runs each job in, reports what escapes it. Once per failed attempt, with the job's error.
  test "a failing job's error reaches the app's error reporter (Rails.error)", long: true do
    with_error_ledger do |reporter|
      output = enqueue_and_drain('FailingJob.perform_later("boom")', reporter, "--fibers", "5")
      assert_equal [ "failed" ], Bobbin::JobRecord.where(class_name: "FailingJob").pluck(:state), output
      assert_equal 1, LedgerEntry.where("key LIKE 'reported ArgumentError: boom handled=false source=application.%'").count,
                   LedgerEntry.pluck(:key).inspect + output
    end
  end

  # Bobbin's own threads' errors (an outage's start, a failing housekeeping task) reached the log only, never Sentry or
  # Honeybadger (a trial); in a Rails app Rails.error hears of them by default, as under Solid Queue.
  test "an error of Bobbin's own threads reaches Rails.error, reported as handled, from source bobbin", long: true do
    with_error_ledger do |reporter|
      script = "require './config/environment'; require '#{reporter}'; " \
               "Bobbin::OutageLog.error('bobbin worker 1: heartbeat', RuntimeError.new('schema mismatch'), 'trying again')"
      status, output = run_in_rails_app("-e", script, env: "production")
      assert status.success?, output
      assert_equal [ "reported RuntimeError: schema mismatch handled=true source=bobbin job=" ], LedgerEntry.where("key LIKE 'reported %'").pluck(:key), output
    end
  end

  # A Bobbin::Job's error reached Rails.error with an empty context: no job, class, queue or attempt (a trial).
  test "a failing Bobbin::Job's error reaches Rails.error with the job named in its context", long: true do
    with_error_ledger do |reporter|
      output = enqueue_and_drain('puts "id=#{PlainFailingJob.enqueue("plain boom")}"', reporter, "--threads", "2")
      id = output[/^id=(\d+)$/, 1] or flunk(output)
      assert_equal [ "reported RuntimeError: plain boom handled=false job=PlainFailingJob,#{id},rails_app,1" ],
                   LedgerEntry.where("key LIKE 'reported %'").pluck(:key).map { |key| key.sub(/ source=\S+/, "") }, output
    end
  end

  # An Active Job job whose class the worker cannot load failed before Active Job named it, and Rails.error heard of it
  # with an empty context, at each of its tries (a trial).
  test "an Active Job job whose class the worker cannot load reaches Rails.error with the job named in its context", long: true do
    with_error_ledger do |reporter|
      enqueue = 'class GoneJob < ApplicationJob; def perform = nil; end; puts "id=#{GoneJob.set(queue: "rails_app").perform_later.provider_job_id}"'
      output = enqueue_and_drain(enqueue, reporter, "--fibers", "5")
      id = output[/^id=(\d+)$/, 1] or flunk(output)
      reported = LedgerEntry.where("key LIKE 'reported %'").pluck(:key)
      assert_equal 1, reported.size, reported.inspect + output
      assert_match(/\Areported Bobbin::UnknownJobClass: unknown job class GoneJob .* job=GoneJob,#{id},rails_app,1\z/, reported.first)
    end
  end

  # A stop (a deploy) interrupts the jobs still running when its shutdown_timeout passes, and they go back to their
  # queue. Active Job ran such a job's after_discard and the app's executor reported the interrupt to Rails.error,
  # once per job and deploy (a trial: Solid Queue and GoodJob do neither).
  { "fibers" => %w[--fibers 5], "threads" => %w[--threads 2] }.each do |pool, size|
    test "a job a stopping worker interrupts (#{pool}) goes back to its queue: no after_discard, no report to Rails.error", long: true do
      with_error_ledger do |reporter|
        # A plain Bobbin::Job's interrupt reached Rails.error as unhandled, once per job and deploy (a trial).
        status, output = run_in_rails_app("-e", 'require "./config/environment"; WaitingJob.perform_later("cut"); PlainWaitingJob.enqueue("plain cut")',
                                          env: "production")
        assert status.success?, output
        Tempfile.create("worker-output") do |log|
          worker = spawn_in_rails_app(File.join(TestProcesses::ROOT, "exe/bobbin"), "work", "--queues", "rails_app", *size,
                                      "--shutdown-timeout", "1", "-r", reporter, env: "production", log: log)
          status = ensure_killed(worker) do
            wait_for("the jobs to start") { LedgerEntry.where(key: [ "cut started", "plain cut started" ]).count == 2 }
            Process.kill(:TERM, worker)
            wait_exit(worker, timeout: 60)
          end
          output = File.read(log.path)
          assert status&.success?, output
          assert_equal [ "ready" ], Bobbin::JobRecord.where(class_name: %w[WaitingJob PlainWaitingJob]).distinct.pluck(:state), output
          assert_equal [ "cut started", "plain cut started" ], LedgerEntry.order(:key).pluck(:key),
                       "neither after_discard nor Rails.error heard of the interrupts\n#{output}"
        end
      end
    end
  end

  test "bobbin work in an environment whose Active Job uses another adapter runs, and says perform_later does not reach it " \
       "(but not of the test adapter in test)", long: true do
    status, output = bobbin_in_rails_app("work", "--queues", "rails_app", "--fibers", "5", "--drain", env: "development",
                                         variables: { "RAILS_APP_QUEUE_ADAPTER" => "async" })
    assert status.success?, output
    assert_match(/bobbin: Active Job in development uses async, not Bobbin: perform_later here does not reach these workers/, output)

    status, output = bobbin_in_rails_app("work", "--queues", "rails_app", "--fibers", "5", "--drain", env: "test",
                                         variables: { "RAILS_APP_QUEUE_ADAPTER" => "test" })
    assert status.success?, output
    assert_match(/bobbin worker \d+ \(pid \d+\) started/, output, "the log reaches the output")
    assert_no_match(/perform_later here does not reach/, output, "the test adapter in test is Rails' convention, not a mistake")
  end

  # Rails' pending-migration check gives every development database a schema_migrations table on the app's first
  # request, a new SQLite file's too; db:prepare then counts it as set up and never loads db/queue_schema.rb into it. A
  # user who opened the app before db:prepare was told by every message to run db:prepare, which did nothing (a trial).
  test "with Bobbin's tables missing in a database that has schema_migrations, bobbin start and perform_later say to run bobbin:migrate", long: true do
    skip "a new SQLite file is the database a first request makes" if postgres?

    Dir.mktmpdir do |dir|
      fresh = { "BOBBIN_RAILS_APP_DATABASE_URL" => "sqlite3:#{File.join(dir, 'fresh.sqlite3')}" }
      touched = { "BOBBIN_RAILS_APP_DATABASE_URL" => "sqlite3:#{File.join(dir, 'touched.sqlite3')}" }
      SQLite3::Database.new(File.join(dir, "touched.sqlite3")) { |db| db.execute("CREATE TABLE schema_migrations (version varchar NOT NULL PRIMARY KEY)") }

      status, output = bobbin_in_rails_app("start", env: "development", variables: touched)
      assert_equal 78, status.exitstatus, output
      assert_match(/Bobbin's tables are missing \(bobbin_jobs, bobbin_processes, bobbin_pauses\) in the SQLite file \S+: run bin\/rails bobbin:migrate \(this database already has Rails' schema_migrations table/, output)
      _, output = run_in_rails_app("-e", "require './config/environment'; LedgerJob.perform_later('x')", env: "development", variables: touched)
      assert_match(/Bobbin's tables are missing in this database: run bin\/rails bobbin:migrate \(this database already has Rails' schema_migrations table/, output)

      status, output = bobbin_in_rails_app("start", env: "development", variables: fresh)
      assert_equal 78, status.exitstatus, output
      assert_match(/Bobbin's tables are missing \(bobbin_jobs, bobbin_processes, bobbin_pauses\) in the SQLite file \S+: run `bobbin migrate` \(in a Rails app: bin\/rails generate bobbin:install, then bin\/rails db:prepare\)/, output)
    end
  end

  private
    # Runs `enqueue` (Ruby) in the booted app, then `bobbin work` with `pool` until the queue is empty, `reporter`
    # required; returns both outputs, after asserting both succeeded.
    def enqueue_and_drain(enqueue, reporter, *pool)
      status, output = run_in_rails_app("-e", "require './config/environment'; #{enqueue}", env: "production")
      assert status.success?, output
      status, work = bobbin_in_rails_app("work", "--queues", "rails_app", *pool, "--drain", "-r", reporter, env: "production")
      assert status.success?, work
      output + work
    end

    # Yields the path of a file that, required in the app, records each error Rails.error hears of in the ledger.
    def with_error_ledger
      Tempfile.create([ "reporter", ".rb" ]) do |reporter|
        reporter.write(<<~RUBY)
          Rails.error.subscribe(Class.new do
            def report(error, handled:, severity:, context:, source: nil)
              job = context[:bobbin_job]&.values_at(:class_name, :id, :queue, :attempt)&.join(",")
              LedgerEntry.create!(key: "reported \#{error.class}: \#{error.message} handled=\#{handled} source=\#{source} job=\#{job}", pid: Process.pid)
            end
          end.new)
        RUBY
        reporter.close
        yield reporter.path
      end
    end
end
