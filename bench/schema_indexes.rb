# frozen_string_literal: true

# Schema 9 dropped three indexes of bobbin_jobs (Bobbin::Schema::DROPPED_INDEXES). This A/B measures what that did,
# with everything else the same: one process, one PostgreSQL database (bench_bobbin), the indexes of schema 8 and of
# schema 9 swapped in turn between rounds (A B A B …), the table emptied before each round. Per round:
#   enqueue_all — 20,000 noop jobs in slices of 1,000 (jobs/s)
#   drain       — those 20,000 run by one fiber worker (fibers: 100), first claim to empty (jobs/s)
#   one by one  — 2,000 `Job.enqueue` calls in a loop, each durable when it returns (jobs/s)
#   WAL         — bytes PostgreSQL wrote for the round, per job
# Prints a markdown table of medians (min–max). `ruby schema_indexes.rb [ROUNDS]` (default 5 per schema).
require "bobbin"
require "pg"

Bobbin.config.logger.level = Logger::WARN
PORT = ENV.fetch("BENCH_PG_PORT", "5432")
Bobbin.connect("postgres:///#{ENV.fetch('BENCH_PG_DATABASE', 'bench_bobbin')}?port=#{PORT}&pool=12")
Bobbin.migrate!
ROUNDS = Integer(ARGV.fetch(0, "5"))
JOBS = 20_000
ONE_BY_ONE = 2_000

# A job that does nothing.
class IndexProbeJob
  include Bobbin::Job
  bobbin_options retries: 0

  def perform = nil
end

# Schema 8's indexes that 9 dropped, and 9's one new index: the only difference between the two arms.
VERSION_8 = {
  "bobbin_jobs_finished" => "CREATE INDEX bobbin_jobs_finished ON bobbin_jobs (state, finished_at)",
  "bobbin_jobs_due" => "CREATE INDEX bobbin_jobs_due ON bobbin_jobs (run_at) WHERE state = 'ready'",
  "bobbin_jobs_active_job_id" => "CREATE INDEX bobbin_jobs_active_job_id ON bobbin_jobs (active_job_id)"
}.freeze
VERSION_9 = { "bobbin_jobs_active_job" => "CREATE INDEX bobbin_jobs_active_job ON bobbin_jobs (active_job_id) WHERE active_job_id IS NOT NULL" }.freeze

def sql(text) = Bobbin::Record.with_connection { |connection| connection.select_value(text) }

def use(indexes, other)
  other.each_key { |name| sql("DROP INDEX IF EXISTS #{name}") }
  indexes.each_value { |create| sql(create.sub("CREATE INDEX", "CREATE INDEX IF NOT EXISTS")) }
  sql("TRUNCATE bobbin_jobs")
  sql("VACUUM ANALYZE bobbin_jobs")
  sql("CHECKPOINT")
end

def seconds
  started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  yield
  Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
end

def wal_lsn = sql("SELECT pg_current_wal_lsn()::text")
def wal_bytes(from) = sql("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '#{from}')").to_f

def round
  lsn = wal_lsn
  enqueue = seconds { JOBS.fdiv(1_000).ceil.times { Bobbin.enqueue_all(Array.new(1_000) { [ IndexProbeJob, [] ] }) } }
  drain = seconds { Bobbin::Worker.new(fibers: 100, polling_interval: 0.05).run_until_empty }
  one = seconds { ONE_BY_ONE.times { IndexProbeJob.enqueue } }
  { "enqueue_all" => JOBS / enqueue, "drain" => JOBS / drain, "one by one" => ONE_BY_ONE / one,
    "WAL bytes per job" => wal_bytes(lsn) / (JOBS + ONE_BY_ONE) }
end

arms = { "schema 8 (13 indexes)" => [ VERSION_8, VERSION_9 ], "schema 9 (11 indexes)" => [ VERSION_9, VERSION_8 ] }
results = arms.keys.to_h { |name| [ name, [] ] }
use(*arms.values.first)
round # warm-up
ROUNDS.times do
  arms.each do |name, (indexes, other)|
    use(indexes, other)
    results[name] << round
  end
end
use(VERSION_9, VERSION_8)

puts "| indexes | #{results.values.first.first.keys.join(' | ')} |"
puts "|---|#{'---|' * results.values.first.first.size}"
results.each do |name, rounds|
  cells = rounds.first.keys.map do |key|
    values = rounds.map { |r| r[key] }.sort
    format("%.0f (%.0f–%.0f)", values[values.size / 2], values.first, values.last)
  end
  puts "| #{name} | #{cells.join(' | ')} |"
end
