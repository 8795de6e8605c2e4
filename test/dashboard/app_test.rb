# frozen_string_literal: true

require_relative "../operator/operator_helper"
require "rack/mock"

# The dashboard's Rack behaviour without a browser: headers, auth hook, read-only mode, fiber-health columns.
class DashboardAppTest < Bobbin::TestCase
  include OperatorHelper

  def get(app, path) = Rack::MockRequest.new(app).get(path)

  test "every page answers with a strict Content-Security-Policy and no caching" do
    response = get(Bobbin::Dashboard.new(environment: "development"), "/")
    assert_equal 200, response.status
    assert_match(/default-src 'none'; script-src 'self'; style-src 'self'/, response.headers["content-security-policy"])
    assert_match(/frame-ancestors 'none'/, response.headers["content-security-policy"])
    assert_equal "no-store", response.headers["cache-control"]
    assert_equal "nosniff", response.headers["x-content-type-options"]
  end

  test "the auth hook decides, in any environment" do
    seen = []
    app = Bobbin::Dashboard.new(environment: "production", auth: ->(request) { seen << request.path_info; request.params["key"] == "s3cret" && "ann" })
    assert_equal 403, get(app, "/queues").status
    assert_match(/Access denied/, get(app, "/queues?key=wrong").body)
    assert_equal 200, get(app, "/queues?key=s3cret").status
    assert_includes seen, "/queues"
  end

  test "read-only mode shows no action and refuses every POST" do
    id = insert_jobs(1, **failed_attributes).first
    Bobbin::Operator.pause("mail")
    app = Bobbin::Dashboard.new(environment: "development", read_only: true)
    [ "/jobs/#{id}", "/queues", "/jobs?state=failed" ].each do |path|
      body = get(app, path).body
      refute_match(/<form method="post"/, body, path)
      assert_match(/read-only/, body)
    end
    response = Rack::MockRequest.new(app).post("/jobs/#{id}/retry")
    assert_equal 403, response.status
    assert_match(/read-only/, response.body)
    assert_equal "failed", Bobbin::JobRecord.find(id).state
  end

  test "the processes page shows the fiber-health columns once the schema has them" do
    Bobbin::ProcessRecord.register(kind: "worker", name: "w", metadata: { mode: "fibers", capacity: 5, busy: 1 })
    app = Bobbin::Dashboard.new(environment: "development")
    refute_match(/loop lag ms/, get(app, "/processes").body)
    connection = Bobbin::ProcessRecord.connection
    begin
      connection.add_column(:bobbin_processes, :loop_lag_ms, :float)
      Bobbin::ProcessRecord.reset_column_information
      Bobbin::ProcessRecord.update_all(loop_lag_ms: 12.5)
      assert_match(%r{<th class="n">loop lag ms</th>.*<td class="n">12.5</td>}m, get(app, "/processes").body)
    ensure
      connection.remove_column(:bobbin_processes, :loop_lag_ms)
      Bobbin::ProcessRecord.reset_column_information
    end
  end
end
