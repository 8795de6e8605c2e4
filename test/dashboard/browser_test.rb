# frozen_string_literal: true

require_relative "browser_helper"

# What an operator does in the dashboard, in a real browser, against the real database and a real worker.
class DashboardBrowserTest < BrowserTestCase
  test "overview, filter failed jobs, open one, retry it and see it succeed under a worker", long: true do
    insert_jobs(5, state: "succeeded", attempts: 1, finished_at: Time.now.utc - 30)
    insert_jobs(3, queue: "mail", class_name: "SleepJob", arguments: ->(i) { JSON.generate([ 0, "mail-#{i}" ]) }, **failed_attributes,
                last_error_message: "smtp timeout", last_error_backtrace: "app/jobs/mail_job.rb:12:in 'deliver'\napp/jobs/mail_job.rb:5:in 'perform'")
    insert_jobs(2, queue: "llm", run_at: Time.now.utc + 600)
    visit "/"
    assert_selector ".card.failed .value", text: "3"
    assert_selector ".card.scheduled .value", text: "2"
    assert_selector "svg.chart rect.ok"
    screenshot("overview")

    click_link "Failed"
    select "failed", from: "State"
    fill_in "Queue", with: "mail"
    fill_in "Search", with: "smtp"
    click_button "Filter"
    assert_selector "table.jobs tbody tr", count: 3
    assert_text "RuntimeError: smtp timeout"
    screenshot("failed")

    first("table.jobs tbody tr td a").click
    assert_selector "h1", text: "SleepJob"
    assert_selector "#error", text: "RuntimeError: smtp timeout"
    id = page.current_path[%r{/jobs/(\d+)}, 1].to_i
    screenshot("job")

    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("work", "--threads", "2", "--queues", "mail", "--polling-interval", "0.05", log: ENV["BOBBIN_TEST_LOG"] || File::NULL)
      click_button "Retry"
      assert_selector ".notice", text: "Retried."
      wait_for("the retried job to succeed") { Bobbin::JobRecord.find(id).state == "succeeded" }
      visit "/jobs/#{id}"
      assert_selector ".badge.succeeded"
      assert_text "retried by dashboard"
    end
  end

  test "live refresh updates the counts without reloading the page", long: true do
    visit "/"
    assert_selector ".card.failed .value", text: "0"
    page.execute_script("window.bobbinMarker = 42")
    insert_jobs(4, **failed_attributes)
    assert_selector ".card.failed .value", text: "4"
    assert_equal 42, page.evaluate_script("window.bobbinMarker"), "the same page, updated in place"
  end

  test "pause and resume a queue" do
    insert_jobs(4, queue: "mail")
    visit "/queues"
    within("#queue-mail") { click_button "Pause" }
    assert_selector ".notice", text: "Paused mail."
    assert_selector "#queue-mail .badge.paused"
    assert_equal [ "mail" ], Bobbin::QueuePause.pluck(:queue)
    screenshot("queues")
    within("#queue-mail") { click_button "Resume" }
    assert_selector ".notice", text: "Resumed mail."
    assert_empty Bobbin::QueuePause.all
  end

  test "bulk discard the filtered failed jobs" do
    bulk = insert_jobs(60, queue: "bulk", **failed_attributes)
    other = insert_jobs(2, queue: "other", **failed_attributes)
    visit "/jobs?state=failed&queue=bulk"
    assert_selector "table.jobs tbody tr", count: 50
    assert_selector "a[rel=next]"
    accept_confirm { click_button "Discard all matching" }
    assert_selector ".notice", text: "Discarded 60 jobs"
    assert_equal [ "discarded" ], Bobbin::JobRecord.where(id: bulk).distinct.pluck(:state)
    assert_equal [ "failed" ], Bobbin::JobRecord.where(id: other).distinct.pluck(:state)
  end

  test "attacker-controlled arguments and error messages render as text" do
    id = insert_jobs(1, arguments: JSON.generate([ "<script>alert(1)</script>" ]), **failed_attributes,
                     last_error_class: "<i>Evil</i>", last_error_message: %(<img src=x id="injected"><b id="bold">boom</b>)).first
    visit "/jobs/#{id}"
    assert_includes find("#arguments").text, "<script>alert(1)</script>"
    assert_includes find("#error").text, %(<img src=x id="injected"><b id="bold">boom</b>)
    assert_no_selector "#injected"
    assert_no_selector "#bold"
    assert_no_selector "#error i"
    visit "/jobs?state=failed"
    assert_text %(<img src=x id="injected">)
    assert_no_selector "#injected"
    assert_equal 0, page.driver.browser.evaluate("document.querySelectorAll('main script').length")
  end

  test "a POST without the CSRF token is refused and changes nothing" do
    insert_jobs(1, queue: "mail")
    visit "/queues"
    status = page.evaluate_async_script(<<~JS)
      var done = arguments[0];
      fetch("/queues/pause", { method: "POST", body: new URLSearchParams({ queue: "mail" }), credentials: "same-origin" }).then(function (r) { done(r.status); });
    JS
    assert_equal 403, status
    assert_empty Bobbin::QueuePause.all
    forged = page.evaluate_async_script(<<~JS)
      var done = arguments[0], body = new URLSearchParams({ _csrf: "forged", queue: "mail" });
      fetch("/queues/pause", { method: "POST", body: body, credentials: "same-origin" }).then(function (r) { done(r.status); });
    JS
    assert_equal 403, forged
    assert_empty Bobbin::QueuePause.all
  end

  test "in production without an auth hook every page refuses, saying how to configure one" do
    insert_jobs(1, **failed_attributes)
    visit "/prod/"
    assert_selector "#refusal", text: "needs an auth hook outside development"
    assert_no_selector "table"
    visit "/prod/jobs?state=failed"
    assert_selector "#refusal"
    screenshot("refused")
  end

  test "processes page shows a live worker", long: true do
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("work", "--fibers", "10", "--queues", "none", log: File::NULL)
      wait_for("the worker to register") { Bobbin::ProcessRecord.exists? }
      visit "/processes"
      assert_selector "#processes td", text: "fibers"
      assert_selector "#processes td", text: "0/10" # busy/capacity: an idle thread lane adds none
      screenshot("processes")
    end
  end
end
