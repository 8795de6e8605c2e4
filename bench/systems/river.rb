# frozen_string_literal: true

# River for Ruby in the benchmark, set up as its README does for production: the Active Record driver, one
# client with the `default` queue at N worker threads (its concurrency model), its default fetch cooldown (0.1 s)
# and poll interval (1 s), and LISTEN/NOTIFY on its own connection.
# `ruby systems/river.rb reset | enqueue WORKLOAD N PREFIX | work threads N | produce MODE PRODUCERS COUNT PREFIX`
require "active_record"
require "pg"
require "riverqueue-activerecord"
require "json"
require_relative "../lib/work"

# River's job arguments: a kind and a JSON body.
class BenchRiverArgs
  def initialize(workload, key) = (@workload = workload; @key = key)

  def kind = "bench"

  def to_json(*) = JSON.generate(workload: @workload, key: @key)
end

# Works each job through Work, like every other system.
class BenchRiverWorker
  def self.kind = "bench"

  def work(job) = Work.run(job.args.fetch("workload"), job.args.fetch("key"))
end

ActiveRecord::Base.establish_connection(ENV.fetch("DATABASE_URL"))
ActiveRecord::Base.logger = nil

def river_client(threads = nil)
  queues = threads ? { default: Integer(threads) } : {}
  River::Client.new(River::Driver::ActiveRecord.new, config: River::Config.new(queues: queues, workers: River::Workers.new.add(BenchRiverWorker)))
end

def insert_opts(key) = Work.due(key)&.then { |at| River::InsertOpts.new(scheduled_at: at) }

client = river_client
Work.enqueue_one = ->(workload, key) { client.insert(BenchRiverArgs.new(workload, key)) }
command, *args = ARGV
case ($PROGRAM_NAME == __FILE__) && command
when "reset"
  River::Migrator.new(River::Driver::ActiveRecord.new).migrate(direction: :up)
  ActiveRecord::Base.connection.execute("TRUNCATE river_job")
when "enqueue"
  workload, count, prefix = args
  Work.enqueue(count, prefix, workload, slice: 5_000) do |keys|
    client.insert_many(keys.map { |key| River::InsertManyParams.new(BenchRiverArgs.new(workload, key), insert_opts: insert_opts(key)) })
  end
when "produce"
  Work.produce(*args)
when "work"
  _mode, size = args
  worker = river_client(size)
  Signal.trap("TERM") { Thread.new { worker.stop; exit } }
  worker.start
  sleep
end
