# frozen_string_literal: true

# bin/bench --profile (part): io-event's selectors side by side under Bobbin's fiber pools on PostgreSQL
# (bench_bobbin). Each round runs every workload once per selector, alternated, each in a fresh process with
# IO_EVENT_SELECTOR set (io-event's own switch; without it, io-event picks URing where it was built with
# liburing, else EPoll):
#   noop     20,000 jobs that do nothing, fibers: 100 (claims and outcome writes: PostgreSQL's sockets)
#   sleep    10,000 jobs of Kernel.sleep(0.02), fibers: 500 (timers)
#   stream   500 jobs streaming 40 tokens 20 ms apart from the demo's fake LLM over HTTP, one UPDATE per token,
#            fibers: 500 (sockets both ways: the app's own I/O)
# Prints jobs/s per workload and selector (median of the rounds, with min–max) as a markdown table.
#
#   ruby bench/selector.rb [--rounds 5] [--selectors EPoll,URing]
require "bundler/setup"
require "bobbin"
require "io/event"
require "json"
require "optparse"
require_relative "../demo/stream_reply_job"

PORT = ENV.fetch("BENCH_PG_PORT", "5432")
URL = "postgres:///#{ENV.fetch('BENCH_PG_DATABASE', 'bench_bobbin')}?port=#{PORT}&pool=12".freeze
WORKLOADS = {
  "noop" => { jobs: 20_000, fibers: 100 },
  "sleep" => { jobs: 10_000, fibers: 500 },
  "stream" => { jobs: 500, fibers: 500 }
}.freeze

class SelectorNoopJob
  include Bobbin::Job
  def perform = nil
end

class SelectorSleepJob
  include Bobbin::Job
  def perform = Kernel.sleep(0.02)
end

module SelectorBench
  module_function

  # In a child: enqueue the workload, drain it, print {selector, jobs_per_second}.
  def child(workload)
    Bobbin.config.logger.level = Logger::WARN
    Bobbin.connect(URL)
    spec = WORKLOADS.fetch(workload)
    ActiveRecord::Base.connection_pool.with_connection { |c| c.execute("TRUNCATE bobbin_jobs, demo_messages") }
    pairs = if workload == "stream"
      ids = StreamReplyJob::Message.insert_all(Array.new(spec[:jobs]) { { content: "" } }, returning: [ :id ]).rows.flatten
      ids.map { |id| [ StreamReplyJob, [ id ] ] }
    else
      Array.new(spec[:jobs]) { [ workload == "noop" ? SelectorNoopJob : SelectorSleepJob, [] ] }
    end
    pairs.each_slice(5_000) { |slice| Bobbin.enqueue_all(slice) }
    GC.start
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    Bobbin::Worker.new(queues: [ "*" ], fibers: spec[:fibers], polling_interval: 0.05).run_until_empty
    wall = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
    done = Bobbin::JobRecord.where(state: "succeeded").count
    raise "#{workload}: #{done} of #{spec[:jobs]} succeeded" unless done == spec[:jobs]

    selector = IO::Event::Selector.default.name.split("::").last
    puts JSON.generate(selector: selector, jobs_per_second: spec[:jobs] / wall)
  end

  def run(rounds, selectors)
    server = start_llm
    results = Hash.new { |hash, key| hash[key] = [] }
    rounds.times do
      WORKLOADS.each_key do |workload|
        selectors.each do |selector|
          out = IO.popen({ "IO_EVENT_SELECTOR" => selector }, [ RbConfig.ruby, __FILE__, "child", workload ], &:read)
          raise "#{workload} on #{selector} failed" unless $?.success?

          result = JSON.parse(out.lines.last)
          raise "asked for #{selector}, ran #{result['selector']}" unless result["selector"] == selector

          results[[ workload, selector ]] << result["jobs_per_second"]
        end
      end
    end
    report(results, rounds, selectors)
  ensure
    Process.kill(:TERM, server) if server
  end

  def start_llm
    reader, writer = IO.pipe
    pid = Process.spawn(RbConfig.ruby, File.expand_path("../demo/fake_llm_server.rb", __dir__), "--port", "0", out: writer)
    writer.close
    line = reader.wait_readable(15) && reader.gets or abort("selector.rb: the fake LLM server did not start")
    ENV["DEMO_LLM_URL"] = "http://127.0.0.1:#{line[/\d+/]}"
    pid
  end

  def report(results, rounds, selectors)
    median = ->(values) { values.sort[values.size / 2] }
    puts "## io-event selectors under Bobbin (bench/selector.rb, PostgreSQL, #{rounds} alternated rounds; jobs/s, median (min–max))", ""
    puts "| workload | #{selectors.join(' | ')} | #{selectors.last} / #{selectors.first} |", "|---|#{'---|' * (selectors.size + 1)}"
    WORKLOADS.each_key do |workload|
      cells = selectors.map { |s| results[[ workload, s ]].then { |v| format("%.0f (%.0f–%.0f)", median.(v), v.min, v.max) } }
      ratio = median.(results[[ workload, selectors.last ]]) / median.(results[[ workload, selectors.first ]])
      puts "| #{workload} | #{cells.join(' | ')} | #{format('%.2f', ratio)} |"
    end
  end
end

if ARGV.first == "child"
  SelectorBench.child(ARGV[1])
else
  options = { rounds: 5, selectors: %w[EPoll URing] }
  OptionParser.new do |o|
    o.on("--rounds N", Integer) { |n| options[:rounds] = n }
    o.on("--selectors LIST", Array) { |list| options[:selectors] = list }
  end.parse!
  Bobbin.connect(URL)
  Bobbin.migrate!
  ActiveRecord::Base.connection_pool.with_connection do |c|
    c.create_table(:demo_messages, if_not_exists: true) { |t| t.text :content, null: false }
  end
  SelectorBench.run(options[:rounds], options[:selectors])
end
