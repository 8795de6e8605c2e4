# frozen_string_literal: true

require_relative "../operator/operator_helper"
require "rack/mock"
require "rack/urlmap"
require "rack/auth/basic"

# The dashboard's Rack behaviour without a browser: headers, auth hook, read-only mode, fiber-health columns.
class DashboardAppTest < Bobbin::TestCase
  include OperatorHelper

  LOCAL = { "REMOTE_ADDR" => "127.0.0.1", "HTTP_HOST" => "localhost:9292" }.freeze # a request from this machine

  setup { Bobbin::Operator::Stats.forget_throughput } # an earlier test's rows, gone now, in the chart's kept minutes

  def get(app, path) = Rack::MockRequest.new(app).get(path, LOCAL)

  # GETs `page` as a browser would, then POSTs to `action` with that page's session cookie and the CSRF token of the
  # page's form for `token_of` (the action's own form by default), or `token`.
  def post_form(app, page, action, token_of: action, token: nil, params: {})
    page = get(app, page)
    cookie = page.headers["set-cookie"][/\Abobbin\.dashboard=[^;]+/]
    token ||= page.body[/<form method="post" action="#{Regexp.escape(token_of)}"[^>]*><input type="hidden" name="_csrf" value="([^"]+)"/, 1]
    Rack::MockRequest.new(app).post(action, **LOCAL, "HTTP_COOKIE" => cookie, params: { "_csrf" => token, **params })
  end

  # The notice the page a POST's `response` redirects to shows, followed with the session cookie as a browser would.
  def notice_after(app, response)
    cookie = response.headers["set-cookie"][/\Abobbin\.dashboard=[^;]+/]
    Rack::MockRequest.new(app).get(response.location, **LOCAL, "HTTP_COOKIE" => cookie).body[%r{<p class="notice" role="status">(.*?)</p>}, 1]
  end

  test "every page answers with a strict Content-Security-Policy and no caching" do
    response = get(Bobbin::Dashboard.new(environment: "development"), "/")
    assert_equal 200, response.status
    assert_match(/default-src 'none'; script-src 'self'; style-src 'self'/, response.headers["content-security-policy"])
    assert_match(/frame-ancestors 'none'/, response.headers["content-security-policy"])
    assert_equal "DENY", response.headers["x-frame-options"]
    assert_equal "no-store", response.headers["cache-control"]
    assert_equal "nosniff", response.headers["x-content-type-options"]
    head = Rack::MockRequest.new(Bobbin::Dashboard.new(environment: "development")).request("HEAD", "/", LOCAL)
    assert_equal [ 200, "" ], [ head.status, head.body ], "HEAD answers as GET, without the body (uptime checks)"
  end

  # Rack::URLMap (and Roda's or Sinatra's own mounting) hand /jobs to an app mounted there with an empty path: the
  # overview answered an empty 404 there (a trial), where Sidekiq's web UI answers.
  test "mounted under a prefix, the prefix itself leads to the overview" do
    app = Rack::URLMap.new("/jobs" => Bobbin::Dashboard.new(environment: "development"))
    response = Rack::MockRequest.new(app).get("/jobs", LOCAL)
    assert_equal [ 302, "/jobs/" ], [ response.status, response.location ]
    assert_equal 200, Rack::MockRequest.new(app).get("/jobs/", LOCAL).status
  end

  test "the auth hook decides, in any environment" do
    %w[production development test].each do |environment|
      seen = []
      app = Bobbin::Dashboard.new(environment: environment, auth: ->(request) { seen << request.path_info; request.params["key"] == "s3cret" && "ann" })
      assert_equal 403, get(app, "/queues").status, environment
      assert_match(/Access denied/, get(app, "/queues?key=wrong").body)
      assert_equal 200, get(app, "/queues?key=s3cret").status
      assert_includes seen, "/queues"
    end
    # A hook returning a header or a name that is empty (REMOTE_USER set to "" by a proxy) names no operator: refused.
    [ "", "  " ].each { |name| assert_equal 403, get(Bobbin::Dashboard.new(environment: "production", auth: ->(_) { name }), "/queues").status }
  end

  test "without an auth hook outside development and test every page is refused, saying how to add one; its stylesheet is not" do
    app = Bobbin::Dashboard.new(environment: "production")
    response = get(app, "/queues")
    assert_equal 403, response.status
    assert_match(/The Bobbin dashboard needs an auth hook outside development and test \(this is production\)\./, response.body)
    assert_equal 403, get(app, "/metrics").status
    assert_equal 403, get(app, "/assets/secret.rb").status, "only the gem's two assets are outside the check"
    css = get(app, "/assets/app.css")
    assert_equal [ 200, "text/css" ], [ css.status, css.headers["content-type"] ]
  end

  # The dashboard opened before its database had Bobbin's tables (in development after the default production-only
  # install, or before db:prepare) answered a plain 500 whose log said "Could not find table 'bobbin_jobs'" (a trial).
  test "on a database without Bobbin's tables every page says they are missing and what to run" do
    without_bobbin_tables("dashboard_empty") do
      app = Bobbin::Dashboard.new(environment: "development")
      [ "/", "/queues", "/jobs?state=failed", "/processes", "/recurring", "/metrics" ].each do |page|
        response = get(app, page)
        assert_equal 503, response.status, page
        assert_match(/Bobbin&#39;s tables are missing \(bobbin_jobs, bobbin_processes, bobbin_pauses\): run `bobbin migrate` \(in a Rails app: bin\/rails generate bobbin:install, then bin\/rails db:prepare\)/, response.body, page)
      end
    end
    assert_equal 200, get(Bobbin::Dashboard.new(environment: "development"), "/").status
  end

  test "without an auth hook only this machine is served, and only when every environment variable set says development or test" do
    names = %w[BOBBIN_ENV RAILS_ENV RACK_ENV]
    saved = ENV.to_h.slice(*names)
    names.each { |name| ENV.delete(name) }
    from = ->(ip, **headers) { Rack::MockRequest.new(Bobbin::Dashboard.new).get("/queues", "REMOTE_ADDR" => ip, "HTTP_HOST" => "localhost:9292", **headers) }
    assert_equal [ 200, 200 ], [ from.("127.0.0.1").status, from.("::1").status ]
    assert_equal [ 200, 200, 200 ], %w[127.0.0.1:9292 [::1]:9292 LOCALHOST].map { |host| from.("127.0.0.1", "HTTP_HOST" => host).status }
    refused = from.("10.0.0.5")
    assert_equal 403, refused.status
    assert_match(/serves only requests from this machine to localhost, with no proxy in between \(no BOBBIN_ENV, RAILS_ENV or RACK_ENV is set, and the request does not come from this machine, or names another host, or came through a proxy\)/, refused.body)
    assert_equal 403, from.("10.0.0.5", "HTTP_X_FORWARDED_FOR" => "127.0.0.1").status, "Rack would take 127.0.0.1 for the client"
    # A proxy on this machine: each header one may add alone (nginx's common `proxy_set_header X-Real-IP` did, with Host
    # rewritten to the upstream's 127.0.0.1:port) and RFC 7239's.
    { "HTTP_X_FORWARDED_FOR" => "203.0.113.7", "HTTP_FORWARDED" => "for=203.0.113.7", "HTTP_X_REAL_IP" => "203.0.113.7", "HTTP_VIA" => "1.1 nginx",
      "HTTP_X_FORWARDED_HOST" => "jobs.example.com", "HTTP_CF_CONNECTING_IP" => "203.0.113.7", "HTTP_TRUE_CLIENT_IP" => "203.0.113.7",
      "HTTP_X_CLIENT_IP" => "203.0.113.7", "HTTP_X_FORWARDED" => "for=203.0.113.7", "HTTP_X_ORIGINAL_FORWARDED_FOR" => "203.0.113.7",
      "HTTP_FORWARDED_FOR" => "203.0.113.7", "HTTP_X_ORIGINATING_IP" => "203.0.113.7" }.each do |header, value|
      assert_equal 403, from.("127.0.0.1", "HTTP_HOST" => "127.0.0.1:9441", header => value).status, "#{header}: a proxy on this machine"
    end
    assert_equal 403, from.("127.0.0.1", "HTTP_HOST" => "attacker.example:9292").status, "a page on a name rebound to 127.0.0.1 (DNS rebinding)"
    ENV["RACK_ENV"] = "development" # what rackup sets when nothing is: `rackup -o 0.0.0.0` must not open it to all
    assert_equal [ 200, 403 ], [ from.("127.0.0.1").status, from.("10.0.0.5").status ]
    assert_match(/\(this is development, and the request does not come from this machine, or names another host/, from.("10.0.0.5").body)
    ENV["BOBBIN_ENV"] = "production"
    assert_match(/this is production \/ development/, from.("127.0.0.1").body)
  ensure
    names.each { |name| saved&.key?(name) ? ENV[name] = saved[name] : ENV.delete(name) }
  end

  test "mounted in an app with a session of its own (Rails), the dashboard keeps its own: the app's is neither copied nor changed" do
    app_session = { "user_note" => "USER-SESSION-DATA-#{'x' * 5_000}" }
    app = Rack::MockRequest.new(Bobbin::Dashboard.new(environment: "development"))
    id = insert_jobs(1, **failed_attributes).first
    page = app.get("/jobs/#{id}", **LOCAL, "rack.session" => app_session)
    assert_equal 200, page.status, "the app's 5 KB session is not in the dashboard's cookie (past 4 KB every page failed)"
    cookie = page.headers["set-cookie"][/\Abobbin\.dashboard=[^;]+/]
    assert_operator cookie.bytesize, :<, 1_000
    assert_equal [ "user_note" ], app_session.keys, "no CSRF key or notice written into the app's session"
    token = page.body[%r{<form method="post" action="/jobs/#{id}/retry"[^>]*><input type="hidden" name="_csrf" value="([^"]+)"}, 1]
    retried = app.post("/jobs/#{id}/retry", **LOCAL, "HTTP_COOKIE" => cookie, "rack.session" => app_session, params: { "_csrf" => token })
    assert_equal [ 302, "ready" ], [ retried.status, Bobbin::JobRecord.find(id).state ], "the CSRF key comes from its own cookie"
  end

  test "a bulk action is retry or discard, named exactly: any other operation is refused, not taken for discard" do
    ids = insert_jobs(2, **failed_attributes)
    app = Bobbin::Dashboard.new(environment: "development")
    %w[RETRY Retry remove].each do |operation|
      response = post_form(app, "/jobs?state=failed", "/jobs/bulk", params: { "state" => "failed", "operation" => operation })
      assert_equal 400, response.status
      assert_includes CGI.unescapeHTML(response.body), "unknown bulk operation #{operation.inspect}"
    end
    assert_equal [ "failed" ], Bobbin::JobRecord.where(id: ids).distinct.pluck(:state)

    response = post_form(app, "/jobs?state=failed", "/jobs/bulk", params: { "state" => "failed", "operation" => "retry" })
    assert_equal "Retried 2 jobs", CGI.unescapeHTML(notice_after(app, response))
    assert_equal [ "ready" ], Bobbin::JobRecord.where(id: ids).distinct.pluck(:state)
  end

  test "an action's notice shows once on the page it leads to; a notice in a URL is not shown (anyone could send such a link)" do
    id = insert_jobs(1, **failed_attributes).first
    app = Bobbin::Dashboard.new(environment: "development")
    refute_match(/log in again at/, get(app, "/jobs/#{id}?notice=Session+expired:+log+in+again+at+evil.example").body)

    done = post_form(app, "/jobs/#{id}", "/jobs/#{id}/retry")
    assert_equal "/jobs/#{id}", done.location
    cookie = done.headers["set-cookie"][/\Abobbin\.dashboard=[^;]+/]
    shown = Rack::MockRequest.new(app).get(done.location, **LOCAL, "HTTP_COOKIE" => cookie)
    assert_match(%r{<p class="notice" role="status">Retried\.</p>}, shown.body)
    again = Rack::MockRequest.new(app).get(done.location, **LOCAL, "HTTP_COOKIE" => shown.headers["set-cookie"][/\Abobbin\.dashboard=[^;]+/])
    refute_match(/class="notice"/, again.body, "once")
  end

  # Two dashboards in one app (one for admins, one read-only; one per database) each set their session cookie, which
  # holds the CSRF key, at path "/": a visit to one replaced the other's, whose forms were then refused with a 403 (a review).
  test "two dashboards mounted in one app keep a session cookie each: a visit to one leaves the other's forms working" do
    ids = insert_jobs(2, **failed_attributes)
    dashboards = %w[ann bob eve].map { |name| Bobbin::Dashboard.new(environment: "production", auth: ->(_) { name }) }
    app = Rack::MockRequest.new(Rack::URLMap.new("/admin/jobs" => dashboards[0], "/jobs" => dashboards[1], "/jobs/eu" => dashboards[2]))
    jar = {} # a browser's (RFC 6265): a cookie per name and path, sent where its path matches, the longest path first
    browse = lambda do |method, path, params = {}|
      sent = jar.select { |(_, at), _| path == at || path.start_with?(at.chomp("/") + "/") }.sort_by { |(_, at), _| -at.size }.map(&:last)
      response = app.request(method, path, "HTTP_COOKIE" => sent.join("; "), params: params)
      Array(response.headers["set-cookie"]).each { |cookie| jar[[ cookie[/\A[^=]+/], cookie[/; path=([^;]*)/, 1] || "/" ]] = cookie[/\A[^;]+/] }
      response
    end
    token = ->(page, action) { page.body[/<form method="post" action="#{Regexp.escape(action)}"[^>]*><input type="hidden" name="_csrf" value="([^"]+)"/, 1] }

    admin_token = token.(browse.("GET", "/admin/jobs/jobs/#{ids[0]}"), "/admin/jobs/jobs/#{ids[0]}/retry")
    other_token = token.(browse.("GET", "/jobs/jobs/#{ids[1]}"), "/jobs/jobs/#{ids[1]}/retry")
    eu_token = token.(browse.("GET", "/jobs/eu/queues"), "/jobs/eu/queues/pause") # mounted inside the other's path

    retried = browse.("POST", "/admin/jobs/jobs/#{ids[0]}/retry", "_csrf" => admin_token)
    assert_equal [ 302, "ready" ], [ retried.status, Bobbin::JobRecord.find(ids[0]).state ], retried.body
    retried = browse.("POST", "/jobs/jobs/#{ids[1]}/retry", "_csrf" => other_token)
    assert_equal [ 302, "ready" ], [ retried.status, Bobbin::JobRecord.find(ids[1]).state ], retried.body
    paused = browse.("POST", "/jobs/eu/queues/pause", "_csrf" => eu_token, "queue" => "mailers")
    assert_equal [ 302, [ "mailers" ] ], [ paused.status, Bobbin::QueuePause.pluck(:queue) ], paused.body
    assert_equal [ [ "bobbin.dashboard", "/admin/jobs" ], [ "bobbin.dashboard", "/jobs" ], [ "bobbin.dashboard", "/jobs/eu" ] ], jar.keys.sort
    assert_match %r{\Abobbin\.dashboard=[^;]+; path=/;}, get(Bobbin::Dashboard.new(environment: "development"), "/queues").headers["set-cookie"], "not mounted: the whole site"
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
    response = Rack::MockRequest.new(app).post("/jobs/#{id}/retry", LOCAL)
    assert_equal 403, response.status
    assert_match(/This dashboard is read-only\./, response.body)
    assert_equal "failed", Bobbin::JobRecord.find(id).state
  end

  test "a POST needs the CSRF token of its own form: without one, forged, or another form's, it is refused and changes nothing" do
    id = insert_jobs(1, **failed_attributes).first
    app = Bobbin::Dashboard.new(environment: "development")
    refused = Rack::MockRequest.new(app).post("/jobs/#{id}/retry", LOCAL)
    assert_equal 403, refused.status
    assert_match(/CSRF check failed/, refused.body)
    assert_equal 403, post_form(app, "/jobs/#{id}", "/jobs/#{id}/retry", token: "forged").status
    assert_equal 403, post_form(app, "/jobs/#{id}", "/jobs/#{id}/retry", token_of: "/jobs/#{id}/discard").status
    assert_equal "failed", Bobbin::JobRecord.find(id).state
    assert_includes 300..399, post_form(app, "/jobs/#{id}", "/jobs/#{id}/retry").status
    assert_equal "ready", Bobbin::JobRecord.find(id).state
  end

  # Falcon forks a process per CPU, each loading config.ru: without BOBBIN_DASHBOARD_SECRET each made its own secret, and
  # half the actions were refused as "expired" (a trial); the refusal names the variable, and with it set they pass.
  test "a form refused by another process's dashboard says that the secret is per process and which variable to set" do
    id = insert_jobs(1, **failed_attributes).first
    page = get(Bobbin::Dashboard.new(environment: "development", secret: nil), "/jobs/#{id}")
    cookie = page.headers["set-cookie"][/\Abobbin\.dashboard=[^;]+/]
    token = page.body[%r{<form method="post" action="/jobs/#{id}/retry"[^>]*><input type="hidden" name="_csrf" value="([^"]+)"}, 1]
    other = Rack::MockRequest.new(Bobbin::Dashboard.new(environment: "development", secret: nil))
    refused = other.post("/jobs/#{id}/retry", **LOCAL, "HTTP_COOKIE" => cookie, params: { "_csrf" => token })
    assert_equal 403, refused.status
    assert_match(/random to its process \(BOBBIN_DASHBOARD_SECRET is not set\)/, refused.body)

    shared = "s" * 64
    assert_includes 300..399, post_form(Bobbin::Dashboard.new(environment: "development", secret: shared), "/jobs/#{id}", "/jobs/#{id}/retry").status
    forged = post_form(Bobbin::Dashboard.new(environment: "development", secret: shared), "/jobs/#{id}", "/jobs/#{id}/retry", token: "forged")
    assert_equal 403, forged.status
    refute_match(/BOBBIN_DASHBOARD_SECRET/, forged.body, "a secret given: the refusal does not blame it")
  end

  # Rack::Auth::Basic (the README's mount) and `bobbin dashboard --auth-token` read the user name from the Authorization
  # header as binary bytes: a name such as "José" failed every action on SQLite with a 500, the job left as it was.
  test "an operator named by HTTP basic auth with letters beyond ASCII is recorded on the jobs they act on" do
    id = insert_jobs(1, **failed_attributes).first
    login = "Basic #{[ 'José:pw' ].pack('m0')}"
    basic = Rack::Auth::Basic.new(Bobbin::Dashboard.new(environment: "production", auth: ->(request) { request.env["REMOTE_USER"] }), "jobs") { |_, password| password == "pw" }
    token = Bobbin::Dashboard::Server.new(port: 0, host: "127.0.0.1", token: "pw") { |auth| Bobbin::Dashboard.new(environment: "production", auth: auth) }.app
    [ [ basic, "José" ], [ token, "dashboard:José" ] ].each do |app, operator|
      Bobbin::JobRecord.where(id: id).update_all(failed_attributes)
      page = Rack::MockRequest.new(app).get("/jobs/#{id}", **LOCAL, "HTTP_AUTHORIZATION" => login)
      cookie = page.headers["set-cookie"][/\Abobbin\.dashboard=[^;]+/]
      csrf = page.body[%r{<form method="post" action="/jobs/#{id}/retry"[^>]*><input type="hidden" name="_csrf" value="([^"]+)"}, 1]
      retried = Rack::MockRequest.new(app).post("/jobs/#{id}/retry", **LOCAL, "HTTP_AUTHORIZATION" => login, "HTTP_COOKIE" => cookie, params: { "_csrf" => csrf })
      assert_equal 302, retried.status, operator
      assert_equal [ "ready", "retried", operator ], Bobbin::JobRecord.where(id: id).pick(:state, :operation, :operated_by)
    end
  end

  # A 403 for a mistyped password was never asked again: the browser kept sending it until restarted (a trial).
  test "bobbin dashboard --auth-token asks again for wrong credentials; a form without its CSRF token stays refused with the right ones" do
    id = insert_jobs(1, **failed_attributes).first
    app = Bobbin::Dashboard::Server.new(port: 0, host: "127.0.0.1", token: "pw") { |auth| Bobbin::Dashboard.new(environment: "production", auth: auth) }.app
    login = ->(password) { { **LOCAL, "HTTP_AUTHORIZATION" => "Basic #{[ "ann:#{password}" ].pack('m0')}" } }
    [ {}, login.("wrong") ].each do |headers|
      response = Rack::MockRequest.new(app).get("/queues", **LOCAL, **headers)
      assert_equal [ 401, 'Basic realm="bobbin"' ], [ response.status, response.headers["www-authenticate"] ], headers.keys.inspect
    end
    assert_equal 200, Rack::MockRequest.new(app).get("/queues", **login.("pw")).status
    refused = Rack::MockRequest.new(app).post("/jobs/#{id}/retry", **login.("pw"))
    assert_equal [ 403, nil ], [ refused.status, refused.headers["www-authenticate"] ]
    assert_equal "failed", Bobbin::JobRecord.find(id).state
  end

  test "a release the operator layer refuses says why: the job's process is alive" do
    live = Bobbin::ProcessRecord.register(kind: "worker", name: "live")
    id = insert_jobs(1, state: "running", claimed_by: live.id, attempts: 1).first
    app = Bobbin::Dashboard.new(environment: "development")
    assert_includes CGI.unescapeHTML(notice_after(app, post_form(app, "/jobs/#{id}", "/jobs/#{id}/release"))), "Not released: its process is alive by its heartbeat"
    assert_equal "running", Bobbin::JobRecord.find(id).state
  end

  test "the navigation leads to the jobs waiting on a concurrency limit, and marks that page as the one shown" do
    blocked = insert_jobs(1, state: "blocked", concurrency_key: "account-7", concurrency_limit: 1, class_name: "LimitedJob").first
    insert_jobs(1, class_name: "ReadyJob")
    body = get(Bobbin::Dashboard.new(environment: "development"), "/jobs?state=blocked").body
    assert_match(%r{<a href="/jobs\?state=blocked" aria-current="page">Blocked</a>}, body)
    assert_match(%r{href="/jobs/#{blocked}"}, body)
    assert_match(/waiting on account-7 \(limit 1\)/, body, "what it waits on")
    refute_match(/ReadyJob/, body)
  end

  # A retry waiting for its time showed "17.9 s ago" (the run that failed) and no error (a trial).
  test "the scheduled page shows when a waiting retry runs next and the error it retries after" do
    run_at = Time.now.utc.change(usec: 0) + 3600
    id = insert_jobs(1, class_name: "SlowFail", state: "ready", attempts: 1, max_attempts: 3, run_at: run_at, started_at: Time.now.utc - 60,
                        last_error_class: "RuntimeError", last_error_message: "slow <boom>").first
    row = get(Bobbin::Dashboard.new(environment: "development"), "/jobs?state=scheduled").body[%r{<tr>\s*<td class="n"><a href="/jobs/#{id}">.*?</tr>}m]
    assert row, "the retry is listed"
    assert_match(/<time datetime="#{Regexp.escape(run_at.iso8601)}"[^>]*>in (59|60) min<\/time>/, row)
    assert_match(%r{<td class="error">RuntimeError: slow &lt;boom&gt;</td>}, row)
  end

  test "the recurring page shows a task's own queue, and no queue name for a task that leaves it to its job class" do
    now = Time.now.utc
    Bobbin::RecurringTask.create!(key: "nightly", schedule: "every day at 2am", class_name: "ReportJob", queue: "reports", created_at: now, updated_at: now)
    Bobbin::RecurringTask.create!(key: "ticker", schedule: "every second", class_name: "TickJob", created_at: now, updated_at: now)
    body = get(Bobbin::Dashboard.new(environment: "development"), "/recurring").body
    assert_match(%r{<td>nightly</td>.*?<td>reports</td>}m, body)
    assert_match(%r{<td>ticker</td>.*?<td><span class="muted">the job class's</span></td>}m, body, "not 'default': the class may name its own")
  end

  # A row whose schedule this process cannot read (another version's, or written by hand) made the page a 500 (a review).
  test "the recurring page lists a task whose schedule this process cannot read, with no next run, and the others as usual" do
    now = Time.now.utc
    Bobbin::RecurringTask.create!(key: "odd", schedule: "every <blue> moon", class_name: "ReportJob", created_at: now, updated_at: now)
    Bobbin::RecurringTask.create!(key: "ticker", schedule: "every second", class_name: "TickJob", created_at: now, updated_at: now)
    assert_nil Bobbin::RecurringTask.find_by!(key: "odd").next_run_at
    response = get(Bobbin::Dashboard.new(environment: "development"), "/recurring")
    assert_equal 200, response.status
    assert_match(%r{<td>odd</td><td><code>every &lt;blue&gt; moon</code></td>.*?<td>—</td></tr>}m, response.body)
    assert_match(%r{<td>ticker</td>.*?<time datetime=}m, response.body)
  end

  # The page showed a task's last tick but not how its job went: a failing task looked healthy (a trial).
  test "the recurring page shows each task's last job, its state and its error" do
    job, = recurring_with_failed_job("report <broke>")
    body = get(Bobbin::Dashboard.new(environment: "development"), "/recurring").body
    assert_match(%r{<td>nightly</td>.*?<a href="/jobs/#{job}">#{job}</a> <span class="badge[^"]*"[^>]*>failed</span> RuntimeError: report &lt;broke&gt;</td>}m, body)
    assert_match(%r{<td>fresh</td>.*?<span class="muted">—</span></td>}m, body, "a task that never ran has no job")
  end

  # The name goes in a form field: in the path, a browser resolved "." and ".." (and "%2e") before sending the POST.
  test "pause and resume a queue whatever its name: the queue itself, not an escaped or resolved form of it" do
    app = Bobbin::Dashboard.new(environment: "development")
    [ "llm chat", "llm:high/β%", ".", "..", "a/../b" ].each do |name|
      Bobbin::JobRecord.delete_all
      insert_jobs(1, queue: name)
      page = get(app, "/queues").body
      assert_includes page, %(<input type="hidden" name="queue" value="#{CGI.escapeHTML(name)}">)
      response = post_form(app, "/queues", "/queues/pause", params: { "queue" => name })
      assert_equal [ name ], Bobbin::QueuePause.pluck(:queue)
      assert_equal "Paused #{name}.", CGI.unescapeHTML(notice_after(app, response))
      post_form(app, "/queues", "/queues/resume", params: { "queue" => name })
      assert_empty Bobbin::QueuePause.all, "resumed #{name}"
    end
  end

  test "a pause of a name no queue can have, or of a field sent twice as text and list, is a 400 saying why, and pauses nothing" do
    app = Bobbin::Dashboard.new(environment: "development")
    insert_jobs(1, queue: "q") # queues on the page, one paused: their forms carry the tokens
    insert_jobs(1, queue: "r")
    Bobbin.pause("r")
    %w[pause resume].each do |operation|
      response = post_form(app, "/queues", "/queues/#{operation}", params: { "queue" => "q" * 5_000 })
      assert_equal 400, response.status, "its notice overflowed the session cookie: a 500"
      assert_includes CGI.unescapeHTML(response.body), "a queue's name is at most 255 bytes, got 5000"
    end
    page = get(app, "/queues")
    token = page.body[/<form method="post" action="\/queues\/pause"[^>]*><input type="hidden" name="_csrf" value="([^"]+)"/, 1]
    twice = Rack::MockRequest.new(app).post("/queues/pause", **LOCAL, "HTTP_COOKIE" => page.headers["set-cookie"][/\Abobbin\.dashboard=[^;]+/],
                                            input: "_csrf=#{CGI.escape(token)}&queue=x&queue[]=y", "CONTENT_TYPE" => "application/x-www-form-urlencoded")
    assert_equal 400, twice.status
    assert_equal [ "r" ], Bobbin::QueuePause.pluck(:queue)
    assert_raises(ArgumentError) { Bobbin.pause("q" * 256) }
  end

  # The 400 page is drawn in the layout, whose navigation read the query again: a list page whose query did not parse
  # answered a 500 (an ERROR and a backtrace in the log) instead of the 400 saying why.
  test "a query or form that does not parse is a 400 saying why, not a 500" do
    app = Bobbin::Dashboard.new(environment: "development")
    { "/jobs?queue=a&queue[]=b" => "expected Array (got String) for param `queue'", "/jobs?state=%G1" => "invalid %-encoding (%G1)",
      "/jobs?#{'a=1&' * 5_000}" => "total number of query parameters (5001) exceeds limit",
      "/jobs?#{'a' + '[b]' * 40}=1" => "QueryLimitError" }.each do |path, why|
      response = get(app, path)
      assert_equal 400, response.status, path[0, 40]
      assert_includes CGI.unescapeHTML(response.body[%r{<p id="refusal">(.*?)</p>}m, 1].to_s), why, path[0, 40]
    end
    assert_equal 200, get(app, "/?state=%G1").status, "a page that reads no query shows"
    # Filters and cursors Rack parses but the database cannot take: a 500 each (a trial); a NUL alone was blank, and the
    # page listed every job under a "discard all matching" of them all.
    { "/jobs?after=99999999999999999999999" => "bad page cursor", "/jobs?state=failed&after=2026-01-01T00:00:00Z,99999999999999999999" => "bad page cursor",
      "/jobs?process_id=99999999999999999999" => "process_id must be a number", "/jobs?queue=a%FFb" => 'queue must be UTF-8 text, not "a\\xFFb"',
      "/jobs?search=x%FFy" => "search must be UTF-8 text", "/jobs?class_name=x%FFy" => "class_name must be UTF-8 text",
      "/jobs?search=%00" => "search must not contain a NUL byte", "/jobs?state=failed&class_name=%00" => "class_name must not contain a NUL byte" }.each do |path, why|
      response = get(app, path)
      assert_equal 400, response.status, path
      assert_includes CGI.unescapeHTML(response.body[%r{<p id="refusal">(.*?)</p>}m, 1].to_s), why, path
    end
    garbled = Rack::MockRequest.new(app).post("/queues/pause", **LOCAL, input: "garbage", "CONTENT_TYPE" => "multipart/form-data; boundary=xx")
    assert_equal 400, garbled.status
  end

  # Every ArgumentError was taken for the request's fault: an auth hook's own (Integer() of a cookie) answered anyone a
  # 400 showing its message (the cookie's value), and a page's failed with a 400 too; neither reached the log (a review).
  test "an auth hook's or a page's own ArgumentError is a plain 500 in the log, its message not on the page" do
    hook = Bobbin::Dashboard.new(environment: "production", auth: ->(request) { Integer(request.cookies["uid"], 10).positive? && "ann" })
    response = nil
    log = bobbin_log { response = Rack::MockRequest.new(hook).get("/queues", **LOCAL, "HTTP_COOKIE" => "uid=s3cret-session") }
    assert_equal [ 500, "Something went wrong; the server's log has the details.\n" ], [ response.status, response.body ]
    assert_match(/bobbin dashboard: GET \/queues failed: ArgumentError: invalid value for Integer\(\): "s3cret-session"/, log)

    Bobbin::ProcessRecord.register(kind: "worker", name: "w", metadata: { mode: "fibers", recent_stalls: [ { id: "not-a-job", at: "2026-11-24T22:00:00Z" } ] })
    log = bobbin_log { response = get(Bobbin::Dashboard.new(environment: "development"), "/processes") }
    assert_equal 500, response.status
    refute_includes response.body, "not-a-job"
    assert_match(/GET \/processes failed: ArgumentError/, log)
    assert_equal 400, get(Bobbin::Dashboard.new(environment: "development"), "/jobs?process_id=abc").status, "a bad filter is still the request's fault"
  end

  test "the processes page shows a fiber pool's loop lag, stalls and the recent stalls, escaped" do
    stall = { id: 42, class_name: "<b>Job</b>", duration_ms: 312.4, location: "app/jobs/x.rb:7", at: "2026-11-24T22:00:00Z" }
    Bobbin::ProcessRecord.register(kind: "worker", name: "w", metadata: { mode: "fibers", capacity: 5, busy: 1, recent_stalls: [ stall ] })
    Bobbin::ProcessRecord.update_all(loop_lag_ms: 12.5, max_loop_lag_ms: 312.4, stalls: 3)
    body = get(Bobbin::Dashboard.new(environment: "development"), "/processes").body

    assert_match(%r{<td class="n">13 ms</td>\s*<td class="n">312 ms</td>\s*<td class="n">3</td>}, body)
    assert_match(%r{<a href="/jobs/42">&lt;b&gt;Job&lt;/b&gt; 42</a>.*312 ms.*app/jobs/x.rb:7}m, body)
    refute_match(/quiet/, body)

    Bobbin::ProcessRecord.update_all(metadata: JSON.generate(mode: "fibers", quiet: true))
    assert_match(%r{<td>fibers · quiet</td>}, get(Bobbin::Dashboard.new(environment: "development"), "/processes").body)
  end

  test "bidi override and isolate characters in job data are shown escaped, not obeyed (text read reversed)" do
    id = insert_jobs(1, queue: "q\u2066x", **failed_attributes, last_error_message: "report\u202Efdp.exe").first
    app = Bobbin::Dashboard.new(environment: "development")
    [ "/jobs?state=failed", "/jobs/#{id}", "/queues" ].each do |page|
      body = get(app, page).body.force_encoding(Encoding::UTF_8)
      assert_no_match(/[\u202A-\u202E\u2066-\u2069]/, body, page)
      assert_includes body, page == "/queues" ? 'q\u2066x' : 'report\u202Efdp.exe', page
    end
  end

  test "the queues page shows a queue's count past its cap as 10,000+" do
    insert_jobs(Bobbin::Operator::Stats::EXACT_UP_TO + 1, queue: "bulk")
    insert_jobs(2, queue: "bulk", **failed_attributes)
    page = get(Bobbin::Dashboard.new(environment: "development"), "/queues").body
    assert_match(%r{<tr id="queue-bulk">.*?>10,000\+</a>.*?>0</a>.*?>2</a>}m, page)
  end

  test "with the database unreachable, pages answer 503 saying so, without the connection's details, and work again once it is back" do
    app = Bobbin::Dashboard.new(environment: "development")
    port = TCPServer.open("127.0.0.1", 0).then { |server| server.addr[1].tap { server.close } }
    ActiveRecord::Base.establish_connection("postgres://127.0.0.1:#{port}/nowhere")
    [ "/", "/jobs?state=failed", "/queues", "/metrics" ].each do |path|
      response = get(app, path)
      assert_equal 503, response.status, path
      assert_equal "5", response.headers["retry-after"]
      assert_match(/The database is unavailable \(ActiveRecord::\w+\)\. This page works again once it is back\./, response.body)
      refute_match(/127\.0\.0\.1|#{port}|\.rb:\d+/, response.body, "no host, port or backtrace on the page")
    end
  ensure
    Bobbin.connect(TestDatabase.url_with_pool(name: TestDatabase.application_name))
    assert_equal 200, get(app, "/").status
  end

  # A replica's URL, or a failover's old primary: a retry, a discard or a pause was a plain 500.
  test "PostgreSQL: an action on a database that takes no writes answers 503 saying so, and changes nothing" do
    skip_unless_postgres
    app = Bobbin::Dashboard.new(environment: "development")
    id = insert_jobs(1, **failed_attributes).first
    Bobbin::Record.connection.execute("SET default_transaction_read_only = on")
    [ [ "/jobs/#{id}", "/jobs/#{id}/retry", {} ], [ "/queues", "/queues/pause", { "queue" => "mail" } ] ].each do |page, action, params|
      response = post_form(app, page, action, params: params)
      assert_equal 503, response.status, action
      assert_match(/The database takes no writes \(a replica, or a failover&#39;s old primary\): nothing was changed\./, response.body, action)
    end
    Bobbin::Record.connection.execute("RESET default_transaction_read_only")
    assert_equal "failed", Bobbin::JobRecord.find(id).state
    assert_empty Bobbin::QueuePause.all.to_a
  ensure
    Bobbin::Record.connection.execute("RESET default_transaction_read_only") if postgres?
  end

  # Every page waited in silence for the whole lock (a VACUUM FULL, a migration's rewrite), while `bobbin jobs` said so.
  test "PostgreSQL: with Bobbin's tables locked by another session, pages answer 503 saying so instead of waiting for the lock", long: true do
    skip_unless_postgres
    app = Bobbin::Dashboard.new(environment: "development")
    holder = PG.connect(TestDatabase.url) # another session, outside the dashboard's pool
    holder.exec("BEGIN; LOCK TABLE bobbin_jobs, bobbin_processes, bobbin_pauses, bobbin_recurring_tasks, bobbin_recurring_runs IN ACCESS EXCLUSIVE MODE")
    log = bobbin_log do
      [ "/", "/queues", "/jobs?state=failed", "/processes", "/recurring" ].each do |page|
        request = Thread.new { get(app, page) }
        flunk("#{page} waited for the lock") unless request.join(30)
        response = request.value
        assert_equal [ 503, "5" ], [ response.status, response.headers["retry-after"] ], page
        assert_match(/Bobbin&#39;s tables are locked by another session \(a migration, a VACUUM FULL, a LOCK TABLE\)\. This page works again once the lock is released\./, response.body, page)
      end
    end
    assert_match(%r{bobbin dashboard: /queues: waited [\d.]+s for a lock on Bobbin's tables that another session holds: pid \d+ \(AccessExclusiveLock\): BEGIN; LOCK TABLE bobbin_jobs}, log)
    holder.exec("ROLLBACK")
    assert_equal 200, get(app, "/").status
  ensure
    holder&.close
  end

  test "with Bobbin's database missing or refusing connections, pages answer 503 without naming it" do
    app = Bobbin::Dashboard.new(environment: "development")
    Dir.mktmpdir("bobbin-dashboard") do |dir|
      gone = { unopenable_sqlite_url(dir) => %r{#{dir}|jobs\.sqlite3} }
      if postgres?
        uri = URI(TestDatabase.url)
        missing, closed = "bobbin_no_such_queue_#{Process.pid}", "bobbin_closed_queue_#{Process.pid}"
        ActiveRecord::Base.connection.execute("CREATE DATABASE #{closed}")
        ActiveRecord::Base.connection.execute("ALTER DATABASE #{closed} ALLOW_CONNECTIONS false")
        gone[uri.dup.tap { |u| u.path = "/#{missing}" }.to_s] = /#{missing}/
        gone[uri.dup.tap { |u| u.path = "/#{closed}" }.to_s] = /#{closed}/
      end
      gone.each do |url, details|
        Bobbin::Record.establish_connection(url) # Bobbin's own database, as config.bobbin.connects_to gives it
        [ "/", "/queues" ].each do |path|
          response = get(app, path)
          assert_equal [ 503, "5" ], [ response.status, response.headers["retry-after"] ], "#{url} #{path}"
          assert_match(/The database is unavailable \(ActiveRecord::NoDatabaseError\)\./, response.body)
          refute_match(details, response.body, "no database name or path on the page")
        end
      end
    ensure
      Bobbin::Record.remove_connection
      ActiveRecord::Base.connection.execute("DROP DATABASE IF EXISTS #{closed}") if closed
    end
    assert_equal 200, get(app, "/").status
  end

  test "a row whose text is not UTF-8 shows on every page with its bad bytes replaced, not a 500" do
    skip_unless_invalid_utf8_kept
    id = insert_invalid_utf8_job
    app = Bobbin::Dashboard.new(environment: "development")
    [ "/", "/jobs", "/jobs?state=failed", "/queues", "/metrics", "/jobs/#{id}" ].each do |path|
      assert_equal 200, get(app, path).status, path
    end
    page = get(app, "/jobs/#{id}").body
    assert_match(%r{<h1>Bad\uFFFDJob <small>}, page)
    assert_match(%r{<pre class="code" id="arguments">\[\s*&quot;a\uFFFD&quot;\s*\]</pre>}, page)
    assert_match(/RuntimeError<\/strong>: boom \uFFFD here/, page)
    assert_includes get(app, "/queues").body, "bad\uFFFD"
    assert_includes get(app, "/metrics").body, %(bobbin_queue_jobs{queue="bad\uFFFD",state="failed"} 1.0)
  end

  test "an unexpected error answers a plain 500 without a backtrace, and the log has the error with its backtrace" do
    app = Bobbin::Dashboard.new(environment: "development")
    Bobbin::Record.connection.execute("ALTER TABLE bobbin_pauses RENAME TO bobbin_pauses_away") # every queues read fails
    response = nil
    log = bobbin_log { response = get(app, "/queues") }
    assert_equal 500, response.status
    assert_equal "Something went wrong; the server's log has the details.\n", response.body
    assert_match(%r{\Atext/plain}, response.headers["content-type"])
    assert_match(/bobbin dashboard: GET \/queues failed: ActiveRecord::StatementInvalid: .*bobbin_pauses/, log)
    assert_match(%r{lib/bobbin/operator/stats\.rb:\d+}, log, "with its backtrace")
  ensure
    Bobbin::Record.connection.execute("ALTER TABLE bobbin_pauses_away RENAME TO bobbin_pauses") if response
    Bobbin::QueuePause.reset_column_information # what Active Record learned while the table was away
  end
end
