# frozen_string_literal: true

module FiberSafety
  # The markdown tables of bench/fiber_safety.rb's cells (medians and min–max over rounds) and the issue's targets.
  class Summary
    SETUPS = [ "default", "detector off", "offload off" ].freeze

    def initialize(cells, sizes)
      @cells, @failed = cells.partition { |cell| cell.dig("result", "error").nil? }
      @sizes = sizes
    end

    def to_s
      [ falcon, busy, lag, offload, cost, false_positives, targets, outcomes ].compact.join("\n")
    end

    private
      def results(experiment, variant = nil)
        @cells.select { |c| c["experiment"] == experiment && (variant.nil? || c["variant"] == variant) }.map { |c| c["result"] }
      end

      def rounds(experiment) = @cells.select { |c| c["experiment"] == experiment }.map { |c| c["round"] }.uniq.size

      def falcon
        return if results("falcon").empty?

        alone = median(results("falcon", "alone").map { |r| r["http_span_ms"] })
        rows = [ "alone", "fibers", "thread lane" ].map do |variant|
          rs = results("falcon", variant)
          spans = rs.map { |r| r["http_span_ms"] }
          "| #{variant} | #{range(spans)} | #{range(rs.map { |r| r.dig('http_ms', 'p50') })} | #{range(rs.map { |r| r.dig('http_ms', 'p99') })} | " \
            "#{ratio(median(spans), alone)} | #{rs.sum { |r| r['stalls'].size }} |"
        end
        blocking = results("falcon", "fibers").flat_map { |r| r["blocking"] }
        "### The Falcon experiment (#{rounds('falcon')} rounds)\n\n50 jobs each GET the fake server's `/delay?ms=50` on `fibers: 50, thread_lane: 5`; " \
          "beside them 5 jobs each make a 1 s libc `usleep` through Fiddle (releases the GVL, does not yield), placed every 11th " \
          "in the queue so HTTP calls are in flight when each starts. HTTP jobs' span is first start → last finish; latency is " \
          "each HTTP job's start → finish (ms).\n\n| 5 blocking jobs | HTTP span | HTTP p50 | HTTP p99 | span ÷ alone | stalls reported |\n" \
          "|---|---:|---:|---:|---:|---:|\n#{rows.join("\n")}\n\n#{detection(blocking, 'fibers')}"
      end

      # How the detector named the blocking jobs: when (from each job's start), what it said, on the rows.
      def detection(jobs, variant)
        named = results("falcon", variant).count { |r| named_exactly?(r) }
        "Stall detector on the 5 blocking jobs (#{jobs.size} over all rounds): named exactly those 5, each with the line of " \
          "the call, in #{named}/#{results('falcon', variant).size} rounds; `stall.bobbin` published #{range(jobs.map { |j| j['event_after_ms'] })} " \
          "ms after the job started (at the end of its stall); duration reported #{range(jobs.map { |j| j['reported_ms'] })} ms " \
          "(it ran #{range(jobs.map { |j| j['ran_ms'] })}); a \"has held the event loop … so far\" line for " \
          "#{jobs.count { |j| j['ongoing_log_after_ms'] }}/#{jobs.size}; counted on the job row (stalls = 1) for " \
          "#{jobs.count { |j| j['row']&.first == 1 }}/#{jobs.size}.\n"
      end

      def named_exactly?(result)
        ids = result["blocking"].map { |j| j["id"] }.sort
        ids.size == 5 && result["stalls"].map { |s| s["id"] }.sort == ids &&
          result["stalls"].all? { |s| s["location"].include?("fiber_safety/jobs.rb:#{FiberSafety.call_line}:") }
      end

      def busy
        return if results("busy").empty? && results("ongoing").empty?

        jobs = results("busy").flat_map { |r| r["busy"] }
        ongoing = results("ongoing").flat_map { |r| r["blocking"] }
        "### A job busy in Ruby for 300 ms; one 2 s C call (#{rounds('busy')} rounds)\n\n| job | reported | stall.bobbin after start (ms) | " \
          "duration reported (ms) | \"so far\" log line after start (ms) | other stalls |\n|---|---:|---:|---:|---:|---:|\n" \
          "| busy in Ruby 300 ms, beside 10 × sleep 50 ms, fibers: 20 | #{jobs.count { |j| j['events'] == 1 }}/#{jobs.size} | " \
          "#{range(jobs.map { |j| j['event_after_ms'] })} | #{range(jobs.map { |j| j['reported_ms'] })} | — | " \
          "#{results('busy').sum { |r| r['stalls'].size } - jobs.sum { |j| j['events'] }} |\n" \
          "| usleep 2 s, fibers: 5 | #{ongoing.count { |j| j['events'] == 1 }}/#{ongoing.size} | #{range(ongoing.map { |j| j['event_after_ms'] })} | " \
          "#{range(ongoing.map { |j| j['reported_ms'] })} | #{range(ongoing.map { |j| j['ongoing_log_after_ms'] })} | " \
          "#{results('ongoing').sum { |r| r['stalls'].size } - ongoing.sum { |j| j['events'] }} |\n"
      end

      def lag
        rs = results("lag")
        return if rs.empty?

        reported = rs.flat_map { |r| r["stalls"].map { |s| [ s, r["holds"].to_h[s["id"]] ] } }
        "### Loop lag charged to one job (#{rs.size} rounds)\n\nTen jobs each hold the loop 40 ms with a C call, then one holds it " \
          "80 ms; each sleeps 50 ms first, so all wake in one loop turn (`fibers: 20`). No job holds the loop for the 100 ms " \
          "threshold; together they hold it #{range(rs.map { |r| r['span_ms'] })} ms.\n\n| stalls reported | jobs named | their own hold (ms) | " \
          "duration reported (ms) |\n|---:|---|---:|---:|\n| #{reported.size} in #{rs.size} rounds | " \
          "#{reported.map { |s, _| s['class_name'] }.tally.map { |name, n| "#{name[/\w+$/]} × #{n}" }.join(', ')} | " \
          "#{range(reported.map(&:last))} | #{range(reported.map { |s, _| s['duration_ms'] })} |\n"
      end

      def offload
        return if results("offload").empty?

        rows = [ "offload 4", "offload 0", "async, no worker pool", "async, a thread per call" ].map do |variant|
          rs = results("offload", variant)
          next if rs.empty?

          "| #{variant} | #{range(rs.map { |r| r['worst_lateness_ms'] })} | #{range(rs.map { |r| r['worst_lateness_after_ms'] || nil })} | " \
            "#{range(rs.flat_map { |r| r['before_first_offload_ms'] })} | #{range(rs.map { |r| r['deflate_span_ms'] })} | " \
            "#{rs.sum { |r| r['stalls']&.size.to_i }} |"
        end
        "### Offload (#{rounds('offload')} rounds)\n\n3 fibers each `Zlib.deflate` #{@sizes[:deflate_mb]} MB of random bytes (made beforehand) " \
          "beside a fiber that sleeps 5 ms at a time; its worst lateness is how long the loop could not run it. Bobbin: 3 jobs " \
          "and a ticker job on `fibers: 10`, `offload_threads` 4 (the default) or 0; async: the same in `Async::Reactor` with no " \
          "worker pool, or one starting a thread per call. Zlib copies its input on the calling fiber's thread before its first " \
          "C call (the third column, per deflate), which no offload can move; the second column is the worst lateness after all " \
          "three had handed off (ms).\n\n| setup | worst lateness | … after hand-off | loop held before first hand-off | " \
          "3 deflates span | stalls reported |\n|---|---:|---:|---:|---:|---:|\n#{rows.compact.join("\n")}\n"
      end

      def cost
        return if results("cost").empty?

        rows = %w[noop sleep idle].flat_map do |workload|
          key = workload == "idle" ? "cpu_ms_per_second" : "jobs_per_second"
          SETUPS.map do |setup|
            runs = results("cost", workload).flat_map { |r| r["runs"].select { |run| run["setup"] == setup } }
            "| #{workload} | #{setup} | #{range(runs.map { |run| run['jobs_per_second'] })} | #{range(runs.map { |run| run['cpu_us_per_job'] })} | " \
              "#{range(runs.map { |run| run['cpu_ms_per_second'] })} | #{setup == 'default' ? '—' : range(paired(workload, setup, key), 3)} |"
          end
        end
        warm = @sizes.key?(:cost_repeats) ? ", after a drain it does not count," : "" # runs before cost_repeats had no warm-up drain
        "### The detector's and offload's cost (#{rounds('cost')} rounds)\n\nEach cell is one process that#{warm} " \
          "runs the three setups in the order default, detector off, offload off, offload off, detector off, default " \
          "(#{@sizes.fetch(:cost_repeats, 1)} times; the default: stall_threshold 0.1 and offload_threads 4): #{@sizes[:noop_jobs]} noop jobs, or #{@sizes[:sleep_jobs]} × sleep 50 ms, drained by `fibers: 100` " \
          "(jobs/s from the first job to the last; the process's CPU per job), or a `fibers: 100` pool with nothing to do for 3 s " \
          "(the process's CPU per second: the detector's own ticks). The last column is each cell's setup ÷ its default, " \
          "median (min–max) over cells.\n\n| workload | setup | jobs/s | CPU µs per job | idle CPU ms per s | ÷ default, same cell |\n" \
          "|---|---|---:|---:|---:|---:|\n#{rows.join("\n")}\n"
      end

      # Per cell: the mean of `setup`'s runs ÷ the mean of the default's.
      def paired(workload, setup, key)
        results("cost", workload).filter_map do |r|
          mean = ->(name) { r["runs"].select { |run| run["setup"] == name }.then { |runs| runs.sum { |run| run[key] }.fdiv(runs.size) } }
          mean.call(setup) / mean.call("default") if mean.call("default").positive?
        end
      end

      def false_positives
        rs = results("false_positives")
        return if rs.empty?

        rows = rs.each_with_index.map do |r, i|
          produced = r["produced"]
          "| #{i + 1} | #{produced.values_at('sleep', 'noop', 'garbage').join(' / ')} | #{r.dig('counts', 'succeeded')} | " \
            "#{r.dig('health', 'max_loop_lag_ms').round} | #{r.dig('gc', 'count')} / #{r.dig('gc', 'major_gc_count')} / #{r.dig('gc', 'time')} | " \
            "#{r['stalls'].size} |"
        end
        stalls = rs.flat_map { |r| r["stalls"].zip(r["anatomy"] || []) }.map do |stall, anatomy|
          "- #{stall['class_name']} #{stall['id']}: #{stall['duration_ms']} ms at #{stall['location'][/[^\/]+$/]}; #{JSON.generate(anatomy)}"
        end
        "### False positives (#{rs.size} rounds)\n\n`fibers: 10,000`, its producer in another process for #{@sizes[:fp_seconds]} s: a wave of " \
          "10,000 jobs sleeping 1 s every 5 s, 500 noop jobs/s, 20 jobs/s each making 200 × 2,000 strings (keeping the last 50 " \
          "steps) and yielding between steps. No job holds the loop.\n\n| round | enqueued sleep / noop / garbage | succeeded | " \
          "max loop lag (ms) | GCs / major / GC ms | stalls reported |\n|---|---|---:|---:|---|---:|\n#{rows.join("\n")}\n" \
          "#{"\nStalls reported (with what the loop thread did meanwhile):\n#{stalls.join("\n")}\n" if stalls.any?}"
      end

      def targets
        rows = [ falcon_targets, busy_target, lag_target, offload_target, cost_targets, fp_target ].flatten.compact
        "### Targets (issue 17)\n\n| target | goal | measured | |\n|---|---|---|---|\n#{rows.join("\n")}\n"
      end

      def falcon_targets
        return [] if results("falcon").empty?

        jobs = results("falcon", "fibers").flat_map { |r| r["blocking"] }
        named = results("falcon", "fibers").count { |r| named_exactly?(r) }
        after = jobs.map { |j| j["event_after_ms"] }.compact
        lane = median(results("falcon", "thread lane").map { |r| r["http_span_ms"] }) / median(results("falcon", "alone").map { |r| r["http_span_ms"] })
        [ row("the 5 blocking jobs named (class, id, line of the call)", "every round", "#{named}/#{results('falcon', 'fibers').size}",
              named == results("falcon", "fibers").size),
          row("…within 1 s of the call's start", "≤ 1,000 ms", "#{range(after)} ms", after.any? && after.max <= 1_000),
          row("HTTP span with runs_on: :thread ÷ alone (\"as if not there\"; noise allowance 1.2×)", "≤ 1.2×", "#{lane.round(2)}×", lane <= 1.2) ]
      end

      def busy_target
        jobs = results("busy").flat_map { |r| r["busy"] }
        return if jobs.empty?

        ok = jobs.all? { |j| j["events"] == 1 && (j["reported_ms"] - j["ran_ms"]).abs <= 30 }
        row("a job busy in Ruby 300 ms: named, duration within 30 ms of its run", "every round", "#{jobs.count { |j| j['events'] == 1 }}/#{jobs.size}, " \
                                                                                                "#{range(jobs.map { |j| j['reported_ms'] })} ms", ok)
      end

      def lag_target
        rs = results("lag")
        return if rs.empty?

        stalls = rs.sum { |r| r["stalls"].size }
        row("no job that held the loop for less than the threshold is reported (ten 40 ms holds and one 80 ms in one turn)", "0",
            "#{stalls} in #{rs.size} rounds", stalls.zero?)
      end

      def offload_target
        rs = results("offload", "offload 4")
        return if rs.empty?

        worst = median(rs.map { |r| r["worst_lateness_ms"] })
        after = median(rs.filter_map { |r| r["worst_lateness_after_ms"] })
        [ row("3 × deflate 32 MB, offload on: worst loop lateness", "≤ 30 ms", "#{worst.round} ms", worst <= 30),
          row("…once all three have handed off (Zlib's input copies excluded)", "≤ 30 ms", "#{after&.round} ms", after && after <= 30) ]
      end

      def cost_targets
        return [] if results("cost").empty?

        costs = paired("noop", "detector off", "jobs_per_second").map { |r| 1 - 1 / r }
        detector = median(costs)
        idle = paired("idle", "detector off", "cpu_ms_per_second").empty? ? nil : idle_cost
        [ (row("detector's cost on noop throughput (median over cells; their range)", "≤ 3 %",
               "#{(detector * 100).round(1)} % (#{(costs.min * 100).round(1)} … #{(costs.max * 100).round(1)} %)", detector <= 0.03) if detector),
          (row("…its own CPU, an idle pool (on − off)", "reported", "#{idle.round(1)} ms per s", nil) if idle),
          *%w[noop sleep].filter_map do |workload|
            offload = median(paired(workload, "offload off", "jobs_per_second").map { |r| 1 / r }) or next
            row("offload on ÷ off, #{workload} (no loss)", "≥ 0.97×", "#{offload.round(3)}×", offload >= 0.97)
          end ].compact
      end

      # The detector's standing CPU: an idle pool's CPU per second with it on, minus off (median over cells).
      def idle_cost
        median(results("cost", "idle").map do |r|
          mean = ->(name) { r["runs"].select { |run| run["setup"] == name }.then { |runs| runs.sum { |run| run["cpu_ms_per_second"] }.fdiv(runs.size) } }
          mean.call("default") - mean.call("detector off")
        end)
      end

      def fp_target
        rs = results("false_positives")
        return if rs.empty?

        stalls = rs.sum { |r| r["stalls"].size }
        row("stalls reported that no job caused (fibers: 10,000, 500 noop/s, GC pressure)", "0", stalls.to_s, stalls.zero?)
      end

      # Whether every job of every cell succeeded (and every cell ran).
      def outcomes
        short = @cells.select { |c| (jobs = c.dig("result", "jobs")) && jobs["succeeded"] != jobs["enqueued"] }
        fp = results("false_positives").reject { |r| r.dig("counts", "succeeded") == r["produced"].values.sum }
        lines = short.map { |c| "#{c['experiment']} #{c['variant']} round #{c['round']}: #{c.dig('result', 'jobs')}" }
        lines << "#{fp.size} false-positive rounds with jobs not succeeded" if fp.any?
        lines << "#{@failed.size} cells failed (bench/tmp/fiber_safety.log): #{@failed.map { |c| "#{c['experiment']} #{c['variant']} round #{c['round']}" }.join(', ')}" if @failed.any?
        lines.empty? ? "Every job of every cell succeeded; no cell failed.\n" : "**Cells with jobs not succeeded or failed:**\n\n- #{lines.join("\n- ")}\n"
      end

      def row(target, goal, measured, met) = "| #{target} | #{goal} | #{measured} | #{{ true => 'met', false => 'missed' }.fetch(met, '—')} |"

      def median(values)
        sorted = values.compact.sort
        return if sorted.empty?

        (sorted[(sorted.size - 1) / 2] + sorted[sorted.size / 2]) / 2.0
      end

      # "median (min–max)", or one value, or — when there is none.
      def range(values, digits = nil)
        values = values.compact
        return "—" if values.empty?

        show = ->(v) { digits ? v.round(digits) : (v.abs >= 100 ? v.round : v.round(1)) }
        values.size == 1 || values.min == values.max ? show.call(values.first).to_s : "#{show.call(median(values))} (#{show.call(values.min)}–#{show.call(values.max)})"
      end

      def ratio(value, base) = value && base ? "#{(value / base).round(2)}×" : "—"
  end
end
