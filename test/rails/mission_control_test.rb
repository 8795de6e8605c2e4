# frozen_string_literal: true

require "test_helper"
require "net/http"
require_relative "generated_app"
require_relative "../dashboard/browser_helper"

# Mission Control – Jobs mounted in the generated Rails 8 app with Bobbin as its queue adapter, driven in headless
# Chromium against `bin/rails server`: its pages list Bobbin's jobs, and its Retry makes a failed job succeed.
class MissionControlTest < BrowserTestCase
  def app = GeneratedApp.installed

  # Adds mission_control-jobs to the app (once per test process), mounted at /jobs without its HTTP basic auth.
  def with_mission_control
    return if app.read("Gemfile").include?("mission_control-jobs")

    app.run!("bundle", "add", "propshaft", "--skip-install") # Mission Control's assets need a pipeline (the app skipped one)
    app.run!("bundle", "add", "mission_control-jobs", "--skip-install")
    app.run!("bundle", "install", "--local")
    File.write(app.path("config/routes.rb"), app.read("config/routes.rb").sub(/^end\s*\z/, "  mount MissionControl::Jobs::Engine, at: \"/jobs\"\nend\n"))
    File.write(app.path("config/initializers/mission_control.rb"), "MissionControl::Jobs.http_basic_auth_enabled = false # the test app has no users\n")
    File.write(app.path("app/jobs/flaky_job.rb"), <<~RUBY)
      # Fails until tmp/flaky-ok exists, then writes tmp/NAME.
      class FlakyJob < ApplicationJob
        def perform(name)
          raise "flaky <b>down</b>" unless File.exist?(Rails.root.join("tmp", "flaky-ok"))

          File.write(Rails.root.join("tmp", name), "ok")
        end
      end
    RUBY
  end

  def free_port = TCPServer.open("127.0.0.1", 0).then { |server| server.addr[1].tap { server.close } }

  test "Mission Control lists Bobbin's queues and failed jobs, and its Retry makes a failed job succeed" do
    with_mission_control
    FileUtils.rm_f([ app.path("tmp/flaky-ok"), app.path("tmp/mc-retried") ])
    app.run!("bin/rails", "runner", 'Bobbin::JobRecord.delete_all; FlakyJob.perform_later("mc-retried"); FileJob.set(queue: "later", wait: 3600).perform_later("x")')
    app.run!("bin/bobbin", "work", "--threads", "2", "--drain")
    assert_match(/state=failed/, app.run!("bin/rails", "runner", 'puts "state=#{Bobbin::JobRecord.find_by(class_name: "FlakyJob").state}"'))

    port = free_port
    log = app.path("log/mc-server.log")
    pid = app.spawn("bin/rails", "server", "-b", "127.0.0.1", "-p", port.to_s, "-P", app.path("tmp/pids/mc.pid"), log: log)
    worker = app.spawn("bin/bobbin", "work", "--threads", "2", "--queues", "default", log: app.path("log/mc-worker.log"))
    ensure_killed(pid, worker) do
      wait_for("the Rails server", timeout: 90) { (Net::HTTP.get_response(URI("http://127.0.0.1:#{port}/up")) rescue nil)&.code == "200" }
      # A session of its own, made without Capybara's server: the dashboard tests' default session keeps its own.
      Capybara.app_host = "http://127.0.0.1:#{port}"
      Capybara.run_server = false
      Capybara.session_name = :mission_control
      visit "/jobs"
      assert_text "default"
      assert_text "later"
      screenshot("mission_control_queues")
      visit "/jobs/failed/jobs"
      assert_text "FlakyJob"
      assert_text "flaky <b>down</b>"
      screenshot("mission_control_failed")
      visit "/jobs/scheduled/jobs"
      assert_text "FileJob"
      wait_for("the worker on Mission Control's workers page", timeout: 60, interval: 0.5) do
        visit "/jobs" # the workers page lives under the application's path: follow Mission Control's own link
        click_link "Workers"
        page.has_selector?("tr.worker", text: "(PID ", wait: 0)
      end
      screenshot("mission_control_workers")

      visit "/jobs/queues/later"
      click_button "Pause"
      assert_text "Paused"
      assert_match(/paused=\["later"\]/, app.run!("bin/rails", "runner", 'puts "paused=#{Bobbin::QueuePause.pluck(:queue).inspect}"'))
      click_button "Resume"
      assert_match(/paused=\[\]/, app.run!("bin/rails", "runner", 'puts "paused=#{Bobbin::QueuePause.pluck(:queue).inspect}"'))

      File.write(app.path("tmp/flaky-ok"), "")
      visit "/jobs/failed/jobs"
      click_button "Retry"
      assert_no_text "flaky <b>down</b>"
      wait_for("the retried job to run", timeout: 60) { File.exist?(app.path("tmp/mc-retried")) }
      assert_equal "ok", File.read(app.path("tmp/mc-retried"))
      output = app.run!("bin/rails", "runner", 'j = Bobbin::JobRecord.find_by(class_name: "FlakyJob"); puts "state=#{j.state} by=#{j.operated_by}"')
      assert_match(/state=succeeded by=mission_control/, output)
    rescue Exception # rubocop:disable Lint/RescueException -- the server's log explains a failure, then it is re-raised
      warn(File.read(log).lines.grep(/Error|error|Completed|Started/).last(30).join) if File.exist?(log)
      warn(page.text[0, 1500]) rescue nil
      raise
    ensure
      Capybara.session_name = :default
      Capybara.app_host = nil
      Capybara.run_server = true
    end
  end
end
