# frozen_string_literal: true

require "test_helper"
require "open3"

# `rails new --minimal` leaves Active Job out. Bobbin's Railtie read config.active_job as the app booted with a queue
# database configured, and the app stopped at boot (NoMethodError; a trial).
class RailsWithoutActiveJobTest < Bobbin::TestCase
  test "an app without Active Job, its Bobbin tables in a queue database, boots and enqueues a Bobbin::Job there" do
    once_per_run
    Dir.mktmpdir("bobbin-no-active-job") do |dir|
      File.write(File.join(dir, "database.yml"), <<~YAML)
        production:
          primary: { adapter: sqlite3, database: #{dir}/primary.sqlite3 }
          queue: { adapter: sqlite3, database: #{dir}/queue.sqlite3 }
      YAML
      script = <<~RUBY
        require "rails"
        require "active_record/railtie"
        require "bobbin"
        class NoJobsApp < Rails::Application
          config.load_defaults 8.1
          config.eager_load = false
          config.logger = Logger.new(nil)
          config.root = #{dir.inspect}
          config.paths["config/database"] = #{File.join(dir, 'database.yml').inspect}
          config.bobbin.connects_to = { database: { writing: :queue } }
        end
        NoJobsApp.initialize!
        class PingJob
          include Bobbin::Job
          def perform = nil
        end
        Bobbin.migrate!
        puts "active_job_railtie=\#{defined?(ActiveJob::Railtie).inspect} id=\#{PingJob.enqueue} in=\#{File.basename(Bobbin::Record.connection_db_config.database)}"
      RUBY
      out, status = Open3.capture2e({ "RAILS_ENV" => "production", "DATABASE_URL" => nil, "SECRET_KEY_BASE" => "x" * 64 }, RbConfig.ruby, "-I", File.join(ROOT, "lib"), "-e", script)
      assert status.success?, out
      assert_match(/\Aactive_job_railtie=nil id=1 in=queue\.sqlite3\z/, out.strip)
    end
  end
end
