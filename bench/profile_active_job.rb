# frozen_string_literal: true

# bin/bench --profile (second part): where a job's time goes through Active Job with Bobbin, in the production
# Rails app of bench/app on PostgreSQL (bench_bobbin), one process. Each row times one piece alone, repeated; the
# totals time the real calls (perform_later; a worker's Execution of a claimed row), so "the rest" is what the
# pieces leave out (Active Job's enqueue callbacks and instrumentation, Bobbin's outcome and events).
ENV["BENCH_ADAPTER"] = "bobbin"
ENV["BENCH_FIBERS"] = "1"
ENV["DATABASE_URL"] ||= "postgres:///bench_bobbin?port=#{ENV.fetch('BENCH_PG_PORT', '5432')}&pool=5"
require_relative "app/application"

Bobbin.migrate!
Bobbin.config.logger.level = Logger::WARN

# An empty Active Job job.
class ProfiledActiveJob < ActiveJob::Base
  def perform(*) = nil
end

# Microseconds per call of the block, over `n` calls.
def micros(n = 3_000)
  started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  n.times { yield }
  (Process.clock_gettime(Process::CLOCK_MONOTONIC) - started) / n * 1e6
end

adapter = ActiveJob::Base.queue_adapter
job = ProfiledActiveJob.new("noop", "key")
row = adapter.row(job, nil)
enqueue = {
  "serialize (job.serialize + JSON)" => micros { JSON.generate(job.serialize) },
  "Bobbin's row (checks, fields)" => micros { adapter.row(job, nil) },
  "INSERT (prepared, committed)" => micros { Bobbin::Store.insert([ row ]) }
}
enqueue["perform_later, total"] = micros { ProfiledActiveJob.perform_later("noop", "key") }
Bobbin.config.durable_enqueue = false # a lone INSERT (and its NOTIFY) commits without waiting for the WAL flush
enqueue["perform_later with durable_enqueue = false, total"] = micros { ProfiledActiveJob.perform_later("noop", "key") }
Bobbin.config.durable_enqueue = true

# The floor under any enqueue here: each store's own round trip with no Ruby around it (raw libpq, prepared; a bare
# redis-client LPUSH, Sidekiq's push without its Ruby), so a perform_later is never faster than its store's line plus
# Active Job's own callbacks.
require "redis-client"
pg = Bobbin::Store::PostgreSQL
payload = Bobbin::Wakeups::Notice.new([ "default" ], nil).to_json
floor = Bobbin::Record.with_connection do |connection|
  raw = connection.raw_connection
  pg.prepare(raw)
  values = row.values_at(*Bobbin::Store::NEW_JOB)
  {
    "PostgreSQL alone: the INSERT and its NOTIFY, durable (raw libpq)" => micros do
      raw.enter_pipeline_mode
      raw.send_query_prepared(pg::INSERT_ONE_NAME, values)
      raw.pipeline_sync
      raw.send_query_prepared(pg::NOTIFY_NAME, [ payload ])
      raw.pipeline_sync
      2.times { pg.segment(raw) }
      raw.exit_pipeline_mode
    end,
    "PostgreSQL alone: the same as one statement, asynchronous commit (raw libpq)" => micros { raw.exec_prepared(pg::INSERT_ONE_ASYNC_NOTIFY_NAME, [ *values, payload ]) }
  }
end
redis = RedisClient.new(url: ENV.fetch("REDIS_URL", "redis://127.0.0.1:6379/0"))
floor["Redis alone: LPUSH of the same payload (redis-client)"] = micros { redis.call("LPUSH", "bobbin-profile-floor", row[:arguments]) }
redis.call("DEL", "bobbin-profile-floor")

payload = JSON.generate(job.serialize)
claimed = Bobbin::Store::ClaimedJob.new(1, "default", "ProfiledActiveJob", payload, 1, 1, job.job_id, 0, nil)
execution = Bobbin::Worker::Execution.new
perform = Sync do
  {
    "deserialize (JSON.parse + ActiveJob::Base.deserialize)" => micros { ActiveJob::Base.deserialize(JSON.parse(payload)) },
    "perform_now (Active Job's callbacks, instrumentation)" => micros { ActiveJob::Base.deserialize(JSON.parse(payload)).perform_now } -
      micros { ActiveJob::Base.deserialize(JSON.parse(payload)) },
    "executor wrap (Active Job's execute callbacks: the reloader)" => micros { ActiveJob::Callbacks.run_callbacks(:execute) { } },
    "Bobbin's events (perform_start, perform; nobody listening)" => micros do
      Bobbin::Instrumentation.listening?(:perform_start) || Bobbin::Instrumentation.listening?(:perform)
    end,
    "Execution of a claimed row, total" => micros { execution.call(claimed) }
  }
end

puts "## Profile: an Active Job job with Bobbin (bench/profile_active_job.rb, one process, PostgreSQL)\n\n"
puts "| enqueue piece | µs per job |\n|---|---|"
enqueue.each { |piece, us| puts format("| %s | %.0f |", piece, us) }
puts format("| the rest (Active Job's enqueue callbacks and events) | %.0f |", enqueue["perform_later, total"] - enqueue.values.first(3).sum)
puts "\n| the store's own round trip, no Ruby around it | µs per job |\n|---|---|"
floor.each { |piece, us| puts format("| %s | %.0f |", piece, us) }
puts "\n| worker piece | µs per job |\n|---|---|"
perform.each { |piece, us| puts format("| %s | %.0f |", piece, us) }
puts format("| the rest (Bobbin's hooks, outcome, connection release) | %.0f |", perform["Execution of a claimed row, total"] - perform.values.first(4).sum)
puts "\nClaiming and writing outcomes are batched (see the table above: per job they cost a few µs of those statements)."
