# frozen_string_literal: true

require "json"
require "open3"
require "tmpdir"
require_relative "sampler"
require_relative "app_db"
require_relative "start_line"

# One measurement: one system, one workload, one round. Jobs are enqueued before the worker starts; the
# clock runs from the first job's start to the last job's finish, as the ledger reports them.
class Cell
  BENCH = File.expand_path("..", __dir__)

  def initialize(system, workload, jobs:, concurrency:, env:, ledger:, round:, rate: nil, ahead: nil, children: 0, processes: 1)
    @processes = processes
    @ahead = ahead
    @system = system
    @workload = workload
    @rate = rate
    @children = children
    @jobs = jobs
    @concurrency = concurrency
    @env = env
    @ledger = ledger
    @prefix = "#{system[:name]}-#{workload}-#{round}-#{rand(1 << 30)}"
  end

  # Runs the cell; returns its numbers (or an error, never a silent gap).
  def run(timeout:)
    script(@env, "reset")
    AppDB.reset(@system[:database], ENV.fetch("BENCH_PG_PORT")) if @system[:database]
    settle
    enqueue = enqueue_seconds(@env) unless @rate
    pids = Array.new(@processes) do
      Process.spawn(@env, RbConfig.ruby, script_path, "work", @system[:mode], @concurrency.to_s,
                    chdir: BENCH, out: log_path, err: log_path, pgroup: true)
    end
    sampler = Sampler.new(pids, @system[:database])
    enqueue = open_loop(pids) if @rate
    finished = wait_for_jobs(pids, timeout) && wait_for_jobs(pids, timeout, child_prefix, @jobs * @children)
    sleep 0.3 # late duplicates still arrive
    cpu = sampler.stop
    stop(pids)
    result(enqueue, finished, sampler, cpu)
  rescue StandardError => error
    failure(error)
  ensure
    stop(pids) if pids # also on Ctrl-C: a worker left behind would steal the next run's jobs
    [ @prefix, child_prefix, "#{@prefix}-probe", "#{@prefix}#{Work::RETURNED}" ].each { |prefix| @ledger.forget(prefix) }
  end

  # Enqueues the cell's jobs one at a time through the system's single-job API, with no worker running, then
  # drops them; returns the rate.
  def enqueue_one
    script(@env, "reset")
    seconds = enqueue_seconds(@env.merge("BENCH_ENQUEUE" => "one"))
    script(@env, "reset")
    identity.merge("enqueue_one_per_second" => @jobs / seconds)
  rescue StandardError => error
    failure(error)
  end

  # Enqueues the cell's no-op jobs from `producers` threads or fibers of one process, one single-job call each, no
  # worker running; returns jobs/s and the p50/p99 of a call.
  def produce(mode, producers)
    script(@env, "reset")
    out = script(@env, "produce", mode, producers.to_s, @jobs.to_s, @prefix)
    script(@env, "reset")
    identity.merge(JSON.parse(out.lines.last)).merge("mode" => mode, "producers" => producers)
  rescue StandardError => error
    failure(error).merge("mode" => mode, "producers" => producers)
  end

  # Runs an idle worker for `seconds` (after a few to settle) and counts the transactions its database commits
  # meanwhile, and (Bobbin) the claim statements it sends.
  def idle(seconds)
    script(@env, "reset")
    pid = Process.spawn(@env, RbConfig.ruby, script_path, "work", @system[:mode], @concurrency.to_s, chdir: BENCH, out: log_path, err: log_path, pgroup: true)
    sleep(5)
    before = idle_counters
    # Bobbin's count reaches its process row with a heartbeat (every 10 s): start from the first that carries one.
    20.times { before[:claims] && !before[:at] ? (sleep(1); before = idle_counters) : break }
    sleep(seconds)
    after = idle_counters
    per_minute = ->(key, span = seconds) { after[key] && before[key] && (after[key] - before[key]) * 60.0 / span }
    claims = per_minute.call(:claims, after[:at].to_f - before[:at].to_f) if after[:at] && before[:at] && after[:at] > before[:at]
    identity.merge("idle_seconds" => seconds, "transactions_per_minute" => per_minute.call(:xacts), "claims_per_minute" => claims)
  rescue StandardError => error
    failure(error)
  ensure
    stop([ pid ]) if pid
  end

  # Seconds `settle` waits at most for the machine to go quiet, and how idle (the share of CPU time) counts as quiet.
  SETTLE = { seconds: 15, idle: 0.85, window: 0.5 }.freeze

  private
    # Lets what the previous cell left behind finish before this one starts, so that no system pays for another's
    # (a killed worker's backlog being vacuumed or written out): waits until the CPUs are idle for SETTLE[:idle] of a
    # SETTLE[:window] (at most SETTLE[:seconds]). Only where /proc/stat exists. (Not a CHECKPOINT: the first write of
    # each page after one puts the whole page in the WAL, which would slow the next cell's commits instead.)
    def settle
      return unless File.exist?("/proc/stat")

      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + SETTLE[:seconds]
      until Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
        before = cpu_times
        sleep SETTLE[:window]
        busy, idle = cpu_times.zip(before).map { |now, was| now - was }
        break if idle >= SETTLE[:idle] * (busy + idle)
      end
    end

    # The machine's [busy, idle] CPU time so far (ticks; iowait counts as idle).
    def cpu_times
      fields = File.foreach("/proc/stat").first.split.drop(1).map(&:to_i)
      idle = fields[3] + fields[4]
      [ fields.take(8).sum - idle, idle ]
    end

    # Transactions committed in the system's database so far; Bobbin's claim statements from its process row, with the
    # time of the last one counted (a heartbeat writes the count; the claims between two such times give an exact rate).
    def idle_counters
      db = PG.connect(dbname: @system[:database], port: ENV.fetch("BENCH_PG_PORT"))
      db.exec("SELECT pg_stat_clear_snapshot()")
      xacts = db.exec_params("SELECT xact_commit FROM pg_stat_database WHERE datname = $1", [ @system[:database] ]).getvalue(0, 0).to_i
      return { xacts: xacts } unless @system[:script].start_with?("bobbin")

      status = JSON.parse(db.exec("SELECT metadata FROM bobbin_processes WHERE kind = 'worker'").getvalue(0, 0))
      { xacts: xacts, claims: status["claims"].to_i, at: status["last_claim_at"] }
    ensure
      db&.close
    end

    def failure(error) = identity.merge("error" => "#{error.class}: #{error.message}"[0, 800])

    # A system's script: bench/systems/<script>.rb, or an absolute path (the harness's own tests use a stand-in).
    def script_path = File.expand_path("#{@system[:script]}.rb", File.join(BENCH, "systems"))

    def log_path = File.join(BENCH, "tmp", "#{@system[:name]}.log")

    # The worker log's last lines without backtrace frames, for an error that must survive the next
    # cell truncating the log.
    def log_tail
      return "(no log)" unless File.exist?(log_path)

      File.readlines(log_path, chomp: true).grep_v(/\A\s+from /).last(5).join(" ⏎ ").tr("|", "/")
    end

    def script(env, *args)
      out, status = Open3.capture2e(env, RbConfig.ruby, script_path, *args, chdir: BENCH)
      raise "#{@system[:name]} #{args.first} failed: #{out.lines.last(3).join}" unless status.success?

      out
    end

    def enqueue_seconds(env, jobs = @jobs, prefix = @prefix)
      JSON.parse(script(env, "enqueue", @workload, jobs.to_s, prefix).lines.last)["enqueue_seconds"]
    end

    # Open loop: once the worker has run a first job, jobs arrive one at a time at @rate per second (scheduled
    # @ahead seconds ahead, if given), from one enqueuing process per ARRIVALS_PER_PROCESS, all started together
    # once all have booted.
    ARRIVALS_PER_PROCESS = 500

    def open_loop(pids)
      enqueue_seconds(@env, 1, "#{@prefix}-probe")
      wait_for_jobs(pids, 60, "#{@prefix}-probe", 1) or raise "#{@system[:name]} ran no job within #{STALL_SECONDS} s of starting"
      producers = (@rate.to_f / ARRIVALS_PER_PROCESS).ceil
      Dir.mktmpdir("bench-barrier") do |barrier|
        env = @env.merge("BENCH_RATE" => @rate.to_s, "BENCH_AHEAD" => @ahead&.to_s, "BENCH_STRIDE" => producers.to_s, "BENCH_BARRIER" => barrier)
        threads = Array.new(producers) { |k| Thread.new { enqueue_seconds(env.merge("BENCH_OFFSET" => k.to_s)) } }
        StartLine.go(barrier, producers) { threads.any? { |t| !t.alive? } }
        threads.map(&:value).max
      end
    end

    # No job of the cell has finished for this long (no job here takes more than a few seconds; boot fits in it):
    # the rest are lost (e.g. failed on "too many clients"), so the cell ends as timed out without waiting it out.
    STALL_SECONDS = 45

    def wait_for_jobs(pids, timeout, prefix = @prefix, jobs = @jobs)
      now = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      deadline = now + timeout
      seen, progress_at = 0, now
      until (done = @ledger.distinct(prefix)) >= jobs
        now = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        seen, progress_at = done, now if done > seen
        return false if now > deadline || now - progress_at > STALL_SECONDS
        raise "#{@system[:name]} worker exited early: #{log_tail}" if pids.any? { |pid| Process.wait(pid, Process::WNOHANG) }

        sleep 0.05
      end
      true
    end

    # TERM to every worker's process group; KILL what is left after 5 s.
    def stop(pids)
      signal(pids, "TERM")
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 5
      live = pids.reject { |pid| reaped?(pid) }
      until live.empty? || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
        sleep 0.25
        live.reject! { |pid| reaped?(pid) }
      end
      signal(live, "KILL")
      live.each { |pid| reaped?(pid, 0) }
    end

    def signal(pids, name)
      pids.each do |pid|
        Process.kill(name, -pid)
      rescue Errno::ESRCH
        nil
      end
    end

    def reaped?(pid, flags = Process::WNOHANG)
      !Process.wait(pid, flags).nil?
    rescue Errno::ECHILD
      true
    end

    # Jobs the cell's jobs enqueue themselves (llm_stream's broadcasts) are keyed under this prefix.
    def child_prefix = "#{@prefix}~child"

    # Jobs/s counts the cell's own jobs; the clock stops when the last of them, or of their children, finishes.
    def result(enqueue, finished, sampler, cpu)
      runs = @ledger.runs(@prefix)
      children = @ledger.runs(child_prefix)
      starts = runs.values.flatten(1).map(&:first)
      finishes = (runs.values + children.values).flatten(1).map(&:last)
      span = runs.empty? ? nil : finishes.max - starts.min
      identity.merge("completed" => runs.size, "missing" => @jobs - runs.size + @jobs * @children - children.size,
        "duplicates" => runs.values.sum(&:size) - runs.size + children.values.sum(&:size) - children.size, "timed_out" => !finished,
        "span_seconds" => span, "jobs_per_second" => span && runs.size / span,
        "enqueue_per_second" => @jobs / enqueue, "peak_rss_mb" => sampler.peak_rss_mb,
        "peak_connections" => sampler.peak_connections, "cpu_seconds" => cpu).merge(latencies(runs))
    end

    # Open loop: enqueue → start percentiles in milliseconds (the enqueue call's start ends each key), and for jobs to
    # run now also from the call's return (its commit done) to the start.
    def latencies(runs)
      return {} unless @rate

      waits = runs.map { |key, (first, *)| (first.first - key.split(":").last.to_f) * 1000 }
      returned = @ledger.runs("#{@prefix}#{Work::RETURNED}").to_h { |key, reports| [ key.split(":")[1], reports.first.first ] }
      after = runs.filter_map { |key, (first, *)| returned[key.split(":")[1]]&.then { |at| (first.first - at) * 1000 } }
      { "rate" => @rate, "latency_ms" => percentiles(waits), "returned_ms" => (percentiles(after) if @ahead.nil? && after.any?) }.compact
    end

    def percentiles(values)
      values = values.sort
      [ 50, 90, 99 ].to_h { |p| [ "p#{p}", values[[ (values.size * p / 100.0).ceil - 1, 0 ].max]&.round(1) ] }
    end

    def identity
      { "system" => @system[:name], "workload" => @workload, "jobs" => @jobs, "concurrency" => @concurrency, "pool" => @system[:pool],
        "processes" => @processes }
    end
end
