# frozen_string_literal: true

require "test_helper"
require_relative "rails_app_processes"
require_relative "../operator/operator_helper"

# The dashboard keeps its CSRF key in a session cookie sealed with a secret. In a Rails app served by several processes
# (a clustered Puma's workers, several hosts) each made its own at random unless BOBBIN_DASHBOARD_SECRET was set, and a
# form one process served was refused by another: half the actions failed with 403 behind two workers (a review).
class RailsDashboardSecretTest < Bobbin::TestCase
  include RailsAppProcesses
  include OperatorHelper

  # Serves a page of the dashboard mounted in the dummy app (booted in production) and prints what a browser keeps of
  # it; or, given them in FORM, posts that page's pause form with them and prints the answer's status.
  SCRIPT = <<~RUBY
    require "./config/environment"
    require "rack/mock"
    require "json"
    dashboard = Rack::MockRequest.new(Bobbin::Dashboard.new(auth: ->(_) { "ann" }))
    if (form = ENV["FORM"])
      cookie, token = JSON.parse(form)
      response = dashboard.post("/queues/pause", "HTTP_COOKIE" => cookie, params: { "_csrf" => token, "queue" => "mailers" })
      puts "status=\#{response.status}"
    else
      page = dashboard.get("/queues")
      cookie = page.headers["set-cookie"][/\\Abobbin\\.dashboard=[^;]+/]
      token = page.body[%r{<form method="post" action="/queues/pause"[^>]*><input type="hidden" name="_csrf" value="([^"]+)"}, 1]
      puts "form=\#{JSON.generate([ cookie, token ])}"
    end
  RUBY

  test "a form the dashboard served in one process of a Rails app is accepted by another: the secret comes from the app's secret_key_base", long: true do
    insert_jobs(1, queue: "mailers")
    status, output = run_in_rails_app("-e", SCRIPT, env: "production")
    assert status.success?, output
    form = output[/^form=(.*)$/, 1] or flunk("no form served:\n#{output}")
    assert_not_includes JSON.parse(form), nil, "a session cookie and the pause form's token"

    status, output = run_in_rails_app("-e", SCRIPT, env: "production", variables: { "FORM" => form })
    assert status.success?, output
    assert_equal "302", output[/^status=(\d+)$/, 1], "the other process accepted the form:\n#{output}"
    assert_equal [ "mailers" ], Bobbin::QueuePause.pluck(:queue)
  end
end
