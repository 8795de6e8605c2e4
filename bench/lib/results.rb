# frozen_string_literal: true

# Renders bench/RESULTS.md from a run's summary: ratios, efficiency, targets, resources, machine facts, and
# the hand-written analysis in bench/analysis.md.
class Results
  include PickupSections

  TARGETS = [
    [ "noop, one worker process (jobs/s)", "noop", :median, ">=", 3_100 ],
    [ "sleep at C=100 (jobs/s)", "sleep", :median, ">=", 1_800 ],
    [ "http at C=100 (jobs/s)", "http", :median, ">=", 1_800 ],
    [ "burst 0.5–2 s HTTP, all in flight (seconds, first start → last finish)", "burst", :span, "<=", 2.3 ],
    [ "enqueue_all (jobs/s)", "noop", :enqueue, ">=", 20_000 ]
  ].freeze
  IO_WORKLOADS = %w[sleep http burst llm_stream db_mix].freeze

  PARTS = { matrix: "stress matrix", sweep: "throughput-vs-concurrency sweep", enqueue: "one-at-a-time enqueue",
            producers_cell: "enqueue from many producers", idle: "idle load", sqlite_pickup: "SQLite pickup" }.freeze

  # origins: { part => the run its cells come from } for the parts that are not workloads (PARTS). active_job: the
  # "Through Active Job" table's { summary:, enqueue:, run: } (Report#active_job), when not the summary's own.
  # references, added: Report#references and Report#added (systems a later run added, and the same-run Bobbin they
  # are compared with).
  def initialize(summary, facts:, runs:, server_check:, matrix: [], sweep: {}, enqueue: {}, origins: {}, producers: [], idle: [], sqlite_pickup: [],
                 active_job: nil, references: {}, added: {})
    @references = references
    @added = added
    @active_job = active_job || { summary: summary, enqueue: enqueue }
    @producers = producers
    @sqlite_pickup = sqlite_pickup
    @idle = idle
    @origins = origins
    @enqueue = enqueue
    @matrix = matrix
    @sweep = sweep
    @summary = summary
    @facts = facts
    @runs = runs
    @server_check = server_check
  end

  def to_s
    [ header, ratios, active_job, throughput, sweep, enqueue, producers, latency, sqlite_pickup, idle, stress, targets, resources, machine, analysis ].compact.join("\n")
  end

  private
    def fmt(value, digits = 0) = value.nil? ? "—" : (digits.zero? ? value.round.to_s : value.round(digits).to_s)

    def bobbin(workload) = @summary.dig(workload, "bobbin-fibers")

    # True when these numbers (a system's stats or a cell) come from a later run that added the system to its table.
    def added?(numbers) = numbers&.dig("added") || false

    # Marks a system measured in a later run than the rest of its table.
    def label(system, numbers) = added?(numbers) ? "#{system} †" : system

    # The note under a table with added systems.
    def added_note(used)
      return "" if used.empty?

      "\n† #{used.uniq.map { |run| "#{@added[run][:systems].join(', ')}: run `#{run}`" }.join('; ')}, added after the rest of the table " \
        "was measured; ratios against it use Bobbin fibers of that same run (#{used.uniq.map { |run| reference_line(run) }.join('; ')}).\n"
    end

    def reference_line(run)
      ref = @references.dig(run, :summary) || {}
      ref.filter_map { |workload, systems| (m = systems.dig(Report::REFERENCE, "median")) && "#{workload} #{fmt(m)}" }.join(", ").then { |t| t.empty? ? "no workloads" : "jobs/s #{t}" }
    end

    def header
      <<~MD
        # Bobbin benchmark results

        #{@runs.map { |run| run_line(run) }.join("\n")}

        Systems interleaved (A B C, B C A, …); jobs enqueued before each worker starts (except the open loop); one
        worker process (except the stress matrix); time from the first job's start to the last job's finish as each
        job reports it. Raw data: `results/<run>.json` and `.csv`; charts in `results/charts/`. Every cell checks
        that each job ran exactly once (a ledger of job keys); a round that lost, repeated or failed a job is counted
        in "bad rounds" and left out of the medians, never dropped silently.

        #{server_check}
      MD
    end

    def server_check
      c = @server_check
      return "Fake LLM/delay server check (older format): #{c['concurrent_requests']} requests in #{fmt(c['seconds'] * 1000)} ms." unless c["p99_ms"]

      "Fake LLM/delay server check: #{c['concurrent_requests']} requests of #{c['delay_ms']} ms each, opened at once and " \
        "held open together, answered in p50 #{fmt(c['p50_ms'])} ms / p99 #{fmt(c['p99_ms'])} ms from their request " \
        "(all ok: #{c['all_ok']}): the server adds #{fmt(c['p99_ms'] - c['delay_ms'])} ms at p99 with thousands of open " \
        "connections, so it is not what limits any system here."
    end

    # "- Run `name` (`bin/bench`): what it contributes, each with its rounds."
    def run_line(run)
      name, options = run.values_at("name", "options")
      quick = options["quick"]
      workloads = @summary.keys.select { |w| @summary[w].values.any? { |s| s["run"] == name && !added?(s) } }
      parts = []
      parts << "#{workloads.join(', ')}, " + (quick ? "1 round of reduced job counts, no warm-up" :
        "#{options['rounds']} measured rounds after a warm-up round whose throughput sizes each steady cell to ≥ #{Plan::STEADY_SECONDS} s") if workloads.any?
      once = %i[matrix sweep producers_cell idle sqlite_pickup].filter_map { |part| PARTS[part] if @origins[part] == name }
      parts << "#{once.join(' and ')}, one round per cell#{' of reduced job counts' if quick}" if once.any?
      parts << "#{PARTS[:enqueue]}, " + (quick ? "1 round of reduced job counts" : "#{options['rounds']} rounds") if @origins[:enqueue] == name
      if @active_job[:run] == name && parts.empty?
        parts << "the Through Active Job table (#{@active_job[:summary].keys.join(', ')}, one-at-a-time perform_later), " +
                 (quick ? "1 round of reduced job counts" : "#{options['rounds']} measured rounds after a warm-up round")
      end
      if (added = @added[name])
        rounds = quick ? "1 round of reduced job counts" : "#{options['rounds']} measured rounds"
        parts << "#{added[:systems].join(', ')} added to #{added[:parts].map { |part| PARTS[part.to_sym] || part }.join(', ')} " \
                 "(#{rounds}; marked †), beside Bobbin fibers of the same run"
      end
      "- Run `#{name}` (`bin/bench#{' --quick' if quick}`): #{parts.join('; ')}."
    end

    def ratios
      peers = Report::PEERS.select { |p| @summary.values.any? { |s| s.key?(p) } }
      used = []
      rows = @summary.reject { |workload, _| Plan::WORKLOADS.dig(workload, :rate) }.map do |workload, systems|
        "| #{workload} | " + peers.map do |p|
          m = systems.dig(p, "median")
          mine = systems.dig("bobbin-fibers", "median")
          if added?(systems[p])
            used << systems[p]["run"]
            mine = @references.dig(systems[p]["run"], :summary, workload, Report::REFERENCE, "median")
          end
          m && mine ? "#{fmt(mine.fdiv(m), 2)}×#{' †' if added?(systems[p])}" : "—"
        end.join(" | ") + " |"
      end
      "## Bobbin (fibers) ÷ each peer, median jobs/s\n\n| workload | #{peers.join(' | ')} |\n|---|#{'---|' * peers.size}\n#{rows.join("\n")}\n#{added_note(used)}"
    end

    # Bobbin through Active Job against every system's Active Job path, in the same run: jobs/s and the ratio.
    def active_job
      summary, enqueue = @active_job.values_at(:summary, :enqueue)
      peers = Plan::ACTIVE_JOB.drop(1).select { |p| summary.values.any? { |s| s.key?(p) } || enqueue.key?(p) }
      return if peers.empty? || (summary.values.none? { |s| s.key?("bobbin-fibers-aj") } && !enqueue.key?("bobbin-fibers-aj"))

      rows = summary.filter_map do |workload, systems|
        mine = systems.dig("bobbin-fibers-aj", "median") or next
        "| #{workload} | #{fmt(mine)} | " + peers.map { |p| (m = systems.dig(p, "median")) ? "#{fmt(m)} (#{fmt(mine.fdiv(m), 2)}×)" : "—" }.join(" | ") + " |"
      end
      { "bobbin-fibers-aj" => "perform_later, one at a time", Plan::NONDURABLE => "perform_later, one at a time, `durable_enqueue = false`" }.each do |system, label|
        one = enqueue.dig(system, "median") or next
        rows << "| #{label} | #{fmt(one)} | " + peers.map { |p| (m = enqueue.dig(p, "median")) ? "#{fmt(m)} (#{fmt(one.fdiv(m), 2)}×)" : "—" }.join(" | ") + " |"
      end
      "## Through Active Job\n\nEvery system through `perform_later`/`perform_all_later` and its Active Job adapter, in the " \
        "production Rails app of `bench/app`, one worker process; jobs/s median (Bobbin ÷ that system)#{" of run `#{@active_job[:run]}`" if @active_job[:run]}. " \
        "Targets: noop ≥ 2× sidekiq-aj; one-at-a-time perform_later ≥ sidekiq-aj (other runs, and what limits Bobbin: " \
        "\"Through Active Job (issue 18)\" below).\n\n| workload | bobbin-fibers-aj | #{peers.join(' | ')} |\n" \
        "|---|---|#{'---|' * peers.size}\n#{rows.join("\n")}\n#{active_job_spread(summary, enqueue)}"
    end

    # Each system's range over the rounds, and its bad rounds, under the table.
    def active_job_spread(summary, enqueue)
      cells = summary.flat_map { |workload, systems| systems.map { |system, s| [ workload, system, s ] } } +
              enqueue.map { |system, s| [ "perform_later one at a time", system, s ] }
      ranges = cells.map { |what, system, s| "#{system} #{what} #{fmt(s['min'])}–#{fmt(s['max'])}#{" (#{s['bad_rounds']}/#{s['rounds']} bad: #{s['errors'].first&.slice(0, 60) || 'missing/duplicate/timeout'})" if s['bad_rounds'].positive?}" }
      "\nRange over the rounds (min–max jobs/s): #{ranges.join('; ')}.\n"
    end

    def throughput
      rows = @summary.flat_map do |workload, systems|
        latency = Plan::WORKLOADS.dig(workload, :latency)
        systems.map do |system, s|
          ideal = latency && s["concurrency"] / latency
          ideal = s["jobs"] / 2.0 if workload == "burst" && s["concurrency"] >= s["jobs"] # all at once: the slowest (2 s) bounds it
          eff = ideal && s["median"] ? "#{fmt(100.0 * [ s['median'] / ideal, 1 ].min)} %" : "—"
          "| #{workload} | #{label(system, s)} | #{s['concurrency']} | #{s['pool'] || '—'} | #{fmt(s['median'])} (#{fmt(s['min'])}–#{fmt(s['max'])}) | #{eff} | #{fmt(s['enqueue_per_second'])} | #{s['bad_rounds']}/#{s['rounds']} #{s['errors'].first&.slice(0, 60)} |"
        end
      end
      "## Throughput\n\nEfficiency = achieved ÷ ideal (concurrency ÷ latency; burst with every job in flight at once: jobs ÷ 2.0 s).\n\n" \
        "| workload | system | concurrency | AR pool | jobs/s median (min–max) | efficiency | enqueue jobs/s | bad rounds |\n" \
        "|---|---|---|---|---|---|---|---|\n#{rows.join("\n")}\n"
    end

    def sweep
      return if @sweep.empty?

      latency = Plan::WORKLOADS.dig(Plan::SWEEP[:workload], :latency)
      cs = @sweep.values.flat_map(&:keys).uniq.sort
      rows = @sweep.map do |system, points|
        "| #{system} | " + cs.map { |c| points.key?(c) ? (points[c] ? "#{fmt(points[c])} (#{fmt(100 * points[c] * latency / c)} %)" : "failed") : "—" }.join(" | ") + " |"
      end
      "## Throughput vs concurrency\n\n#{Plan::SWEEP[:jobs_per_slot]} × C jobs of sleep #{fmt(latency * 1000)} ms per cell, one round, one worker " \
        "process; jobs/s (efficiency against C ÷ latency). Thread pools get the pools of the main tables (peers capped at " \
        "#{Plan::MAX_THREAD_POOL} connections). Chart: `results/charts/throughput-vs-concurrency.svg`.\n\n" \
        "| system | #{cs.map { |c| "C = #{c}" }.join(' | ')} |\n|---|#{'---|' * cs.size}\n#{rows.join("\n")}\n"
    end

    def enqueue
      return if @enqueue.empty?

      rows = @enqueue.map do |system, s|
        "| #{label(system, s)} | #{fmt(s['bulk'])} | #{fmt(s['median'])} (#{fmt(s['min'])}–#{fmt(s['max'])}) | #{s['bad_rounds']}/#{s['rounds']} #{s['errors'].first&.slice(0, 60)} |"
      end
      @enqueue.each do |system, s|
        next unless added?(s) && (ref = @references.dig(s["run"], :enqueue, Report::REFERENCE))

        rows << "| #{Report::REFERENCE} (run `#{s['run']}`, beside #{system}) | #{fmt(ref['bulk'])} | #{fmt(ref['median'])} (#{fmt(ref['min'])}–#{fmt(ref['max'])}) | " \
                "#{ref['bad_rounds']}/#{ref['rounds']} |"
      end
      "## Enqueue\n\nOne process enqueuing no-op jobs. Bulk: each system's bulk API (Bobbin `enqueue_all`, Active Job " \
        "`perform_all_later`, Sidekiq `push_bulk`; Async::Job has none, so one `call` per job), timed before each noop cell, median. " \
        "One at a time: the single-job API (Bobbin `Job.enqueue`, `perform_later`, `perform_async`, the processor's `call`) in a loop, " \
        "#{@enqueue.values.first['jobs']} jobs per round with no worker running, median (min–max) over rounds. " \
        "Chart: `results/charts/enqueue-one-at-a-time.svg`.\n\n" \
        "| system | bulk jobs/s | one at a time jobs/s | bad rounds |\n|---|---|---|---|\n#{rows.join("\n")}\n"
    end

    def latency
      rows = @summary.flat_map do |workload, systems|
        systems.filter_map do |system, s|
          l = s["latency_ms"] or next
          r = s["returned_ms"] || {}
          "| #{system} | #{Report.open_loop(workload)} | #{fmt(l['p50'], 1)} | #{fmt(l['p90'], 1)} | #{fmt(l['p99'], 1)} | " \
            "#{fmt(r['p50'], 1)} / #{fmt(r['p99'], 1)} | #{s['bad_rounds']}/#{s['rounds']} |"
        end
      end
      return if rows.empty?

      "## Open-loop latency\n\nJobs (10 ms each) arrive one at a time at a fixed rate while the worker runs; " \
        "each an enqueue call of one job through the system's bulk API (as in the other cells); milliseconds, median over rounds. " \
        "Most cells measure enqueue → start from the moment the enqueue call began (p50, p90, p99), and from the moment it returned, " \
        "its commit done (\"from return\", p50 / p99); the scheduled cell enqueues each job to run some seconds later and measures how " \
        "late it started (start − run_at). Charts: `results/charts/<workload>-percentiles.svg`.\n\n" \
        "| system | cell: what is measured | p50 | p90 | p99 | from return p50 / p99 | bad rounds |\n|---|---|---|---|---|---|---|\n" \
        "#{rows.join("\n")}\n"
    end

    def stress
      return if @matrix.empty?

      rows = @matrix.map do |c|
        state = Report.bad?(c) ? "**incomplete**" : "completed"
        "| #{label(c['system'], c)} | #{c['processes']} | #{c['concurrency']} | #{c['pool']} | #{state} | #{c['missing'] || '—'} | #{c['duplicates'] || '—'} | " \
          "#{c['peak_connections'] || '—'} | #{fmt(c['jobs_per_second'])} | #{c['error']&.slice(0, 80)} |"
      end
      "## Stress matrix (PostgreSQL max_connections #{@facts['max_connections']})\n\n" \
        "#{@matrix.first['jobs']} × sleep 50 ms per cell; each of the processes has the pool its system's docs ask for " \
        "(threads + 2 for thread pools; Bobbin: its threads, or 5 for a fiber pool). Missing = failed or never run.\n\n" \
        "| system | processes | per-process concurrency | pool per process | cell | missing | duplicates | peak PG sessions | jobs/s | error |\n" \
        "|---|---|---|---|---|---|---|---|---|---|\n#{rows.join("\n")}\n"
    end

    def targets
      rows = TARGETS.map do |label, workload, metric, op, goal|
        s = bobbin(workload)
        value = s && { median: s["median"], span: s["span_seconds"], enqueue: s["enqueue_per_second"] }[metric]
        met = value && (op == ">=" ? value >= goal : value <= goal)
        "| #{label} | #{op} #{goal} | #{fmt(value, metric == :span ? 2 : 0)} | #{value.nil? ? 'not run' : (met ? 'met' : 'missed')} |"
      end
      if @sweep["bobbin-fibers"]&.key?(500)
        at500 = @sweep["bobbin-fibers"][500]
        rows << "| sleep at C=500, 50 % of C ÷ latency (jobs/s) | >= 5000 | #{fmt(at500)} | #{at500 && at500 >= 5_000 ? 'met' : 'missed'} |"
      end
      if (one = @enqueue.dig("bobbin-fibers", "median"))
        rows << "| enqueue one at a time, `Job.enqueue` (jobs/s) | reported | #{fmt(one)} | — |"
      end
      io = IO_WORKLOADS.select { |w| @summary.dig(w, "bobbin-fibers", "median") && @summary.dig(w, "async_job", "median") }
      if io.any?
        behind = io.reject { |w| @summary[w]["bobbin-fibers"]["median"] >= @summary[w]["async_job"]["median"] }
        rows << "| I/O workloads: at least Async::Job on Redis (#{io.join(', ')}) | ≥ 1× each | " \
                "#{behind.empty? ? 'ahead on all' : "behind on #{behind.join(', ')}"} | #{behind.empty? ? 'met' : 'missed'} |"
      end
      mine = @matrix.select { |c| c["system"].start_with?("bobbin") }
      if mine.any?
        complete = mine.count { |c| !Report.bad?(c) }
        rows << "| stress matrix: every Bobbin cell completes, 0 failed jobs | #{mine.size}/#{mine.size} | #{complete}/#{mine.size} | " \
                "#{complete == mine.size ? 'met' : 'missed'} |"
      end
      cpu = @summary["cpu"]
      if cpu&.dig("bobbin-fibers", "median") && cpu&.dig("bobbin-threads", "median")
        ratio = cpu["bobbin-fibers"]["median"].fdiv(cpu["bobbin-threads"]["median"])
        rows << "| cpu: fibers within 5 % of threads | ≥ 0.95× | #{fmt(ratio, 2)}× | #{ratio >= 0.95 ? 'met' : 'missed'} |"
      end
      rows.concat(pickup_targets)
      "## Targets (issues 5 and 15), Bobbin fibers\n\n| target | goal | measured | |\n|---|---|---|---|\n#{rows.join("\n")}\n"
    end

    def resources
      rows = @summary.flat_map do |workload, systems|
        systems.map { |system, s| "| #{workload} | #{label(system, s)} | #{s['peak_rss_mb']} | #{s['peak_connections']} | #{fmt(s['cpu_seconds'], 1)} | #{s['missing']} | #{s['duplicates']} |" }
      end
      "## Resources and correctness (worst round)\n\n| workload | system | peak RSS MB | peak PG sessions | worker CPU s (median) | missing | duplicates |\n|---|---|---|---|---|---|---|\n#{rows.join("\n")}\n"
    end

    def machine
      gems = @facts["gems"].map { |name, version| "#{name} #{version}" }.join(", ")
      "## Machine\n\n#{@facts['cores']} cores (#{@facts['cpu']}), #{@facts['memory_gb']} GiB, Linux #{@facts['kernel']}; #{@facts['ruby']}\n\n" \
        "PostgreSQL #{@facts['postgresql']} (max_connections #{@facts['max_connections']}, shared_buffers #{@facts['shared_buffers']}, " \
        "synchronous_commit #{@facts['synchronous_commit']}), Redis #{@facts['redis']}, on the same machine.\n\nGems: #{gems}\n"
    end

    def analysis
      path = File.join(Report::DIR, "analysis.md")
      File.exist?(path) ? File.read(path) : ""
    end
end
