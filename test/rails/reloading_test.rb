# frozen_string_literal: true

require "test_helper"
require_relative "rails_app_processes"

# A development worker runs jobs through the app's reloader: a job class added or changed while it runs is
# picked up, as Rails users expect from their server.
class RailsReloadingTest < Bobbin::TestCase
  include RailsAppProcesses

  def job_source(prefix) = <<~RUBY
    class LateJob
      include Bobbin::Job
      bobbin_options queue: "rails_app", backoff: 0.2

      def perform(key) = LedgerEntry.create!(key: "#{prefix}-\#{key}", pid: Process.pid)
    end
  RUBY

  def enqueue_late(key, class_name: "LateJob")
    row = Bobbin::Client::Enqueuer.build(class_name: class_name, arguments: JSON.generate([ key ]), queue: "rails_app",
                                         priority: 0, run_at: nil, max_attempts: 20)
    Bobbin::Client::Enqueuer.insert([ row ]).first
  end

  # `bobbin work` in development in a copy of the dummy app (the test changes its files), with `pool` (its options);
  # yields the copy's directory and the worker's pid, then stops the worker.
  def development_worker(*pool, log: File::NULL)
    with_app_copy do |app|
      environment = { "BUNDLE_GEMFILE" => File.join(TestProcesses::ROOT, "Gemfile"), "RAILS_ENV" => "development",
                      "BOBBIN_RAILS_APP_DATABASE_URL" => rails_app_database_url, "DATABASE_URL" => nil }
      command = [ "bundle", "exec", "ruby", File.join(TestProcesses::ROOT, "exe/bobbin"), "work", "--queues", "rails_app",
                  *pool, "--polling-interval", "0.05" ]
      pid = Bundler.with_original_env { Process.spawn(environment, *command, chdir: app, out: log, err: log) }
      ensure_killed(pid) do
        yield app, pid
        Process.kill(:TERM, pid)
        assert wait_exit(pid, timeout: 30)&.success?
      end
    end
  end

  test "development: a job class added, then changed, while the worker runs is run in its newest form", long: true do
    development_worker("--fibers", "5") do |app|
      id = enqueue_late("first")
      wait_for("the worker to meet the unknown class", timeout: 60) { Bobbin::JobRecord.find(id).last_error_class }
      assert_match(/unknown job class LateJob .*app\/jobs/, Bobbin::JobRecord.find(id).last_error_message)

      File.write(File.join(app, "app/jobs/late_job.rb"), job_source("v1"))
      wait_for("the retry to run the new class", timeout: 60) { LedgerEntry.exists?(key: "v1-first") }

      File.write(File.join(app, "app/jobs/late_job.rb"), job_source("v2"))
      enqueue_late("second")
      wait_for("the changed class to run", timeout: 60) { LedgerEntry.where("key LIKE '%-second'").pluck(:key).any? }
      assert_equal [ "v2-second" ], LedgerEntry.where("key LIKE '%-second'").pluck(:key), "not the stale v1 class"
    end
  end

  test "development: a runs_on: :thread class added while a fiber pool runs runs its first jobs on the thread lane, not on the loop", long: true do
    development_worker("--fibers", "5") do |app|
      warm = enqueue_active_job("LedgerJob", "warm-up")
      wait_for("the worker to boot and run a job", timeout: 60) { Bobbin::JobRecord.find(warm).state == "succeeded" } # the new file comes after
      File.write(File.join(app, "app/jobs/lane_late_job.rb"), <<~RUBY)
        class LaneLateJob
          include Bobbin::Job
          bobbin_options queue: "rails_app", runs_on: :thread

          def perform(key) = LedgerEntry.create!(key: "\#{key}-\#{Fiber.scheduler ? 'loop' : 'lane'}", pid: Process.pid)
        end
      RUBY
      ids = Array.new(3) { |i| enqueue_late("new-#{i}", class_name: "LaneLateJob") }
      wait_for("the new class's jobs to end", timeout: 60) { Bobbin::JobRecord.where(id: ids, state: %w[succeeded failed]).count == 3 }
      assert_equal %w[new-0-lane new-1-lane new-2-lane], LedgerEntry.where("key LIKE 'new-%'").order(:key).pluck(:key)
    end
  end

  # Rails' reload lock tells the code it lets run from the reload apart by thread, and a fiber pool's jobs share one:
  # a job starting after a change would unload the app's code while the others ran or loaded it.
  test "development: after a code change, jobs that run at once in a fiber pool each run the new code, none fails", long: true do
    log = @log = "tmp/reloading-#{Process.pid}.log"
    development_worker("--fibers", "10", log: log) do |app|
      slow = ->(version) { <<~RUBY }
        class SlowLedgerJob < ApplicationJob
          queue_as :rails_app

          def perform(key)
            sleep(0.3) # the jobs overlap
            LedgerEntry.create!(key: "#{version}-\#{key}", pid: Process.pid)
          end
        end
      RUBY
      File.write(File.join(app, "app/jobs/slow_ledger_job.rb"), slow.("v1"))
      File.write(File.join(app, "app/jobs/plain_late_job.rb"), job_source("v1").sub("LateJob", "PlainLateJob").sub("prefix", "x"))
      3.times do |round|
        File.write(File.join(app, "app/jobs/slow_ledger_job.rb"), slow.("v#{round + 2}")) # a change the next job finds
        ids = Array.new(6) { |i| enqueue_active_job("SlowLedgerJob", "r#{round}-#{i}") } + Array.new(4) { |i| enqueue_late("r#{round}-p#{i}", class_name: "PlainLateJob") }
        wait_for("round #{round}'s jobs to end", timeout: 60) { Bobbin::JobRecord.where(id: ids, state: %w[succeeded failed]).count == ids.size || Bobbin::JobRecord.where(id: ids).where.not(last_error_class: nil).exists? }
        errors = Bobbin::JobRecord.where(id: ids).where.not(last_error_class: nil).pluck(:class_name, :last_error_class, :last_error_message)
        assert_empty errors, "round #{round}: jobs failed across the reload:\n#{File.read(log).lines.last(20).join}"
      end
      assert_equal 6, LedgerEntry.where("key LIKE 'v4-r2-%'").count, "the last round ran the class as changed"
    end
  end

  test "development: inside a job only the gate reloads, before the job; code outside jobs still reloads by itself", long: true do
    with_app_copy do |app|
      status, output = run_in_rails_app("-e", <<~RUBY, env: "development", app: app)
        require_relative "config/environment"
        # Each version a size of its own: Bootsnap's compile cache tells a file's versions apart by size and mtime in seconds.
        probe = ->(version) { File.write("app/models/gate_probe.rb", "module GateProbe; VERSION = \#{version}; end\n" + "#" * version) }
        read = -> { Rails.application.reloader.wrap { GateProbe::VERSION } }
        probe.(1)
        gate = Bobbin::AppExecutor::ReloadGate.current
        seen = [ read.() ]
        probe.(2)
        seen << read.() # outside a job: the app's reloader reloads as it would for a request
        probe.(3)
        gate.pass do
          seen << GateProbe::VERSION # the gate reloaded before the job
          probe.(4)
          seen << read.() # a reloader inside the job (Active Job's) does not reload under the jobs beside it
        end
        gate.pass { seen << GateProbe::VERSION } # the next job finds the change
        puts "seen=\#{seen.join(',')}"
      RUBY
      assert status.success?, output
      assert_includes output, "seen=1,2,3,3,4"
    end
  end

  private
    # An Active Job job's row, as perform_later writes it (the test process does not have the class).
    def enqueue_active_job(class_name, *arguments)
      job_id = SecureRandom.uuid
      payload = { "job_class" => class_name, "job_id" => job_id, "provider_job_id" => nil, "queue_name" => "rails_app", "priority" => nil,
                  "arguments" => arguments, "executions" => 0, "exception_executions" => {}, "locale" => "en", "timezone" => "UTC",
                  "enqueued_at" => Time.now.utc.iso8601(9), "scheduled_at" => nil }
      row = Bobbin::Client::Enqueuer.build(class_name: class_name, arguments: JSON.generate(payload), queue: "rails_app", priority: 0,
                                           run_at: nil, max_attempts: 1, active_job_id: job_id)
      Bobbin::Client::Enqueuer.insert([ row ]).first
    end
end
