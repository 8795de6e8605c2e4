# frozen_string_literal: true

# bin/bench --dashboard [JOBS]: how long each Bobbin::Dashboard page takes to render with a big jobs table.
# Fills bench_dashboard (PostgreSQL, the bench cluster; or BENCH_DASHBOARD_URL, e.g. sqlite3:tmp/dash.sqlite3)
# with JOBS rows (default 1,000,000: 20 % ready, of which a tenth scheduled ahead, 5 % failed, 200 running, the rest
# succeeded over the last 24 h, over 12 queues and 6 classes), ANALYZEs, then renders every page through Rack
# (no network) 7 times and reports the median and worst in ms. Target (issue 16): every page ≤ 150 ms at 1M rows.
require "bobbin"
require "rack/mock"
require_relative "lib/plan"

jobs = Integer(ARGV[0] || Plan::DASHBOARD[:jobs])
url = ENV.fetch("BENCH_DASHBOARD_URL") { "postgres:///bench_dashboard?port=#{ENV.fetch('BENCH_PG_PORT', '5432')}&pool=5" }
system("createdb", "-p", url[/port=(\d+)/, 1], "bench_dashboard", err: File::NULL) if url.start_with?("postgres")
Bobbin.config.logger.level = Logger::WARN
Bobbin.connect(url)
Bobbin.migrate!
postgres = url.start_with?("postgres")
connection = ActiveRecord::Base.connection

ready = jobs * Plan::DASHBOARD[:ready] / Plan::DASHBOARD[:jobs]
failed = jobs * Plan::DASHBOARD[:failed] / Plan::DASHBOARD[:jobs]
running = 200
if Bobbin::JobRecord.count != jobs
  started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  connection.execute("DELETE FROM bobbin_jobs")
  # One INSERT … SELECT over a generated series: the state, queue, class and times follow from n.
  series = postgres ? "generate_series(1, #{jobs}) AS s(n)" : "(WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < #{jobs}) SELECT n FROM s) AS s"
  now = postgres ? "now()" : "'#{Bobbin::Store.timestamp(Time.now)}'"
  ago = ->(seconds) { postgres ? "#{now} - (#{seconds}) * interval '1 second'" : "strftime('%Y-%m-%d %H:%M:%f', #{now}, (-(#{seconds})) || ' seconds')" }
  state = "CASE WHEN n <= #{ready} THEN 'ready' WHEN n <= #{ready + failed} THEN 'failed' WHEN n <= #{ready + failed + running} THEN 'running' ELSE 'succeeded' END"
  finished = "CASE WHEN n > #{ready} AND (n <= #{ready + failed} OR n > #{ready + failed + running}) THEN #{ago.call("n % 86400")} END"
  run_at = "CASE WHEN n <= #{ready} AND n % 10 = 0 THEN #{ago.call('-3600')} ELSE #{ago.call('n % 86400 + 60')} END"
  connection.execute(<<~SQL)
    INSERT INTO bobbin_jobs (queue, class_name, arguments, priority, state, run_at, attempts, max_attempts, claimed_by, claimed_at, started_at,
                             enqueued_at, finished_at, last_error_class, last_error_message, last_error_backtrace, active_job_id)
    SELECT 'queue_' || (n % 12), 'Job' || (n % 6), '[' || n || ', "user-' || n || '@example.com", {"retries": 3}]', 0, #{state}, #{run_at},
           CASE WHEN n <= #{ready} THEN 0 ELSE 1 END, 3, CASE WHEN #{state} = 'running' THEN 1 END, NULL,
           CASE WHEN n > #{ready} THEN #{ago.call('n % 86400 + 1')} END, #{ago.call('n % 86400 + 60')}, #{finished},
           CASE WHEN #{state} = 'failed' THEN 'Net::ReadTimeout' END, CASE WHEN #{state} = 'failed' THEN 'upstream timed out for job ' || n END,
           CASE WHEN #{state} = 'failed' THEN 'app/jobs/sync_job.rb:12:in ''perform''' END, NULL
    FROM #{series}
  SQL
  connection.execute(postgres ? "VACUUM ANALYZE bobbin_jobs" : "ANALYZE")
  warn(format("filled %d jobs in %.1f s", jobs, Process.clock_gettime(Process::CLOCK_MONOTONIC) - started))
end
Bobbin::ProcessRecord.delete_all
4.times { |i| Bobbin::ProcessRecord.register(kind: "worker", name: "pool-#{i}", metadata: { mode: "fibers", capacity: 100, busy: 50, rss_kb: 180_000 }) }

app = Bobbin::Dashboard.new(environment: "development")
deep = Bobbin::JobRecord.where(state: "succeeded").order(finished_at: :desc, id: :desc).offset([ jobs / 2, 25_000 ].min).limit(1)
                        .pick(:finished_at, :id)
one_failed = Bobbin::JobRecord.where(state: "failed").pick(:id)
pages = {
  "overview" => "/", "queues" => "/queues", "all jobs" => "/jobs", "ready" => "/jobs?state=ready", "scheduled" => "/jobs?state=scheduled",
  "running" => "/jobs?state=running", "failed" => "/jobs?state=failed", "failed, one queue" => "/jobs?state=failed&queue=queue_3",
  "failed, one class" => "/jobs?state=failed&class_name=Job2", "succeeded" => "/jobs?state=succeeded",
  "succeeded, deep page (keyset)" => "/jobs?state=succeeded&after=#{deep[0].utc.iso8601(6)},#{deep[1]}",
  "search failed errors" => "/jobs?state=failed&search=job+4242", "job detail" => "/jobs/#{one_failed}", "processes" => "/processes",
  "recurring" => "/recurring"
}
rows = pages.map do |name, path|
  times = Array.new(8) do
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    status, = Rack::MockRequest.new(app).get(path).then { |response| [ response.status ] }
    raise "#{path} answered #{status}" unless status == 200

    (Process.clock_gettime(Process::CLOCK_MONOTONIC) - started) * 1000
  end.drop(1).sort # the first render warms caches
  [ name, path, times[times.size / 2], times.last ]
end
puts "| page (#{jobs.to_s.reverse.scan(/\d{1,3}/).join(',').reverse} jobs, #{postgres ? 'PostgreSQL' : 'SQLite'}) | median ms | worst ms |"
puts "|---|---:|---:|"
rows.each { |name, _, median, worst| puts format("| %s | %.1f | %.1f |", name, median, worst) }
slow = rows.select { |*, median, _| median > Plan::DASHBOARD[:target_ms] }
warn("over #{Plan::DASHBOARD[:target_ms]} ms: #{slow.map(&:first).join(', ')}") if slow.any?

# With BENCH_DASHBOARD_PLANS=FILE (PostgreSQL): the plan of every statement on bobbin_jobs that these pages run,
# EXPLAIN ANALYZE on the filled table (docs/ARCHITECTURE.md quotes them).
if postgres && (plans_file = ENV["BENCH_DASHBOARD_PLANS"])
  File.open(plans_file, "w") do |out|
    [ "overview", "failed, one queue", "succeeded, deep page (keyset)", "search failed errors" ].each do |name|
      statements = []
      subscriber = ActiveSupport::Notifications.subscribe("sql.active_record") do |*, payload|
        statements << [ payload[:sql], payload[:binds] ] if payload[:sql].start_with?("SELECT") && payload[:sql].include?("bobbin_jobs")
      end
      Rack::MockRequest.new(app).get(pages.fetch(name))
      ActiveSupport::Notifications.unsubscribe(subscriber)
      statements.uniq.each do |sql, binds|
        out.puts("-- #{name}", sql, connection.explain(sql, binds, [ :analyze ]), "")
      end
    end
  end
  warn("plans written to #{plans_file}")
end
