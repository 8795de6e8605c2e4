# frozen_string_literal: true

require_relative "cli_helper"
require_relative "../operator/operator_helper"

# `bobbin jobs|retry|discard|queues|processes`, run as a real subprocess against the test database.
class OperatorCommandsTest < Bobbin::TestCase
  include CLIHelper
  include OperatorHelper

  test "jobs lists with filters and pages with a printed cursor", long: true do
    failed = insert_jobs(3, queue: "mail", class_name: "MailJob", **failed_attributes, last_error_message: "smtp down")
    insert_jobs(2)
    status, out, err = run_bobbin("jobs", "--state", "failed", "--queue", "mail", "--limit", "2")
    assert_equal 0, status.exitstatus, err
    lines = out.lines
    assert_match(/\AID\s+STATE\s+QUEUE\s+CLASS/, lines.first)
    assert_equal 2, lines.grep(/failed\s+mail\s+MailJob .*RuntimeError: smtp down/).size
    cursor = lines.last[/--after (\S+)/, 1] or flunk("no cursor printed:\n#{out}")
    status, out, = run_bobbin("jobs", "--state", "failed", "--queue", "mail", "--limit", "2", "--after", cursor)
    assert_equal 0, status.exitstatus
    assert_equal [ failed.min.to_s ], out.lines.drop(1).map { |line| line.split.first }
    assert_equal [ 0, "no jobs\n" ], run_bobbin("jobs", "--class", "Nope").then { |s, o, _| [ s.exitstatus, o ] }
    status, out, err = run_bobbin("jobs", "--limit", "0")
    assert_equal [ 64, "" ], [ status.exitstatus, out ], "a usage error, not 'no jobs' while there are"
    assert_match(/--limit 0: a page has 1 row or more/, err)
  end

  test "jobs and queues show a row's bytes that are not UTF-8 replaced, instead of failing with a backtrace" do
    skip_unless_invalid_utf8_kept
    id = insert_invalid_utf8_job
    status, out, err = run_bobbin("jobs")
    assert_equal [ 0, "" ], [ status.exitstatus, err ]
    assert_match(/\A#{id}\s+failed\s+bad\uFFFD\s+Bad\uFFFDJob\s+1\/1\s+\S+ \S+\s+RuntimeError: boom \uFFFD here$/, out.lines[1])
    status, out, err = run_bobbin("queues")
    assert_equal [ 0, "" ], [ status.exitstatus, err ]
    assert_match(/\Abad\uFFFD\s+0\s+0\s+0\s+0\s+1\s/, out.lines[1])
  end

  test "jobs shows every class name whole, and the crashes that took attempts past the maximum" do
    insert_jobs(1, class_name: "Billing::Reports::QuarterlyReconciliationJob", state: "running", claimed_by: 1, attempts: 3, crashes: 2)
    status, out, err = run_bobbin("jobs", "--state", "running")
    assert_equal 0, status.exitstatus, err
    header, line = out.lines
    assert_match(/\d+\s+running\s+default\s+Billing::Reports::QuarterlyReconciliationJob\s+3\/1 \(2 crashes\)\s+\d{4}-/, line)
    assert_equal header.index("ATTEMPTS"), line.index("3/1"), "the columns line up"
  end

  test "jobs shows the key and limit a blocked job waits on" do
    insert_jobs(1, class_name: "SyncJob", state: "blocked", concurrency_key: "SyncJob/acct-7", concurrency_limit: 2)
    status, out, err = run_bobbin("jobs", "--state", "blocked")
    assert_equal 0, status.exitstatus, err
    assert_match(/blocked\s+default\s+SyncJob\s+0\/1\s+\S+ \S+\s+waiting on SyncJob\/acct-7 \(limit 2\)$/, out.lines[1])
  end

  # A retry waiting for its time showed the start of the run that failed (in the past) and no error (a trial).
  test "jobs shows when a waiting retry runs next, and the error it retries after" do
    run_at = Time.now.utc.change(usec: 0) + 3600
    insert_jobs(1, class_name: "SlowFail", state: "ready", attempts: 1, max_attempts: 3, run_at: run_at, started_at: Time.now.utc - 60,
                   last_error_class: "RuntimeError", last_error_message: "slow boom\nsecond line")
    status, out, err = run_bobbin("jobs", "--state", "scheduled")
    assert_equal 0, status.exitstatus, err
    assert_match(/scheduled\s+default\s+SlowFail\s+1\/3\s+#{run_at.strftime("%Y-%m-%d %H:%M:%S")}\s+RuntimeError: slow boom$/, out.lines[1])
  end

  # It showed the last tick's time only: a task whose jobs all failed looked healthy (a trial).
  test "recurring lists each task with its last run and how its job went" do
    job, tick = recurring_with_failed_job("report broke")
    status, out, err = run_bobbin("recurring")
    assert_equal 0, status.exitstatus, err
    assert_match(/\Afresh\s+0 3 \* \* \*\s+last never\s+next \S+$/, out.lines[0])
    assert_match(/\Anightly\s+0 2 \* \* \*\s+last #{Regexp.escape(tick.iso8601)}\s+next \S+ \(job #{job} failed: RuntimeError: report broke\)$/, out.lines[1])

    now = Time.now.utc # a schedule this version cannot read (another version's row, or one written by hand): listed, not a crash
    Bobbin::RecurringTask.create!(key: "odd", schedule: "every blue moon", class_name: "ReportJob", created_at: now, updated_at: now)
    status, out, err = run_bobbin("recurring")
    assert_equal 0, status.exitstatus, err
    assert_match(/^odd\s+every blue moon\s+last never\s+next unknown \(a schedule this version cannot read\)$/, out)
  end

  test "a lock another session holds on Bobbin's tables: queues and processes say who holds it and exit 75, not wait in silence", long: true do
    skip_unless_postgres
    Bobbin::JobRecord.transaction do
      Bobbin::JobRecord.connection.execute("LOCK TABLE bobbin_jobs IN ACCESS EXCLUSIVE MODE")
      %w[queues processes].each do |command|
        status, out, err = run_bobbin(command)
        assert_equal [ 75, "" ], [ status.exitstatus, out ], err
        assert_match(/bobbin: waited [\d.]+s for a lock on Bobbin's tables that another session holds: pid \d+ \(AccessExclusiveLock\): LOCK TABLE bobbin_jobs/, err)
      end
    end
  end

  # They waited in silence for the whole lock (a VACUUM FULL, a migration's rewrite), when jobs|queues|processes said so.
  test "a lock another session holds on Bobbin's tables: counts, pause, resume and recurring say who holds it and exit 75", long: true do
    skip_unless_postgres
    Bobbin::JobRecord.transaction do
      Bobbin::JobRecord.connection.execute("LOCK TABLE bobbin_jobs, bobbin_pauses, bobbin_recurring_tasks, bobbin_recurring_runs IN ACCESS EXCLUSIVE MODE")
      [ %w[counts], %w[pause mail], %w[resume mail], %w[recurring] ].each do |command|
        status, out, err = run_bobbin(*command, timeout: 30)
        assert_equal [ 75, "" ], [ status.exitstatus, out ], "#{command.join(' ')}: #{err}"
        assert_equal 1, err.lines.size, err
        assert_match(/\Abobbin: waited [\d.]+s for a lock on Bobbin's tables that another session holds: pid \d+ \(AccessExclusiveLock\): LOCK TABLE bobbin_jobs.*; try again when it ends$/, err)
      end
    end
    assert_empty Bobbin::QueuePause.all.to_a, "the pause was not made"
  end

  test "an argument where only options go is refused with 64, not dropped" do
    insert_jobs(2)
    status, out, err = run_bobbin("jobs", "14")
    assert_equal [ 64, "" ], [ status.exitstatus, out ], "not every job listed as if no 14 was given"
    assert_match(/bobbin jobs takes options only, got "14"; filter with --state/, err)
    status, _, err = run_bobbin("queues", "mail")
    assert_equal 64, status.exitstatus
    assert_match(/bobbin queues takes options only, got "mail"/, err)
  end

  test "control characters in job data are shown escaped, not sent to the terminal" do
    insert_jobs(1, queue: "q\e]0;title\a", class_name: "EchoJob", **failed_attributes, last_error_message: "boom \e[2J\r\e[31mred\b end report\u202Efdp.exe\u2066")
    status, out, err = run_bobbin("jobs", "--state", "failed")
    assert_equal 0, status.exitstatus, err
    assert_no_match(/[\e\a\b\r\u202E\u2066]/, out)
    assert_includes out.lines[1], 'q\e]0;title\a'
    assert_includes out.lines[1], 'boom \e[2J\r\e[31mred\b end report\u202Efdp.exe\u2066'
    status, out, err = run_bobbin("queues")
    assert_equal 0, status.exitstatus, err
    assert_no_match(/[\e\a]/, out)
    assert_match(/^q\\e\]0;title\\a /, out.lines[1])
  end

  # Without a UTF-8 locale (LANG unset: a slim container, cron, `docker exec`) Ruby gives the command line as binary bytes:
  # `bobbin pause café` paused, then ended in JSON's backtrace, and on SQLite `bobbin jobs --queue café` or
  # `retry --failed --queue café` in the driver's.
  test "without a UTF-8 locale, names beyond ASCII on the command line are read as the text they are", long: true do
    id = insert_jobs(1, queue: "café", **failed_attributes, last_error_message: "für José").first
    no_locale = { "LANG" => nil, "LC_ALL" => nil, "LC_CTYPE" => nil }
    status, out, err = run_bobbin("jobs", "--queue", "café", "--search", "für", env: no_locale)
    assert_equal [ 0, "" ], [ status.exitstatus, err ]
    assert_match(/\A#{id}\s+failed\s+café\s/, out.lines[1])
    assert_equal [ 0, "paused café\n", "" ], run_bobbin("pause", "café", env: no_locale).then { |s, o, e| [ s.exitstatus, o, e ] }
    assert_equal [ "café" ], Bobbin::QueuePause.pluck(:queue)
    assert_equal [ 0, "retried 1 job\n", "" ], run_bobbin("retry", "--failed", "--queue", "café", "--by", "José", env: no_locale).then { |s, o, e| [ s.exitstatus, o, e ] }
    assert_equal [ "ready", "José" ], Bobbin::JobRecord.where(id: id).pick(:state, :operated_by)
    assert_config_exit(run_bobbin("pause", "caf\xE9".b, env: no_locale), /\Abobbin: the argument "caf\\xE9" is not UTF-8 text\n\z/, exitstatus: 64)
  end

  # A worker's queue list reads `reports_*` as a prefix; `bobbin pause 'reports_*'` said "paused reports_*" and paused a
  # queue of that literal name, while every reports_ queue went on being claimed (a review). A name longer than any
  # queue's ended in a backtrace.
  test "pause refuses a pattern and a name no queue can have, in one line with exit 64, and pauses nothing", long: true do
    assert_config_exit(run_bobbin("pause", "reports_*"), /\Abobbin: pause: a pause names one queue; "reports_\*" is a pattern .*`bobbin queues` lists them\)\n\z/, exitstatus: 64)
    assert_config_exit(run_bobbin("pause", "*"), /is a pattern/, exitstatus: 64)
    assert_config_exit(run_bobbin("pause", "q" * 300), /\Abobbin: pause: a queue's name is at most 255 bytes, got 300/, exitstatus: 64)
    assert_empty Bobbin::QueuePause.pluck(:queue)
    assert_raises(ArgumentError, match: /is a pattern/) { Bobbin::Operator.pause("llm_*") }
    assert_equal [ 0, "paused reports_eu\n" ], run_bobbin("pause", "reports_eu").then { |s, o, _| [ s.exitstatus, o ] }
    assert_equal [ "reports_eu" ], Bobbin::QueuePause.pluck(:queue)
    # resume("*") returned 0: nothing was resumed, and nothing said why.
    assert_config_exit(run_bobbin("resume", "reports_*"), /\Abobbin: resume: a resume names one queue; "reports_\*" is a pattern .*`bobbin queues` lists them\)\n\z/, exitstatus: 64)
    assert_raises(ArgumentError, match: /is a pattern/) { Bobbin::Operator.resume("*") }
    assert_equal [ "reports_eu" ], Bobbin::QueuePause.pluck(:queue)
  end

  test "retry and discard by id: exit 1 naming a job that could not be, 64 for a bad id or filter", long: true do
    failed = insert_jobs(1, **failed_attributes).first
    running = insert_jobs(1, state: "running", claimed_by: 1).first
    status, out, err = run_bobbin("retry", failed.to_s, running.to_s)
    assert_equal 1, status.exitstatus
    assert_equal "retried #{failed}\n", out
    assert_match(/job #{running} is running: retry acts on failed or discarded jobs/, err)
    assert_equal "ready", Bobbin::JobRecord.find(failed).state
    assert_equal "running", Bobbin::JobRecord.find(running).state

    status, _, err = run_bobbin("discard", "abc")
    assert_equal 64, status.exitstatus
    assert_match(/"abc" is not a job id/, err)
    status, _, err = run_bobbin("jobs", "--state", "lost")
    assert_equal 64, status.exitstatus
    assert_match(/invalid argument: --state lost \(one of ready, scheduled, blocked, running, succeeded, failed, discarded\)/, err)
    assert_equal 1, run_bobbin("discard", "987654321").first.exitstatus
    status, _, err = run_bobbin("retry", running.to_s, "--queue", "nosuch")
    assert_equal [ 64, "running" ], [ status.exitstatus, Bobbin::JobRecord.find(running).state ]
    assert_match(/filters go with --failed or --all; give job ids without them/, err)
  end

  test "retry --failed with filters retries only what they select and records who", long: true do
    mail = insert_jobs(3, queue: "mail", **failed_attributes)
    other = insert_jobs(2, **failed_attributes)
    status, out, err = run_bobbin("retry", "--failed", "--queue", "mail", "--by", "ann")
    assert_equal 0, status.exitstatus, err
    assert_equal "retried 3 jobs\n", out
    assert_equal [ [ "ready", "ann" ] ], Bobbin::JobRecord.where(id: mail).distinct.pluck(:state, :operated_by)
    assert_equal [ "failed" ], Bobbin::JobRecord.where(id: other).distinct.pluck(:state)
    status, out, = run_bobbin("discard", "--failed")
    assert_equal [ 0, "discarded 2 jobs\n" ], [ status.exitstatus, out ]
  end

  test "--failed with --state of another state is refused: it discarded the ready jobs, saying only how many" do
    ready = insert_jobs(2)
    [ %w[--failed --state ready], %w[--state ready --failed] ].each do |flags|
      status, out, err = run_bobbin("discard", *flags)
      assert_equal [ 64, "" ], [ status.exitstatus, out ]
      assert_match(/--failed selects failed jobs, not ready ones/, err)
    end
    assert_equal [ "ready" ], Bobbin::JobRecord.where(id: ready).distinct.pluck(:state)
    status, _, err = run_bobbin("jobs", "--limit", "10001")
    assert_equal 64, status.exitstatus
    assert_match(/at most 10000 rows \(go on with --after\)/, err)
  end

  # OptionParser put the flag before the message ("invalid argument: --limit --limit 10001: …").
  test "a --limit out of range is one usage line naming the flag once" do
    { %w[--limit 10001] => "--limit 10001: a page has at most 10000 rows (go on with --after)",
      %w[--limit=10001] => "--limit 10001: a page has at most 10000 rows (go on with --after)",
      %w[--limit 0] => "--limit 0: a page has 1 row or more" }.each do |args, message|
      status, out, err = run_bobbin("jobs", *args)
      assert_equal [ 64, "", "bobbin: #{message}\n" ], [ status.exitstatus, out, err ], args.join(" ")
    end
  end

  test "queues and processes print one aligned line each" do
    insert_jobs(2, queue: "mail", run_at: Time.now.utc - 90)
    Bobbin::Operator.pause("mail")
    status, out, = run_bobbin("queues")
    assert_equal 0, status.exitstatus
    assert_match(/\Amail\s+2\s+0\s+0\s+0\s+0\s+\d+\.\ds\s+paused$/, out.lines[1])
    Bobbin::ProcessRecord.register(kind: "worker", name: "w", metadata: { mode: "fibers", capacity: 10, busy: 3, rss_kb: 204_800, db_pool: 3, db_in_use: 1,
                                                                         queues: "critical,llm_*,*" })
    Bobbin::ProcessRecord.update_all(loop_lag_ms: 2.4, max_loop_lag_ms: 310.6, stalls: 2)
    status, out, = run_bobbin("processes")
    assert_equal 0, status.exitstatus
    assert_match(/worker\s+\S+:\d+\s+fibers\s+3\/10\s+0\s+\S+s\s+200M\s+1\/3\s+2\/311\s+2\s+critical,llm_\*,\*$/, out.lines[1], "the queue list in its order")

    Bobbin::ProcessRecord.update_all(metadata: JSON.generate(mode: "fibers", quiet: true, capacity: 10, busy: 0))
    assert_match(/worker\s+\S+:\d+\s+fibers,quiet\s+0\/10\s/, run_bobbin("processes")[1].lines[1])
  end
end

# `bobbin dashboard` serves the dashboard; with --auth-token, HTTP basic auth guards it in production.
class DashboardCommandTest < Bobbin::TestCase
  include CLIHelper

  def http_get(port, path, password: nil)
    request = Net::HTTP::Get.new(path)
    request.basic_auth("ann", password) if password
    Net::HTTP.start("127.0.0.1", port) { |http| http.request(request) }
  end

  test "in production it serves only with the token (HTTP basic auth)" do
    require "net/http"
    port = closed_port
    env = { "DATABASE_URL" => TestDatabase.url_with_pool, "RACK_ENV" => "production" }
    pid = Process.spawn(env, *ruby, File.join(ROOT, "exe/bobbin"), "dashboard", "--port", port.to_s, "--auth-token", "s3cret",
                        chdir: ROOT, out: File::NULL, err: File::NULL, pgroup: true)
    ensure_killed(pid) do
      response = wait_for("the dashboard to listen", timeout: 60) { http_get(port, "/") rescue nil }
      assert_equal "401", response.code
      assert_equal 'Basic realm="bobbin"', response["www-authenticate"]
      wrong = http_get(port, "/", password: "wrong")
      assert_equal [ "401", 'Basic realm="bobbin"' ], [ wrong.code, wrong["www-authenticate"] ], "a mistyped password is asked again"
      ok = http_get(port, "/queues", password: "s3cret")
      assert_equal "200", ok.code
      assert_match(/<h1>Queues<\/h1>/, ok.body)
    end
  end

  # On the command line the token was in `ps` and /proc/PID/cmdline for every user of the machine, for the whole boot.
  test "the token may come from BOBBIN_AUTH_TOKEN instead of the command line, which then does not hold it" do
    require "net/http"
    port = closed_port
    env = { "DATABASE_URL" => TestDatabase.url_with_pool, "RACK_ENV" => "production", "BOBBIN_AUTH_TOKEN" => "s3cret-from-env" }
    pid = Process.spawn(env, *ruby, File.join(ROOT, "exe/bobbin"), "dashboard", "--port", port.to_s,
                        chdir: ROOT, out: File::NULL, err: File::NULL, pgroup: true)
    ensure_killed(pid) do
      response = wait_for("the dashboard to listen", timeout: 60) { http_get(port, "/") rescue nil }
      assert_equal [ "401", 'Basic realm="bobbin"' ], [ response.code, response["www-authenticate"] ]
      assert_equal "401", http_get(port, "/queues", password: "wrong").code
      assert_equal "200", http_get(port, "/queues", password: "s3cret-from-env").code
    end
    status, _, err = run_bobbin("dashboard", "--host", "0.0.0.0", "--port", closed_port.to_s, env: { "BOBBIN_AUTH_TOKEN" => "" })
    assert_equal 78, status.exitstatus, err
    assert_match(/--auth-token \(or BOBBIN_AUTH_TOKEN\) is empty/, err)
  end

  test "without a token it asks for no credentials: a read-only dashboard refuses a POST with 403" do
    require "net/http"
    port = closed_port
    env = { "DATABASE_URL" => TestDatabase.url_with_pool, "RACK_ENV" => "development" }
    pid = Process.spawn(env, *ruby, File.join(ROOT, "exe/bobbin"), "dashboard", "--port", port.to_s, "--read-only",
                        chdir: ROOT, out: File::NULL, err: File::NULL, pgroup: true)
    ensure_killed(pid) do
      assert_equal "200", wait_for("the dashboard to listen", timeout: 60) { http_get(port, "/") rescue nil }.code
      refused = Net::HTTP.start("127.0.0.1", port) { |http| http.request(Net::HTTP::Post.new("/jobs/1/retry")) }
      assert_equal [ "403", nil ], [ refused.code, refused["www-authenticate"] ]
      assert_match(/read-only/, refused.body)
    end
  end

  # A Rails app's config/puma.rb (`plugin :bobbin` when BOBBIN_IN_PUMA is set, as on a Kamal web role) had the
  # dashboard's Puma start a supervisor and workers, which failed jobs whose classes it had not loaded.
  test "the directory's config/puma.rb is not read: the dashboard runs no plugin of it" do
    require "net/http"
    Dir.mktmpdir do |app|
      FileUtils.mkdir_p(File.join(app, "config"))
      marker = File.join(app, "puma-config-read")
      File.write(File.join(app, "config/puma.rb"), "File.write(#{marker.inspect}, 'read')\n")
      port = closed_port
      url = TestDatabase.url_with_pool
      url = url.sub(TestDatabase.sqlite_path, File.expand_path(TestDatabase.sqlite_path, ROOT)) unless TestDatabase.postgres? # read from another directory
      pid = Process.spawn({ "DATABASE_URL" => url, "RACK_ENV" => "development" }, *ruby, File.join(ROOT, "exe/bobbin"), "dashboard", "--port", port.to_s,
                          chdir: app, out: File::NULL, err: File::NULL, pgroup: true)
      ensure_killed(pid) do
        assert_equal "200", wait_for("the dashboard to listen", timeout: 60) { http_get(port, "/") rescue nil }.code
        refute File.exist?(marker), "Puma loaded the directory's config/puma.rb"
      end
    end
  end

  test "on an address other machines reach it refuses to start without a token, saying why" do
    status, _, err = run_bobbin("dashboard", "--host", "0.0.0.0", "--port", closed_port.to_s)
    assert_equal 78, status.exitstatus, err
    assert_match(/bobbin dashboard on 0\.0\.0\.0 is reachable from other machines: give it --auth-token TOKEN/, err)
  end

  # It started, then refused every page with 403 (a review); a short secret ended in Roda's backtrace.
  test "in production without a token, or with a short BOBBIN_DASHBOARD_SECRET, it refuses to start, saying why" do
    assert_config_exit(run_bobbin("dashboard", "--port", closed_port.to_s, env: { "RACK_ENV" => "production" }),
                       /\Abobbin: bobbin dashboard: the dashboard needs an auth hook outside development and test \(this is production\): give it --auth-token TOKEN/)
    assert_config_exit(run_bobbin("dashboard", "--port", closed_port.to_s, env: { "RACK_ENV" => "development", "BOBBIN_DASHBOARD_SECRET" => "short" }),
                       /\Abobbin: the dashboard's secret \(BOBBIN_DASHBOARD_SECRET\) must be at least 64 bytes, got 5/)
  end

  # A port taken (another dashboard left running) ended in Puma's Errno::EADDRINUSE backtrace, after the line saying
  # where it served (a trial).
  test "a port already in use stops it with one line naming the port" do
    server = TCPServer.new("127.0.0.1", 0)
    port = server.addr[1]
    %w[dashboard metrics].each do |command|
      assert_config_exit(run_bobbin(command, "--port", port.to_s, env: { "RACK_ENV" => "development" }),
                         /\Abobbin: bobbin #{command} cannot listen on 127\.0\.0\.1:#{port} \(Address already in use\): give it another --port\n\z/)
    end
  ensure
    server&.close
  end

  # --port 99999 served on 34463 (Puma takes the port modulo 65536) while it said 99999, --port -1 ended in URI's
  # backtrace and --port 0 served on a port it did not say; a --host that does not resolve, in getaddrinfo's backtrace.
  test "a port that is not a TCP port, or a host that does not resolve, stops it with one line saying so", long: true do
    %w[dashboard metrics].each do |command|
      %w[99999 -1 0].each do |port|
        assert_config_exit(run_bobbin(command, "--port", port, env: { "RACK_ENV" => "development" }),
                           /\Abobbin: bobbin #{command}: --port #{port} is not a TCP port \(1 to 65535\)\n\z/, exitstatus: 64)
      end
      port = closed_port
      assert_config_exit(run_bobbin(command, "--host", "nosuch.invalid", "--port", port.to_s, "--auth-token", "s3cret"),
                         /\Abobbin: bobbin #{command} cannot listen on nosuch\.invalid:#{port} \(.+\): give it another --host/)
    end
  end

  # Rails' own bundle has rackup but no server (puma comes from the app's Gemfile): rackup's LoadError ended it with a
  # backtrace, after the line saying where it served (a trial, on Rails 7.2's bundle).
  test "with rackup but no Rack server in the bundle it stops with one line saying what to add" do
    env = { "BUNDLE_GEMFILE" => File.join(ROOT, "test/active_job/rails_suite/rails-7.2.gemfile"), "BUNDLE_PATH" => File.join(ROOT, "vendor/bundle"),
            "RACK_ENV" => "development" }
    _, status = Open3.capture2e(env, "bundle", "check", chdir: ROOT)
    skip "Rails 7.2's bundle is not installed (bin/setup installs it)" unless status.success?
    skip "Rails 7.2's bundle has no pg gem" if TestDatabase.postgres?

    %w[dashboard metrics].each do |command|
      assert_config_exit(run_bobbin(command, "--port", closed_port.to_s, env: env),
                         /\Abobbin: bobbin #{command} needs the rackup gem and a Rack server such as puma in the bundle \(bundle add rackup puma\)\n\z/)
    end
  end

  # `--auth-token --port 9399` served on 0.0.0.0:9292 with the password "--port" (a trial).
  # A trailing `--auth-token` with no value exited 78, as if the configuration were wrong (a trial).
  test "an --auth-token without its value, or words left over, stop it with a usage error", long: true do
    %w[dashboard metrics].each do |command|
      status, _, err = run_bobbin(command, "--host", "0.0.0.0", "--auth-token", "--port", closed_port.to_s)
      assert_equal [ 64, "bobbin: bobbin #{command}: --auth-token needs a value, got the option --port (a token may not start with - and a letter)" ],
                   [ status.exitstatus, err.lines.first.chomp ]
      port = closed_port
      status, _, err = run_bobbin(command, "--host", "0.0.0.0", "--auth-token", "-p#{port}")
      assert_equal [ 64, "bobbin: bobbin #{command}: --auth-token needs a value, got the option -p#{port} (a token may not start with - and a letter)" ],
                   [ status.exitstatus, err.lines.first.chomp ]
      status, _, err = run_bobbin(command, "--port", closed_port.to_s, "9399")
      assert_equal [ 64, "bobbin: bobbin #{command} takes options only, got \"9399\"" ], [ status.exitstatus, err.lines.first.chomp ]
      status, _, err = run_bobbin(command, "--host", "0.0.0.0", "--port", closed_port.to_s, "--auth-token")
      assert_equal [ 64, "bobbin: missing argument: --auth-token" ], [ status.exitstatus, err.lines.first.chomp ]
    end
  end
end
