# frozen_string_literal: true

# The RESULTS.md sections of instant pickup (issue 15): enqueue from many producers, an idle worker's load on its
# database, and the pickup targets (open-loop latency at 200 and 2,000 jobs/s, scheduled jobs' lateness).
module PickupSections
  private
    def producers
      return if @producers.empty?

      counts = @producers.map { |c| c["producers"] }.uniq.sort
      rows = @producers.group_by { |c| [ c["system"], c["mode"] ] }.map do |(system, mode), cells|
        by_count = cells.to_h { |c| [ c["producers"], c ] }
        "| #{system} | #{mode} | " + counts.map { |n| producer_cell(by_count[n]) }.join(" | ") + " |"
      end
      "## Enqueue from many producers\n\n#{@producers.first['jobs']} no-op jobs per cell, enqueued one per call through each system's " \
        "single-job API (`Job.enqueue`, `perform_later`, `perform_async`, River's `insert`) by N threads, or N fibers under Async, of " \
        "one process; no worker running. jobs/s (p50 / p99 of one call, ms).\n\n" \
        "| system | producers as | #{counts.join(' | ')} |\n|---|---|#{'---|' * counts.size}\n#{rows.join("\n")}\n"
    end

    def producer_cell(cell)
      return "—" unless cell
      return "n/a: #{cell['error'].to_s[/: (.{0,60})/, 1]}" if cell["error"]

      "#{fmt(cell['jobs_per_second'])} (#{fmt(cell['p50_ms'], 1)} / #{fmt(cell['p99_ms'], 1)})"
    end

    def idle
      return if @idle.empty?

      rows = @idle.map do |c|
        "| #{label(c['system'], c)} | #{c['error'] ? 'failed' : fmt(c['transactions_per_minute'])} | #{fmt(c['claims_per_minute'], 1)} |"
      end
      "## An idle worker's load on PostgreSQL\n\nOne worker process with nothing to do for #{@idle.first['idle_seconds']} s (after 5 s to settle), " \
        "in its documented production setup: transactions its database commits per minute (pg_stat_database), and for Bobbin the " \
        "claim statements it sends (its own counter); Bobbin's listener also sends a `SELECT 1` after each half polling_interval " \
        "without a word from PostgreSQL (≥ 0.25 s), so that a silently cut connection is noticed within a polling_interval.\n\n| system | transactions / min | claims / min |\n|---|---|---|\n#{rows.join("\n")}\n"
    end

    def sqlite_pickup
      return if @sqlite_pickup.empty?

      rows = @sqlite_pickup.map do |c|
        next "| #{c['setup']} | failed: #{c['error']} | | | |" if c["error"]

        l = c["latency_ms"]
        "| #{c['setup']} | #{fmt(l['p50'], 1)} | #{fmt(l['p90'], 1)} | #{fmt(l['p99'], 1)} | #{fmt(l['max'], 1)} |"
      end
      first = @sqlite_pickup.find { |c| c["jobs"] } || {}
      "## SQLite pickup (the embedded default)\n\n#{first['jobs']} no-op jobs arriving one at a time at #{fmt(first['rate'])}/s to an idle fiber " \
        "worker (bench/sqlite_pickup.rb): in the enqueuing process (async supervisor mode, bin/demo), in another process (it watches " \
        "the database file), and in another process with notifications off (polling every #{first['polling_interval']} s, the default). " \
        "enqueue → start, ms.\n\n| worker | p50 | p90 | p99 | max |\n|---|---|---|---|---|\n#{rows.join("\n")}\n"
    end

    # Rows for the targets table.
    def pickup_targets
      rows = []
      # The durable default, then (where it ran) the variant whose lone enqueue does not wait for the WAL flush.
      { "bobbin-fibers" => "", Plan::NONDURABLE_OPEN_LOOP => ", `durable_enqueue = false`" }.each do |system, variant|
        %w[latency latency_2k].each do |workload|
          cell = @summary.dig(workload, system) or next
          rate = Plan::WORKLOADS.dig(workload, :rate)
          { "returned_ms" => "from its commit (the enqueue call's return)", "latency_ms" => "from the enqueue call's start" }.each do |measure, from|
            l = cell[measure] or next
            met = l["p50"] <= 1 && l["p99"] <= 5
            rows << "| pickup at #{rate} jobs/s arriving#{variant}, #{from}: p50 ≤ 1 ms, p99 ≤ 5 ms | ≤ 1 / ≤ 5 | " \
                    "#{fmt(l['p50'], 1)} / #{fmt(l['p99'], 1)} | #{met ? 'met' : 'missed'} |"
          end
        end
      end
      if (l = bobbin("scheduled")&.dig("latency_ms"))
        rows << "| a job scheduled 2 s ahead starts within 5 ms of its run_at (p99) | ≤ 5 ms | #{fmt(l['p99'], 1)} | #{l['p99'] <= 5 ? 'met' : 'missed'} |"
      end
      if (idle = @idle.find { |c| c["system"] == "bobbin-fibers" && c["claims_per_minute"] })
        limit = 60.0 / 10 # one claim per notified_polling_interval (10 s)
        rows << "| idle worker: at most one claim per polling interval (claims/min) | ≤ #{fmt(limit)} | #{fmt(idle['claims_per_minute'], 1)} | " \
                "#{idle['claims_per_minute'] <= limit ? 'met' : 'missed'} |"
      end
      if (cell = @producers.find { |c| c["system"] == "bobbin-fibers" && c["mode"] == "threads" && c["producers"] == 16 && c["jobs_per_second"] })
        rows << "| 16 producer threads, `Job.enqueue` (jobs/s) | ≥ 5000 | #{fmt(cell['jobs_per_second'])} | #{cell['jobs_per_second'] >= 5_000 ? 'met' : 'missed'} |"
      end
      rows
    end
end
