# frozen_string_literal: true

# How the operator layer and the recurring scheduler scale: the queue list (dashboard overview, `bobbin queues`) and a
# /metrics exposition with QUEUES queues of one ready job each, and one scheduler pass over TASKS recurring tasks that
# all tick at once. Writes to DATABASE_URL's Bobbin tables and deletes what it wrote. Prints one JSON line.
# Usage: DATABASE_URL=postgres:///scratch ruby bench/operator_scale.rb [QUEUES] [TASKS]
require "bundler/setup"
require "bobbin"
require "json"

QUEUES = Integer(ARGV[0] || 10_000)
TASKS = Integer(ARGV[1] || 300)

# A job class for the recurring tasks' ticks.
class ScaleTickJob
  include Bobbin::Job

  def perform(_number) = nil
end

def seconds = Bobbin.monotonic.then { |start| yield.then { Bobbin.monotonic - start } }

Bobbin.connect(ENV.fetch("DATABASE_URL"))
Bobbin.migrate!
Bobbin.config.logger.level = Logger::WARN
abort "operator_scale: the database has jobs already; give it a scratch database" if Bobbin::JobRecord.exists?

begin
  now = Time.now.utc
  Bobbin::JobRecord.insert_all(Array.new(QUEUES) do |i|
    { queue: "scale-#{i}", class_name: "ScaleTickJob", arguments: "[0]", priority: 0, run_at: now, max_attempts: 1, state: "ready", attempts: 0, enqueued_at: now }
  end)
  queues = seconds { Bobbin::Operator::Stats.queues(cap: 10_000) }
  metrics = seconds { Bobbin::Metrics.text }

  tasks = Array.new(TASKS) { |i| Bobbin::Recurring::Task.parse("scale_#{i}", { schedule: "every second", class: "ScaleTickJob", args: [ i ] }, "bench") }
  scheduler = Bobbin::Recurring::Scheduler.new(tasks)
  tick = Time.now.floor
  scheduler.pass(tick)
  pass = seconds { scheduler.pass(tick + 1) }
  ticked = Bobbin::RecurringRun.where(run_at: tick + 1).count
  puts JSON.generate(queues: QUEUES, queue_list_s: queues.round(3), metrics_s: metrics.round(3), tasks: TASKS, ticks_enqueued: ticked,
                     scheduler_pass_s: pass.round(3), adapter: Bobbin::Record.connection_db_config.adapter)
ensure
  Bobbin::RecurringRun.delete_all
  Bobbin::RecurringTask.delete_all
  Bobbin::JobRecord.delete_all
end
