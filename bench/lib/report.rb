# frozen_string_literal: true

require "csv"
require "fileutils"
require "json"
require "time"
require_relative "charts"
require_relative "facts"
require_relative "pickup_sections"

# Turns the cells of a run into bench/results/<date>-<name>.{json,csv}, SVG charts and bench/RESULTS.md.
class Report
  DIR = File.expand_path("..", __dir__)
  PEERS = %w[sidekiq sidekiq-fiber async_job river solid_queue-fibers solid_queue-threads good_job bobbin-threads].freeze

  # True when a cell lost, repeated or failed jobs, or did not finish.
  def self.bad?(cell) = cell["error"] || cell["timed_out"] || cell["missing"].to_i.positive? || cell["duplicates"].to_i.positive?

  # Re-renders the CSV, charts and RESULTS.md of saved runs (`bin/bench --report results/A.json[,results/B.json]`).
  # With several runs, a workload's cells come from the first run that has it (e.g. a full run of the main
  # workloads completed by a quick run of the rest); the stress matrix, the sweep and one-at-a-time enqueue from the first run that has each.
  # The "Through Active Job" table compares systems within one run: all of it comes from the first run that measured
  # Bobbin through Active Job.
  # A path may end in ":part+part" (workloads, or matrix, sweep, enqueue, producers_cell, idle, sqlite_pickup): that run
  # then gives only those parts, so a newer run's open-loop cells can stand beside an older run's full noop table.
  def self.rerender(json_paths)
    runs = json_paths.map { |json_path| load_run(json_path) }
    cells = take(runs)
    aj_run = runs.find { |run| active_job_cells(run["cells"]).any? { |c| c["system"] == Plan::ACTIVE_JOB.first } }
    active_job = aj_run && active_job_cells(aj_run["cells"]).map { |c| c.merge("run" => aj_run["name"]) }
    used = runs.select { |run| run.equal?(aj_run) || cells.any? { |c| c["run"] == run["name"] } }.uniq { |run| run["name"] }
    new(cells, runs: used.map { |run| { "name" => run["name"], "options" => run["options"] } }, server_check: runs.first["server_check"],
               facts: runs.first["facts"], active_job: active_job).write(json: false)
  end

  # A saved run, named after its file; "PATH:part+part" keeps only those parts' cells.
  def self.load_run(argument)
    json_path, only = argument.split(":", 2)
    json_path = [ json_path, File.expand_path(json_path, File.dirname(DIR)) ].find { |path| File.exist?(path) } || json_path # bin/bench runs in bench/
    run = JSON.parse(File.read(json_path)).merge("name" => File.basename(json_path, ".json"))
    only ? run.merge("cells" => run["cells"].select { |c| only.split("+").include?(part(c).to_s) }) : run
  end

  # A part's cells (a workload's, the stress matrix's, …) come from the first run that has it. A run measured after
  # that one (its name, a start time, sorts later) adds the systems the part lacks (a peer measured after the others,
  # e.g. River), each flagged "added", with that run's own Bobbin fibers cells of the part kept as its "reference":
  # the same-run Bobbin the added system is compared with. An older run adds nothing (its engine and machine are not
  # the table's), nor are systems of the "Through Active Job" table added (that table is one run's).
  def self.take(runs)
    runs.each_with_object([]) do |run, taken|
      run["cells"].group_by { |c| part(c) }.each do |part, cells|
        cells = cells.map { |c| c.merge("run" => run["name"]) }
        mine = taken.select { |c| part(c) == part && !c["reference"] && !c["added"] }
        next taken.concat(cells) if mine.empty?
        next unless run["name"] > mine.first["run"]

        have = taken.filter_map { |c| c["system"] if part(c) == part && !c["reference"] }.uniq
        added = cells.reject { |c| have.include?(c["system"]) || ACTIVE_JOB_SYSTEMS.include?(c["system"]) }
        next if added.empty?

        taken.concat(added.map { |c| c.merge("added" => true) })
        taken.concat(cells.select { |c| c["system"] == REFERENCE }.map { |c| c.merge("reference" => true) })
      end
    end
  end

  # The system added systems are compared with in their own run.
  REFERENCE = "bobbin-fibers"

  # The systems of the "Through Active Job" table.
  ACTIVE_JOB_SYSTEMS = (Plan::ACTIVE_JOB + [ Plan::NONDURABLE ]).freeze

  # The cells of the "Through Active Job" table: workloads and one-at-a-time enqueue of the systems it compares.
  def self.active_job_cells(cells)
    cells.select { |c| ACTIVE_JOB_SYSTEMS.include?(c["system"]) && (c["enqueue"] || !PARTS.include?(part(c))) }
  end

  # The parts of a run that are not a workload's tables; a cell of one is flagged with the part's name.
  PARTS = %i[matrix sweep enqueue producers_cell idle sqlite_pickup].freeze

  # Which part of a run a cell belongs to: the stress matrix, the sweep, one-at-a-time enqueue, or its workload's tables.
  def self.part(cell) = PARTS.find { |part| cell[part.to_s] } || cell["workload"]

  # What an open-loop workload's percentiles measure: enqueue → start at its arrival rate, or for scheduled jobs how
  # late each started after its run_at.
  def self.open_loop(workload)
    spec = Plan::WORKLOADS.fetch(workload)
    return "#{spec[:rate]} jobs/s arriving: enqueue → start" unless spec[:ahead]

    "jobs scheduled #{format('%g', spec[:ahead])} s ahead (#{spec[:rate]}/s): start − run_at"
  end

  # A run's name, from when it started: its checkpoint and its results share it.
  def self.run_name(options, at = Time.now.utc) = "#{at.strftime('%Y-%m-%d-%H%M')}-#{options[:quick] ? 'quick' : 'full'}"

  # runs: [{ "name" =>, "options" => }] the cells come from, the first giving the options for sizing and titles.
  # active_job: the cells of the "Through Active Job" table when they come from another run than `cells` (rerender).
  def initialize(cells, runs:, server_check:, facts: nil, active_job: nil)
    @references = cells.select { |c| c["reference"] }
    @cells = cells.reject { |c| c["reference"] }
    @runs = runs.map { |run| run.merge("options" => run["options"].transform_keys(&:to_s)) }
    @options = @runs.first["options"]
    @name = @runs.map { |run| run["name"] }.join("+")
    @cells = @cells.map { |c| c["run"] ? c : c.merge("run" => @runs.first["name"]) }
    @active_job = active_job || self.class.active_job_cells(@cells)
    @server_check = server_check
    @facts = facts || Facts.collect
  end

  def write(json: true)
    FileUtils.mkdir_p(File.join(DIR, "results", "charts"))
    File.write(path("json"), JSON.pretty_generate(facts: @facts, options: @options, server_check: @server_check, cells: @cells)) if json
    write_csv
    charts
    File.write(File.join(DIR, "RESULTS.md"), Results.new(summary, facts: @facts, runs: @runs, server_check: @server_check, matrix: @cells.select { |c| c["matrix"] },
                                                           references: references, added: added,
                                                           sweep: sweep, enqueue: enqueue, origins: origins,
                                                           producers: @cells.select { |c| c["producers_cell"] }, idle: @cells.select { |c| c["idle"] },
                                                           sqlite_pickup: @cells.select { |c| c["sqlite_pickup"] }, active_job: active_job).to_s)
    puts "wrote #{[ (path('json') if json), path('csv') ].compact.join(', ')}, bench/results/charts/ and bench/RESULTS.md"
  end

  # { workload => { system => stats } } over measured (non-warm-up) rounds.
  def summary = @summary ||= summarize(@cells)

  # The "Through Active Job" table's numbers: { summary:, enqueue:, run: } from its cells' run.
  def active_job
    @active_job_numbers ||= { summary: summarize(@active_job), enqueue: enqueue_stats(@active_job, summarize(@active_job)),
                              run: @active_job.first&.fetch("run", nil) }
  end

  # { system => { concurrency => jobs/s or nil (a bad cell) } } from the sweep's cells.
  def sweep
    @sweep ||= @cells.select { |c| c["sweep"] }.group_by { |c| c["system"] }.transform_values do |cells|
      cells.to_h { |c| [ c["concurrency"], self.class.bad?(c) ? nil : c["jobs_per_second"] ] }.sort.to_h
    end
  end

  # { part => run } for the stress matrix, the sweep and one-at-a-time enqueue: the run each came from.
  def origins = @cells.select { |c| PARTS.include?(self.class.part(c)) && !c["added"] }.to_h { |c| [ self.class.part(c), c["run"] ] }

  # { run => { summary:, enqueue: } } of the reference cells (see Report.take) of each run that added systems.
  def references
    @references.group_by { |c| c["run"] }.transform_values do |cells|
      summary = summarize(cells)
      { summary: summary, enqueue: enqueue_stats(cells, summary) }
    end
  end

  # { run => { systems:, parts: } }: what each run added to parts that came from earlier runs.
  def added
    @cells.select { |c| c["added"] }.group_by { |c| c["run"] }.transform_values do |cells|
      { systems: cells.map { |c| c["system"] }.uniq, parts: cells.map { |c| self.class.part(c) }.uniq }
    end
  end

  # { system => stats } of one-at-a-time enqueue over its rounds, with the bulk rate from the noop cells.
  def enqueue = @enqueue ||= enqueue_stats(@cells, summary)

  private
    def summarize(cells)
      cells.reject { |c| c["warmup"] || PARTS.include?(self.class.part(c)) }.group_by { |c| c["workload"] }.transform_values do |of_workload|
        of_workload.group_by { |c| c["system"] }.transform_values { |runs| stats(runs) }
      end
    end

    def enqueue_stats(cells, summary)
      cells.select { |c| c["enqueue"] }.group_by { |c| c["system"] }.to_h do |system, of_system|
        [ system, spread(of_system, "enqueue_one_per_second").merge("bulk" => summary.dig(Plan::ENQUEUE[:workload], system, "enqueue_per_second"),
                                                                           "run" => of_system.first["run"], "added" => of_system.first["added"]).compact ]
      end
    end

    def path(ext) = File.join(DIR, "results", "#{@name}.#{ext}")

    # Median, min and max of `key` over the good rounds; how many rounds were bad, and their errors.
    def spread(runs, key)
      good = runs.reject { |r| self.class.bad?(r) }.filter_map { |r| r[key] }.sort
      { "median" => median(good), "min" => good.first, "max" => good.last, "rounds" => runs.size, "bad_rounds" => runs.count { |r| self.class.bad?(r) },
        "errors" => runs.filter_map { |r| r["error"] }.uniq, "jobs" => runs.first["jobs"] }
    end

    def stats(runs)
      spread(runs, "jobs_per_second").merge(
        "enqueue_per_second" => median(runs.map { |r| r["enqueue_per_second"] }.compact.sort),
        "span_seconds" => median(runs.map { |r| r["span_seconds"] }.compact.sort),
        "peak_rss_mb" => runs.map { |r| r["peak_rss_mb"].to_i }.max, "peak_connections" => runs.map { |r| r["peak_connections"].to_i }.max,
        "cpu_seconds" => median(runs.map { |r| r["cpu_seconds"] }.compact.sort), "pool" => runs.first["pool"],
        "concurrency" => runs.first["concurrency"], "missing" => runs.sum { |r| r["missing"].to_i }, "duplicates" => runs.sum { |r| r["duplicates"].to_i },
        "latency_ms" => latency(runs), "returned_ms" => latency(runs, "returned_ms"), "run" => runs.first["run"],
        "added" => runs.first["added"]).compact
    end

    # Open-loop cells: the median over good rounds of each percentile (enqueue call → start, or `measure`).
    def latency(runs, measure = "latency_ms")
      good = runs.reject { |r| self.class.bad?(r) }.filter_map { |r| r[measure] }
      good.empty? ? nil : good.first.keys.to_h { |p| [ p, median(good.map { |l| l[p] }.sort) ] }
    end

    def median(values) = values.empty? ? nil : values[values.size / 2]

    def write_csv
      CSV.open(path("csv"), "w") do |csv|
        csv << %w[workload system concurrency pool median_jobs_per_s min max enqueue_per_s span_s peak_rss_mb peak_connections cpu_s missing duplicates bad_rounds]
        summary.each do |workload, systems|
          systems.each do |system, s|
            csv << [ workload, system, s["concurrency"], s["pool"], s["median"]&.round(1), s["min"]&.round(1), s["max"]&.round(1), s["enqueue_per_second"]&.round,
                     s["span_seconds"]&.round(3), s["peak_rss_mb"], s["peak_connections"], s["cpu_seconds"], s["missing"], s["duplicates"], s["bad_rounds"] ]
          end
        end
        enqueue.each do |system, s| # jobs/s columns: one-at-a-time enqueue; enqueue_per_s: bulk
          csv << [ "enqueue_one", system, 1, nil, s["median"]&.round(1), s["min"]&.round(1), s["max"]&.round(1), s["bulk"]&.round, nil, nil, nil, nil, nil, nil, s["bad_rounds"] ]
        end
      end
    end

    def charts
      dir = File.join(DIR, "results", "charts")
      summary.each do |workload, systems|
        Charts.bars(File.join(dir, "#{workload}-throughput.svg"), "#{workload}: jobs/s (median)", "jobs/s", systems.transform_values { |s| s["median"] })
        Charts.bars(File.join(dir, "#{workload}-rss.svg"), "#{workload}: peak RSS of the worker", "MB", systems.transform_values { |s| s["peak_rss_mb"] })
        Charts.bars(File.join(dir, "#{workload}-connections.svg"), "#{workload}: peak PostgreSQL sessions", "", systems.transform_values { |s| s["peak_connections"] })
      end
      if enqueue.any?
        Charts.bars(File.join(dir, "enqueue-one-at-a-time.svg"), "enqueue one job per call: jobs/s (median)", "jobs/s", enqueue.transform_values { |s| s["median"] })
      end
      summary.each do |workload, systems|
        latencies = systems.select { |_, s| s["latency_ms"] }.flat_map { |system, s| %w[p50 p99].map { |p| [ "#{system} #{p}", s["latency_ms"][p] ] } }
        Charts.bars(File.join(dir, "#{workload}-percentiles.svg"), "#{Report.open_loop(workload)} (median of rounds)", "ms", latencies.to_h) if latencies.any?
      end
      return if sweep.empty?

      ideal = sweep.values.flat_map(&:keys).uniq.sort.to_h { |c| [ c, c / Plan::WORKLOADS.dig(Plan::SWEEP[:workload], :latency) ] }
      Charts.lines(File.join(dir, "throughput-vs-concurrency.svg"), "sleep 50 ms: jobs/s vs concurrency (one worker process)",
                   sweep.merge("ideal C ÷ latency" => ideal))
    end
end

require_relative "results"
