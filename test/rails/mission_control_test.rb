# frozen_string_literal: true

require "test_helper"
require "net/http"
require_relative "generated_app"
require_relative "../dashboard/browser_helper"

# Mission Control – Jobs mounted in the generated Rails 8 app with Bobbin as its queue adapter, driven in headless
# Chromium against `bin/rails server`: its pages list Bobbin's jobs, its Retry makes a failed job succeed, and its
# Discard, Discard selection and Retry all act on exactly the jobs it shows, recording Mission Control as the operator.
class MissionControlTest < BrowserTestCase
  # Mission Control's adapter reads and acts through Bobbin's operator layer, whose own tests run on both databases;
  # these check Mission Control's pages and buttons over it, once per run.
  setup { once_per_run }

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

  # Runs `bin/rails server` and points a Capybara session of its own (made without Capybara's server: the dashboard
  # tests' default session keeps its own) at it for the block; start_worker adds workers, killed with the server.
  # On a failure, the end of the server's log and the page's text explain it.
  def serving_mission_control
    port = free_port
    log = app.path("log/mc-server-#{port}.log")
    @processes = [ app.spawn("bin/rails", "server", "-b", "127.0.0.1", "-p", port.to_s, "-P", app.path("tmp/pids/mc-#{port}.pid"), log: log) ]
    ensure_killed(@processes) do
      wait_for("the Rails server", timeout: 90) { (Net::HTTP.get_response(URI("http://127.0.0.1:#{port}/up")) rescue nil)&.code == "200" }
      Capybara.app_host = "http://127.0.0.1:#{port}"
      Capybara.run_server = false
      Capybara.session_name = :mission_control
      yield
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

  def start_worker(*options) = @processes << app.spawn("bin/bobbin", "work", "--threads", "2", *options, log: app.path("log/mc-worker.log"))

  # The app's FlakyJob rows by their argument: [state, operation, operated_by, operated_at].
  def flaky_rows
    JSON.parse(app.run!("bin/rails", "runner", <<~RUBY).lines.last)
      puts(Bobbin::JobRecord.where(class_name: "FlakyJob").to_h do |j|
        [ JSON.parse(j.arguments)["arguments"][0], [ j.state, j.operation, j.operated_by, j.operated_at&.utc&.iso8601(6) ] ]
      end.to_json)
    RUBY
  end

  # Asserts Mission Control did `operation` to the job of `row` (see flaky_rows), leaving it `state`, at or after `since`.
  def assert_operated(row, state, operation, since)
    assert_equal [ state, operation, "mission_control" ], row.first(3)
    assert_operator Time.iso8601(row[3]), :>=, since.floor, "operated_at is when Mission Control acted"
  end

  test "Mission Control lists Bobbin's queues and failed jobs, and its Retry makes a failed job succeed", long: true do
    with_mission_control
    FileUtils.rm_f([ app.path("tmp/flaky-ok"), app.path("tmp/mc-retried") ])
    app.run!("bin/rails", "runner", 'Bobbin::JobRecord.delete_all; FlakyJob.perform_later("mc-retried"); FileJob.set(queue: "later", wait: 3600).perform_later("x")')
    app.run!("bin/bobbin", "work", "--threads", "2", "--drain")
    assert_match(/state=failed/, app.run!("bin/rails", "runner", 'puts "state=#{Bobbin::JobRecord.find_by(class_name: "FlakyJob").state}"'))

    serving_mission_control do
      start_worker("--queues", "default")
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

      # A recurring task's page lists its runs whatever their state: a finished one is not "Running for" (Mission
      # Control says so of any job that has a start time).
      app.run!("bin/rails", "runner", <<~RUBY)
        now = Time.now.utc
        Bobbin::RecurringTask.create!(key: "mc_hourly", schedule: "every hour", class_name: "FlakyJob", created_at: now, updated_at: now)
        Bobbin::RecurringRun.create!(task_key: "mc_hourly", run_at: now, job_id: Bobbin::JobRecord.find_by(class_name: "FlakyJob").id, created_at: now)
      RUBY
      visit "/jobs" # the recurring tasks live under the application's path: follow Mission Control's own links
      click_link "Recurring tasks"
      click_link "mc_hourly"
      assert_text "FlakyJob"
      assert_text "Finished"
      assert_no_text "Running for"
      # Run now: the adapter handed back the job's id where Mission Control wants the job, and its page failed (500)
      # with the job enqueued all the same (a trial). It now goes on to the job's page.
      click_button "Run now"
      assert_text "Enqueued recurring task mc_hourly"
      assert_text "FlakyJob"
      assert_equal "2", app.run!("bin/rails", "runner", 'puts Bobbin::RecurringRun.where(task_key: "mc_hourly").where.not(job_id: nil).count').lines.last.strip
    end
  end

  # Mission Control links each job to its queue, which it looks up by name in the adapter's queue list: a finished or
  # discarded job whose queue had nothing waiting, running or failed made its list and its page fail (500).
  test "Mission Control shows finished and discarded jobs whose queue has nothing waiting, running or failed", long: true do
    with_mission_control
    ids = JSON.parse(app.run!("bin/rails", "runner", <<~RUBY).lines.last)
      Bobbin::JobRecord.delete_all
      Bobbin::QueuePause.delete_all
      finished = FileJob.perform_later("mc-finished")
      discarded = FileJob.set(queue: "drained").perform_later("mc-discarded")
      Bobbin::Operator.discard(discarded.provider_job_id, by: "test")
      puts [ finished.job_id, discarded.job_id ].to_json
    RUBY
    app.run!("bin/bobbin", "work", "--threads", "2", "--drain")
    assert_equal %w[discarded succeeded], JSON.parse(app.run!("bin/rails", "runner", "puts Bobbin::JobRecord.order(:state).pluck(:state).to_json").lines.last)

    # One failed row whose arguments are not JSON, or whose payload's arguments are not a list, made the whole Failed
    # list and its own page fail (500; a trial): they show what there is.
    broken = JSON.parse(app.run!("bin/rails", "runner", <<~RUBY).lines.last)
      now = Time.now.utc
      failed = { queue: "default", class_name: "FileJob", state: "failed", attempts: 1, max_attempts: 1, enqueued_at: now, run_at: now,
                 finished_at: now, last_error_class: "RuntimeError", last_error_message: "boom" }
      not_json = Bobbin::JobRecord.create!(failed.merge(arguments: "{not json")).id
      not_a_list = Bobbin::JobRecord.create!(failed.merge(arguments: { job_class: "FileJob", job_id: "mc-not-a-list", arguments: "oops" }.to_json,
                                                          active_job_id: "mc-not-a-list"))
      puts [ "bobbin-\#{not_json}", "mc-not-a-list" ].to_json
    RUBY

    serving_mission_control do
      paths = [ "/jobs/finished/jobs", "/jobs/finished/jobs?filter%5Bqueue_name%5D=default", "/jobs/jobs/#{ids[0]}", "/jobs/jobs/#{ids[1]}",
                "/jobs/queues/default", "/jobs/queues/drained", "/jobs/failed/jobs", "/jobs/jobs/#{broken[0]}", "/jobs/jobs/#{broken[1]}" ]
      codes = paths.to_h { |path| [ path, Net::HTTP.get_response(URI("#{Capybara.app_host}#{path}")).code ] }
      assert_equal paths.to_h { |path| [ path, "200" ] }, codes
      visit "/jobs/finished/jobs"
      assert_selector "tr.job", text: "FileJob", count: 1
      click_link "default"
      assert_text "default"
      visit "/jobs/jobs/#{ids[1]}"
      assert_text "drained"
      visit "/jobs"
      assert_text "drained"
    end
  end

  # Mission Control 1.3.1 drops a date range from its bulk buttons' URLs (it writes filter[enqueued_at]=RANGE but
  # reads filter[enqueued_at_start]), so the pages select by queue and class; the date window is its Ruby API's.
  test "Mission Control's Discard, Discard selection, date-filtered discard_all and Retry all act on exactly the failed jobs they select", long: true do
    with_mission_control
    names = %w[mc-one mc-kept mc-mail-1 mc-mail-2 mc-archive-new mc-archive-old]
    FileUtils.rm_f(names.map { |name| app.path("tmp/#{name}") } << app.path("tmp/flaky-ok"))
    app.run!("bin/rails", "runner", <<~RUBY)
      Bobbin::JobRecord.delete_all
      %w[mc-one mc-kept].each { |name| FlakyJob.perform_later(name) }
      %w[mc-mail-1 mc-mail-2].each { |name| FlakyJob.set(queue: "mail").perform_later(name) }
      %w[mc-archive-new mc-archive-old].each { |name| FlakyJob.set(queue: "archive").perform_later(name) }
      Bobbin::JobRecord.where("arguments LIKE '%mc-archive-old%'").update_all(enqueued_at: 2.days.ago)
    RUBY
    app.run!("bin/bobbin", "work", "--threads", "2", "--drain")
    untouched = [ "failed", nil, nil, nil ]

    serving_mission_control do
      visit "/jobs/failed/jobs"
      assert_selector "tr.job", count: 6
      since = Time.now.utc
      within("tr.job", text: "mc-one") { accept_confirm { click_button "Discard" } }
      assert_text "Discarded job"
      assert_selector "tr.job", count: 5
      rows = flaky_rows
      assert_operated(rows["mc-one"], "discarded", "discarded", since)
      assert_equal [ untouched ] * 5, rows.except("mc-one").values, "only the job discarded"

      fill_in "Queue name", with: "mail" # Mission Control submits its filter form on change
      assert_text "2 jobs found"
      assert_selector "tr.job", count: 2
      since = Time.now.utc
      accept_confirm { click_button "Discard selection" }
      assert_text "Discarded 2 jobs"
      assert_selector "tr.job", count: 3
      rows = flaky_rows
      %w[mc-mail-1 mc-mail-2].each { |name| assert_operated(rows[name], "discarded", "discarded", since) }
      assert_equal [ untouched ] * 3, rows.values_at("mc-kept", "mc-archive-new", "mc-archive-old"), "other queues: not selected"

      since = Time.now.utc
      app.run!("bin/rails", "runner", 'ActiveJob::Base.jobs.failed.where(queue_name: "archive", enqueued_at: 1.day.ago..).discard_all')
      rows = flaky_rows
      assert_operated(rows["mc-archive-new"], "discarded", "discarded", since)
      assert_equal untouched, rows["mc-archive-old"], "enqueued before the window: not selected"

      File.write(app.path("tmp/flaky-ok"), "")
      visit "/jobs/failed/jobs"
      assert_selector "tr.job", count: 2
      since = Time.now.utc
      click_button "Retry all"
      assert_text "Retried 2 jobs"
      assert_selector "tr.job", count: 0
      retried = %w[mc-kept mc-archive-old]
      rows = flaky_rows
      retried.each { |name| assert_operated(rows[name], "ready", "retried", since) }
      start_worker # every queue
      wait_for("the retried jobs to run", timeout: 60) { retried.all? { |name| File.exist?(app.path("tmp/#{name}")) } }
      rows = wait_for("their outcomes", timeout: 30, interval: 0.5) { flaky_rows.then { |r| r if r.values_at(*retried).all? { |row| row[0] == "succeeded" } } }
      retried.each { |name| assert_operated(rows[name], "succeeded", "retried", since) }
      (names - retried).each do |name|
        assert_equal [ "discarded", "discarded", "mission_control" ], rows[name].first(3), "#{name}: Retry all leaves discarded jobs"
        refute File.exist?(app.path("tmp/#{name}")), "#{name} never ran"
      end
    end
  end

  # Mission Control's Ruby API (`ActiveJob.jobs`, as in a console): a bulk action covers exactly what the relation
  # lists. Its scheduled_at, recurring task, limit and offset were dropped from the action: each discarded or retried
  # every failed job (a review, 2 of 2).
  test "Mission Control's discard_all, retry_all and count on a relation narrowed by scheduled_at, a recurring task, limit or offset cover exactly its jobs", long: true do
    with_mission_control
    File.write(app.path("tmp/mc_narrowed.rb"), <<~RUBY) # a file: an error in it is shown with its line, not as a bad command

      Bobbin::JobRecord.delete_all
      Bobbin::RecurringRun.delete_all
      now = Time.now.utc.floor
      failed = ->(name, finished, run_at = now) do
        Bobbin::JobRecord.create!(queue: "default", class_name: "FlakyJob", arguments: [ name ].to_json, priority: 0, state: "failed",
                                  run_at: run_at, attempts: 1, max_attempts: 1, enqueued_at: now, finished_at: finished).id
      end
      ids = Array.new(6) { |i| failed.("plain-\#{i}", now - i) } # finished newest first: Mission Control lists failed jobs so
      early = [ failed.("early-0", now - 60, now - 7200), failed.("early-1", now - 61, now - 7200) ]
      nightly = [ failed.("nightly-0", now - 62), failed.("nightly-1", now - 63) ]
      nightly.each_with_index { |id, i| Bobbin::RecurringRun.create!(task_key: "nightly", run_at: now - 86_400 * (i + 1), job_id: id, created_at: now) }
      state = -> { Bobbin::JobRecord.order(:id).pluck(:id, :state).to_h }
      jobs = ActiveJob::Base.jobs.failed
      out = { "ids" => ids, "early" => early, "nightly" => nightly }
      out["scheduled_count"] = jobs.where(scheduled_at: (now - 3 * 3600)..(now - 3600)).count
      jobs.where(scheduled_at: (now - 3 * 3600)..(now - 3600)).discard_all
      out["after_scheduled"] = state.()
      jobs.where(recurring_task_id: "nightly").retry_all
      out["after_recurring"] = state.()
      out["limited_count"] = [ jobs.limit(3).count, jobs.offset(4).count, jobs.limit(3).offset(4).count ]
      out["listed"] = jobs.limit(2).offset(1).map(&:provider_job_id)
      jobs.limit(2).offset(1).discard_all
      out["after_paged"] = state.()
      jobs.offset(3).retry_all
      out["after_offset"] = state.()
      puts out.to_json
    RUBY
    result = JSON.parse(app.run!("bin/rails", "runner", "tmp/mc_narrowed.rb").lines.last)
    ids, early, nightly = result.values_at("ids", "early", "nightly")
    states = ->(key) { result[key].transform_keys(&:to_i) }
    assert_equal 2, result["scheduled_count"]
    assert_equal early.to_h { [ _1, "discarded" ] }, states.("after_scheduled").select { |_, state| state != "failed" }
    assert_equal nightly.to_h { [ _1, "ready" ] }, states.("after_recurring").select { |_, state| state == "ready" }
    assert_equal ids.to_h { [ _1, "failed" ] }, states.("after_recurring").slice(*ids), "the six others still failed"
    assert_equal [ 3, 2, 2 ], result["limited_count"], "six failed: three of them, the two from the fifth, two from the fifth"
    assert_equal ids[1, 2], result["listed"], "newest finished first, from the second"
    assert_equal ids[1, 2].to_h { [ _1, "discarded" ] }, states.("after_paged").slice(*ids).select { |_, state| state == "discarded" }
    assert_equal [ ids[5] ], states.("after_offset").slice(*ids).select { |_, state| state == "ready" }.keys,
                 "four failed left (0, 3, 4, 5): from the fourth, the oldest"
  end

  # Scheduled jobs are stored ready or blocked; a page of them is found per state and merged (Operator::Page.scheduled_first)
  # instead of sorting every scheduled job: its offset and limit still count in run_at order across both states.
  test "Mission Control's scheduled jobs page by run_at across ready and blocked jobs, its offset and limit kept", long: true do
    with_mission_control
    File.write(app.path("tmp/mc_scheduled.rb"), <<~RUBY)
      Bobbin::JobRecord.delete_all
      base = Time.now.utc.floor + 3600
      ids = Array.new(10) do |i|
        Bobbin::JobRecord.create!(queue: "default", class_name: "FlakyJob", arguments: [ "s-\#{i}" ].to_json, priority: 0,
                                  state: i % 3 == 1 ? "blocked" : "ready", run_at: base + i / 2, attempts: 0, max_attempts: 1,
                                  enqueued_at: base - 3600).id
      end
      jobs = ActiveJob::Base.jobs.scheduled
      puts({ "ids" => ids, "page" => jobs.limit(3).offset(2).map(&:provider_job_id), "first" => jobs.limit(4).map(&:provider_job_id),
             "count" => jobs.count, "page_count" => jobs.limit(3).offset(8).count }.to_json)
    RUBY
    result = JSON.parse(app.run!("bin/rails", "runner", "tmp/mc_scheduled.rb").lines.last)
    ids = result["ids"]
    assert_equal ids[2, 3], result["page"], "the third to fifth by run_at, then id, whichever their state"
    assert_equal ids[0, 4], result["first"]
    assert_equal [ 10, 2 ], result.values_at("count", "page_count")
  end
end
