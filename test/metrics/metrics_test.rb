# frozen_string_literal: true

require_relative "../operator/operator_helper"
require_relative "../cli/cli_helper"
require "rack"
require "rack/mock"
require "net/http"

# The Prometheus exposition: what it reports from the database, and the two ways it is served (the dashboard's
# /metrics behind its auth hook, and `bobbin metrics` as its own process).
class MetricsTest < Bobbin::TestCase
  include OperatorHelper
  include CLIHelper

  setup { Bobbin::Operator::Stats.forget_throughput } # an earlier test's rows, gone now, in the last minute's kept counts

  # { "name{labels}" => value } from the exposition text.
  def samples(text) = text.lines.grep_v(/\A#/).to_h { |line| name, value = line.rpartition(" ").values_at(0, 2); [ name, Float(value) ] }

  test "jobs by state and queue, queue latency and pause, last minute's outcomes, and each process's numbers" do
    now = Time.now.utc
    insert_jobs(3, queue: "mail", run_at: now - 90)
    insert_jobs(2, queue: "mail", run_at: now + 600)
    insert_jobs(4, queue: "llm", **failed_attributes(Time.at((now.to_i / 60 - 1) * 60 + 5).utc))
    insert_jobs(6, queue: "llm", state: "succeeded", finished_at: Time.at((now.to_i / 60 - 1) * 60 + 10).utc)
    Bobbin::Operator.pause("mail")
    Bobbin::ProcessRecord.register(kind: "worker", name: "llm-pool",
                                   metadata: { mode: "fibers", capacity: 200, busy: 17, queued: 3, rss_kb: 102_400, db_pool: 4, db_in_use: 1 })
    Bobbin::ProcessRecord.where(name: "llm-pool").update_all(loop_lag_ms: 4, max_loop_lag_ms: 250, stalls: 2)

    text = Bobbin::Metrics.text
    assert_match(/^# TYPE bobbin_jobs gauge$/, text)
    assert_match(/^# TYPE bobbin_process_stalls_total counter$/, text)
    values = samples(text)
    assert_equal 3.0, values['bobbin_jobs{state="ready"}']
    assert_equal 2.0, values['bobbin_jobs{state="scheduled"}']
    assert_equal 4.0, values['bobbin_jobs{state="failed"}']
    assert_equal 3.0, values['bobbin_queue_jobs{queue="mail",state="ready"}']
    assert_equal 2.0, values['bobbin_queue_jobs{queue="mail",state="scheduled"}']
    assert_equal 4.0, values['bobbin_queue_jobs{queue="llm",state="failed"}']
    assert_operator values['bobbin_queue_latency_seconds{queue="mail"}'], :>=, 89
    assert_equal 1.0, values['bobbin_queue_paused{queue="mail"}']
    assert_equal 0.0, values['bobbin_queue_paused{queue="llm"}']
    assert_equal 6.0, values['bobbin_jobs_finished_last_minute{outcome="succeeded"}']
    assert_equal 4.0, values['bobbin_jobs_finished_last_minute{outcome="failed"}']

    process = values.select { |name, _| name.start_with?("bobbin_process_") && name.include?('name="llm-pool"') }
    by_metric = process.transform_keys { |name| name[/\A\w+/] }
    assert_equal({ "bobbin_process_capacity" => 200.0, "bobbin_process_busy" => 17.0, "bobbin_process_queued" => 3.0,
                   "bobbin_process_resident_memory_bytes" => 104_857_600.0, "bobbin_process_db_connections" => 4.0,
                   "bobbin_process_db_connections_in_use" => 1.0, "bobbin_process_loop_lag_seconds" => 0.004,
                   "bobbin_process_max_loop_lag_seconds" => 0.25, "bobbin_process_stalls_total" => 2.0 }, by_metric.except("bobbin_process_heartbeat_age_seconds"))
    assert_match(/os_pid="#{Process.pid}"/, process.keys.first)
    assert_match(/mode="fibers"/, process.keys.first)
  end

  test "a scrape reports the database as it is now, whatever data store the app configured for its own metrics" do
    require "prometheus/client"
    require "prometheus/client/data_stores/direct_file_store"
    app_store = Prometheus::Client.config.data_store
    Dir.mktmpdir do |dir|
      # prometheus-client's store for multi-process servers (Puma's workers), set by the app for its own metrics.
      Prometheus::Client.config.data_store = Prometheus::Client::DataStores::DirectFileStore.new(dir: dir)
      reports = insert_jobs(3, queue: "reports")
      assert_equal 3.0, samples(Bobbin::Metrics.text)['bobbin_queue_jobs{queue="reports",state="ready"}']

      Bobbin::JobRecord.where(id: reports).delete_all
      insert_jobs(1, queue: "mail")
      values = samples(Bobbin::Metrics.text)
      assert_equal 1.0, values['bobbin_queue_jobs{queue="mail",state="ready"}']
      assert_equal 1.0, values['bobbin_jobs{state="ready"}']
      assert_empty values.keys.grep(/reports/), "a queue emptied since the last scrape is still reported: #{values.keys.grep(/reports/)}"
      assert_empty Dir.children(dir), "the scrapes wrote into the app's metric files"
    end
  ensure
    Prometheus::Client.config.data_store = app_store
  end

  test "the dashboard serves it at /metrics behind its auth hook" do
    insert_jobs(2)
    app = Bobbin::Dashboard.new(environment: "production", auth: ->(request) { request.get_header("HTTP_AUTHORIZATION") == "Bearer scrape" })
    assert_equal 403, Rack::MockRequest.new(app).get("/metrics").status
    response = Rack::MockRequest.new(app).get("/metrics", "HTTP_AUTHORIZATION" => "Bearer scrape")
    assert_equal 200, response.status
    assert_match %r{\Atext/plain; version=0\.0\.4}, response.headers["content-type"]
    assert_equal 2.0, samples(response.body)['bobbin_jobs{state="ready"}']
  end

  # Its hook is documented as the dashboard's, which refuses a blank name: the exposition served a REMOTE_USER left empty.
  test "the exposition's auth hook refuses as the dashboard's does: false, nil, or a blank name" do
    app = Bobbin::Metrics.rack_app(auth: ->(request) { request.env["REMOTE_USER"] })
    scrape = ->(user) { Rack::MockRequest.new(app).get("/metrics", "REMOTE_USER" => user) }
    [ nil, "", "  " ].each { |user| assert_equal [ 403, "Access denied.\n" ], [ scrape.(user).status, scrape.(user).body ], user.inspect }
    assert_equal 200, scrape.("prometheus").status
    assert_equal 200, Rack::MockRequest.new(Bobbin::Metrics.rack_app(auth: ->(_) { true })).get("/metrics").status
  end

  test "with Bobbin's database unreachable, the exposition answers 503 without naming it, and 200 once it is back" do
    app = Bobbin::Metrics.rack_app
    Dir.mktmpdir("bobbin-metrics") do |dir|
      Bobbin::Record.establish_connection(unopenable_sqlite_url(dir))
      response = Rack::MockRequest.new(app).get("/")
      assert_equal [ 503, "5" ], [ response.status, response.headers["retry-after"] ]
      refute_match(/#{dir}|jobs\.sqlite3/, response.body)
    ensure
      Bobbin::Record.remove_connection
    end
    assert_equal 200, Rack::MockRequest.new(app).get("/").status
  end

  test "bobbin metrics serves the exposition from its own process behind its token, and asks for one off loopback" do
    insert_jobs(5, queue: "webhooks")
    port = closed_port
    env = { "DATABASE_URL" => TestDatabase.url_with_pool, "RACK_ENV" => "production" }
    quiet = "tmp/log-elsewhere-#{Process.pid}.rb" # as a Rails app's logger does
    File.write(quiet, "Bobbin.config.logger = Logger.new(File::NULL)\n")
    output = "tmp/metrics-output-#{Process.pid}.log"
    pid = Process.spawn(env, *ruby, File.join(ROOT, "exe/bobbin"), "metrics", "-r", quiet, "--port", port.to_s, "--auth-token", "scrape",
                        chdir: ROOT, out: output, err: File::NULL, pgroup: true)
    ensure_killed(pid) do
      scrape = lambda do |password|
        request = Net::HTTP::Get.new("/metrics")
        request.basic_auth("prometheus", password) if password
        Net::HTTP.start("127.0.0.1", port) { |http| http.request(request) }
      end
      response = wait_for("bobbin metrics to listen", timeout: 60) { scrape.(nil) rescue nil }
      assert_equal [ "401", 'Basic realm="bobbin"' ], [ response.code, response["www-authenticate"] ]
      refute_match(/bobbin_/, response.body)
      response = scrape.("wrong")
      assert_equal [ "401", 'Basic realm="bobbin"' ], [ response.code, response["www-authenticate"] ], "asked again"
      response = scrape.("scrape")
      assert_equal "200", response.code
      assert_equal 5.0, samples(response.body)['bobbin_queue_jobs{queue="webhooks",state="ready"}']
      assert_includes File.read(output), "bobbin metrics on http://127.0.0.1:#{port}/ (Ctrl-C stops it)", "said in the terminal, its log being elsewhere"
    end

    status, _, err = run_bobbin("metrics", "--host", "0.0.0.0", "--port", closed_port.to_s)
    assert_equal 78, status.exitstatus, err
    assert_match(/bobbin metrics on 0\.0\.0\.0 is reachable from other machines: give it --auth-token TOKEN/, err)
  ensure
    FileUtils.rm_f([ quiet, output ].compact)
  end

  # A failed read other than a lost connection (a statement timeout, a table gone) was left to Puma: its page with the
  # backtrace and the SQL to whoever scraped, or in production an empty 500, and in neither case a line in any log.
  test "bobbin metrics answers an unexpected error with a plain 500 and logs it with its backtrace" do
    port = closed_port
    output = "tmp/metrics-error-#{Process.pid}.log"
    pid = Process.spawn({ "DATABASE_URL" => TestDatabase.url_with_pool }, *ruby, File.join(ROOT, "exe/bobbin"), "metrics", "--port", port.to_s,
                        chdir: ROOT, out: output, err: output, pgroup: true)
    ensure_killed(pid) do
      assert_equal "200", wait_for("bobbin metrics to listen", timeout: 60) { Net::HTTP.get_response("127.0.0.1", "/metrics", port) rescue nil }.code
      Bobbin::Record.connection.execute("ALTER TABLE bobbin_pauses RENAME TO bobbin_pauses_away") # every queues read fails
      renamed = true
      response = Net::HTTP.get_response("127.0.0.1", "/metrics", port)
      assert_equal [ "500", "Something went wrong; the server's log has the details.\n" ], [ response.code, response.body ]
      log = wait_for("the error in the log", timeout: 10) { File.read(output).then { |text| text if text.include?(" failed: ") } }
      assert_match(/bobbin metrics: GET \/metrics failed: ActiveRecord::StatementInvalid: .*bobbin_pauses/, log)
      assert_match(%r{lib/bobbin/operator/stats\.rb:\d+}, log, "with its backtrace")
    ensure
      Bobbin::Record.connection.execute("ALTER TABLE bobbin_pauses_away RENAME TO bobbin_pauses") if renamed
    end
  ensure
    Bobbin::QueuePause.reset_column_information
    FileUtils.rm_f(output)
  end

  test "bobbin metrics without a token answers only requests from this machine naming it, with no proxy in between" do
    app = Bobbin::Dashboard::Server.new(port: 9394, host: "127.0.0.1", name: "metrics") { |auth| Bobbin::Metrics.rack_app(auth: auth) }.app
    scrape = ->(host, ip = "127.0.0.1", **headers) { Rack::MockRequest.new(app).get("/metrics", "HTTP_HOST" => host, "REMOTE_ADDR" => ip, **headers) }
    [ "localhost:9394", "127.0.0.1:9394", "[::1]:9394", "LOCALHOST" ].each { |host| assert_equal 200, scrape.(host).status, host }
    assert_equal 200, scrape.("localhost:9394", "::1").status
    response = scrape.("rebound.example:9394")
    assert_equal 403, response.status, "a name rebound to 127.0.0.1 (DNS rebinding)"
    assert_equal "bobbin metrics without --auth-token answers requests from this machine to localhost, 127.0.0.1 or [::1] only, with no proxy in between.\n",
                 response.body
    # An nginx on this machine forwarding to it (Host rewritten to the upstream's) published the metrics (a trial).
    %w[HTTP_X_REAL_IP HTTP_X_FORWARDED_FOR HTTP_FORWARDED HTTP_X_FORWARDED HTTP_X_ORIGINAL_FORWARDED_FOR HTTP_FORWARDED_FOR HTTP_X_ORIGINATING_IP].each do |header|
      assert_equal 403, scrape.("127.0.0.1:9394", "127.0.0.1", header => "203.0.113.7").status, header
    end
    assert_equal 403, scrape.("localhost:9394", "10.0.0.5").status, "another machine's address"
  end

  test "an empty --auth-token is refused as the server starts (an unset variable matched a request with no credentials)" do
    [ "", "  " ].each do |token|
      error = assert_raises(Bobbin::ConfigurationError) { Bobbin::Dashboard::Server.new(port: 9394, host: "0.0.0.0", token: token, name: "metrics") { flunk } }
      assert_equal "bobbin metrics: --auth-token (or BOBBIN_AUTH_TOKEN) is empty (an unset variable?); give it a secret, " \
                   "or leave the option out and bind 127.0.0.1", error.message
    end
    app = Bobbin::Dashboard::Server.new(port: 9394, host: "0.0.0.0", token: "s3cret", name: "metrics") { |auth| Bobbin::Metrics.rack_app(auth: auth) }.app
    basic = ->(password) { "Basic #{[ "prometheus:#{password}" ].pack('m0')}" }
    scrape = ->(**headers) { Rack::MockRequest.new(app).get("/metrics", "HTTP_HOST" => "jobs.example:9394", "REMOTE_ADDR" => "10.0.0.5", **headers).status }
    assert_equal [ 401, 401, 200 ], [ scrape.(), scrape.("HTTP_AUTHORIZATION" => basic.("")), scrape.("HTTP_AUTHORIZATION" => basic.("s3cret")) ]
  end

  test "bobbin metrics answers with nosniff, as the dashboard does: a queue named like markup is never read as a page" do
    insert_jobs(1, queue: "<script>alert(1)</script>")
    response = Rack::MockRequest.new(Bobbin::Metrics.rack_app).get("/metrics")
    assert_equal 200, response.status
    assert_includes response.body, 'queue="<script>alert(1)</script>"'
    assert_equal "nosniff", response.headers["x-content-type-options"]
  end

  test "a queue name that is not UTF-8 is reported with its bad bytes replaced, and costs no other metric" do
    skip_unless_invalid_utf8_kept
    insert_invalid_utf8_job
    insert_jobs(2, queue: "mail")
    values = samples(Bobbin::Metrics.text)
    assert_equal 1.0, values["bobbin_queue_jobs{queue=\"bad\uFFFD\",state=\"failed\"}"]
    assert_equal 2.0, values['bobbin_queue_jobs{queue="mail",state="ready"}']
    assert_equal 1.0, values['bobbin_jobs{state="failed"}']
    assert_equal 200, Rack::MockRequest.new(Bobbin::Metrics.rack_app).get("/metrics").status
  end

  test "the help of the per-state gauge says counts above 10,000 are estimates" do
    assert_match(/^# HELP bobbin_jobs .*above 10,000 is an estimate on PostgreSQL/, Bobbin::Metrics.text)
  end

  # Failed jobs over 10,000 were the planner's estimate on PostgreSQL while the same scrape counted each queue's exactly:
  # 99,506 failed beside queues holding 100,000 (a review), here 12,000 failed as last analyzed beside the 11,000 left.
  # Waiting, running and failed jobs are counted once, by queue, and each state's total is their sum.
  test "jobs by state waiting, running or failed are the exact sum of their queues' counts, above 10,000 too" do
    over = Bobbin::Operator::Stats::EXACT_UP_TO + 2_000
    ids = insert_jobs(over, queue: ->(i) { "q#{i % 3}" }, **failed_attributes)
    insert_jobs(2, queue: "q0", run_at: Time.now.utc + 600)
    Bobbin::JobRecord.connection.execute("ANALYZE bobbin_jobs") if postgres?
    Bobbin::JobRecord.where(id: ids.first(1_000)).delete_all # fewer than autovacuum's analyze threshold: the statistics stay
    values = samples(Bobbin::Metrics.text)
    assert_equal over - 1_000.0, values['bobbin_jobs{state="failed"}']
    assert_equal over - 1_000.0, values.sum { |name, value| name.match?(/\Abobbin_queue_jobs\{.*state="failed"\}\z/) ? value : 0 }
    assert_equal [ 2.0, 0.0, 0.0 ], values.values_at('bobbin_jobs{state="scheduled"}', 'bobbin_jobs{state="ready"}', 'bobbin_jobs{state="succeeded"}')
  end
end
