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

  def enqueue_late(key)
    row = Bobbin::Client::Enqueuer.build(class_name: "LateJob", arguments: JSON.generate([ key ]), queue: "rails_app",
                                         priority: 0, run_at: nil, max_attempts: 20)
    Bobbin::Client::Enqueuer.insert([ row ]).first
  end

  test "development: a job class added, then changed, while the worker runs is run in its newest form" do
    Dir.mktmpdir do |dir|
      app = File.join(dir, "app")
      FileUtils.cp_r(APP, app)
      environment = { "BUNDLE_GEMFILE" => File.join(TestProcesses::ROOT, "Gemfile"), "RAILS_ENV" => "development",
                      "BOBBIN_RAILS_APP_DATABASE_URL" => rails_app_database_url, "DATABASE_URL" => nil }
      command = [ "bundle", "exec", "ruby", File.join(TestProcesses::ROOT, "exe/bobbin"), "work", "--queues", "rails_app",
                  "--fibers", "5", "--polling-interval", "0.05" ]
      pid = Bundler.with_original_env { Process.spawn(environment, *command, chdir: app, out: File::NULL, err: File::NULL) }
      ensure_killed(pid) do
        id = enqueue_late("first")
        wait_for("the worker to meet the unknown class", timeout: 60) { Bobbin::JobRecord.find(id).last_error_class }
        assert_match(/unknown job class LateJob .*app\/jobs/, Bobbin::JobRecord.find(id).last_error_message)

        File.write(File.join(app, "app/jobs/late_job.rb"), job_source("v1"))
        wait_for("the retry to run the new class", timeout: 60) { LedgerEntry.exists?(key: "v1-first") }

        File.write(File.join(app, "app/jobs/late_job.rb"), job_source("v2"))
        enqueue_late("second")
        wait_for("the changed class to run", timeout: 60) { LedgerEntry.where("key LIKE '%-second'").pluck(:key).any? }
        assert_equal [ "v2-second" ], LedgerEntry.where("key LIKE '%-second'").pluck(:key), "not the stale v1 class"
        Process.kill(:TERM, pid)
        assert wait_exit(pid, timeout: 30)&.success?
      end
    end
  end
end
