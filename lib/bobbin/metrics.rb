# frozen_string_literal: true

require "prometheus/client"
require "prometheus/client/formats/text"
require "prometheus/client/data_stores/synchronized"

module Bobbin
  # The Prometheus text exposition of what the operator layer sees: jobs by state and by queue, queue latency,
  # jobs finished in the last complete minute, and per worker process its in-flight vs capacity, queued jobs,
  # RSS, database connections and (when the schema has them) event-loop lag. Served at `/metrics` by
  # Bobbin::Dashboard (behind its auth hook) and by `bobbin metrics --port 9394`.
  #
  # Every scrape reads the database afresh into a new registry (gauges, not counters: the numbers are the
  # database's, shared by every process, so no process holds a running total). Jobs waiting, running or failed are
  # counted exactly, once, by queue (Operator::Stats.queues: one grouped read of their index entries), and their
  # totals by state are those counts summed; succeeded and discarded jobs, however many, cost the dashboard's capped
  # reads, estimated above Operator::Stats::EXACT_UP_TO rows a state on PostgreSQL.
  module Metrics
    CONTENT_TYPE = Prometheus::Client::Formats::Text::CONTENT_TYPE

    module_function

    # The exposition text for this moment.
    def text(now = ProcessRecord.now)
      registry = Prometheus::Client::Registry.new
      listed = Operator::Stats.queues(now)
      jobs(registry, now, listed)
      queues(registry, listed)
      throughput(registry, now)
      processes(registry, now)
      Prometheus::Client::Formats::Text.marshal(registry)
    end

    # A Rack app answering every GET with the exposition (for `bobbin metrics`, or `run`/`mount` on its own). `auth`
    # as Bobbin::Dashboard's: called with the Rack::Request, false/nil or a blank String refuses (403).
    def rack_app(auth: nil)
      lambda do |env|
        next [ 405, { "content-type" => "text/plain" }, [ "GET only\n" ] ] unless %w[GET HEAD].include?(env["REQUEST_METHOD"])
        next [ 403, { "content-type" => "text/plain" }, [ "Access denied.\n" ] ] if auth && refused?(auth.call(Rack::Request.new(env)))

        # nosniff, as the dashboard's /metrics: the text repeats queue, host and process names as their writers stored them
        # (`<script>` too), and a browser that sniffed it for HTML would run them on this origin.
        [ 200, { "content-type" => CONTENT_TYPE, "cache-control" => "no-store", "x-content-type-options" => "nosniff" }, [ text ] ]
      rescue *Store::CONNECTION_ERRORS => error # a failed scrape, as the dashboard's pages: no hosts or paths in the body
        Bobbin.logger.warn("bobbin metrics: database unavailable (#{Store.reason(error)})")
        [ 503, { "content-type" => "text/plain", "retry-after" => "5" }, [ "The database is unavailable (#{error.class}).\n" ] ]
      rescue StandardError => error # anything else (a statement timeout, a table gone): as the dashboard's pages, a plain 500 and the
        # details in the log. The server's own answer was its page with the backtrace and SQL, or in production an empty 500
        # with nothing in any log.
        Bobbin.logger.error("bobbin metrics: #{env['REQUEST_METHOD']} #{Printable.printable(env['PATH_INFO'])} failed: " \
                            "#{error.class}: #{Printable.printable(error.message)}\n#{Array(error.backtrace).join("\n")}")
        [ 500, { "content-type" => "text/plain; charset=utf-8" }, [ "Something went wrong; the server's log has the details.\n" ] ]
      end
    end

    # A gauge of this scrape's `registry` whose values live in it alone. Left to Prometheus::Client.config.data_store, they
    # went to the store the app set for its own metrics: with prometheus-client's DirectFileStore (multi-process Puma),
    # every queue and process ever scraped stayed in its files and in every later scrape with its last numbers (a queue
    # emptied long ago still "ready 3"), each a series per web process (a `pid` label), the files growing with each queue.
    def gauge(registry, name, **) = metric(Prometheus::Client::Gauge, :gauge, registry, name, **)

    # A counter, as `gauge`: a total that only rises while its process runs (Prometheus' rate() and increase() take
    # a process's restart for the reset it is; on a gauge they read the drop as a fall).
    def counter(registry, name, **) = metric(Prometheus::Client::Counter, :counter, registry, name, **)

    def metric(kind, type, registry, name, **)
      metric = kind.new(name, **)
      metric.send(:replace_internal_store, Prometheus::Client::DataStores::Synchronized.new.for_metric(name, metric_type: type))
      registry.register(metric)
    end

    # An auth hook's answer that refuses: false/nil, or a blank String (a REMOTE_USER or a header left empty); the
    # dashboard's hook is judged by it too.
    def refused?(verdict) = !verdict || (verdict.is_a?(String) && verdict.strip.empty?)

    # The states whose jobs `queues` counts exactly, each queue's (Operator::Stats::QUEUE_COUNTS); their totals are those
    # counts summed. Estimated as the other states are, a state's total disagreed with its queues' sum in the same
    # scrape (99,506 failed jobs beside queues holding 100,000; a review), and cost a second read of the same index entries.
    BY_QUEUE = Operator::Stats::QUEUE_COUNTS.map(&:to_s).freeze

    def jobs(registry, now, queues)
      gauge = gauge(registry, :bobbin_jobs, docstring: "Jobs by state; a count of succeeded or discarded jobs above 10,000 is an estimate on " \
                                                      "PostgreSQL (the planner's, which can be 10-20% off), as the dashboard's ≈ says",
                                           labels: [ :state ])
      summed = BY_QUEUE.to_h { |state| [ state, queues.sum { |queue| queue.public_send(state) } ] }
      counted = Operator::Stats.counts(now, states: Operator::Filter::STATES - BY_QUEUE).by_state
      Operator::Filter::STATES.each { |state| gauge.set(summed.fetch(state) { counted.fetch(state) }, labels: { state: state }) }
    end

    def queues(registry, queues)
      size = gauge(registry, :bobbin_queue_jobs, docstring: "Jobs of a queue by state (ready = due now)", labels: [ :queue, :state ])
      latency = gauge(registry, :bobbin_queue_latency_seconds, docstring: "Age of the queue's oldest due job (0 when none waits)", labels: [ :queue ])
      paused = gauge(registry, :bobbin_queue_paused, docstring: "1 when the queue is paused", labels: [ :queue ])
      queues.each do |queue|
        labels = { queue: Printable.utf8(queue.name) } # one queue's bad bytes failed the whole scrape
        Operator::Stats::QUEUE_COUNTS.each { |state| size.set(queue.public_send(state), labels: labels.merge(state: state)) }
        latency.set(queue.latency, labels: labels)
        paused.set(queue.paused ? 1 : 0, labels: labels)
      end
    end

    def throughput(registry, now)
      gauge = gauge(registry, :bobbin_jobs_finished_last_minute, docstring: "Jobs that finished in the last complete minute, by outcome",
                                                                labels: [ :outcome ])
      _, succeeded, failed = Operator::Stats.throughput(minutes: 2, now: now).first
      gauge.set(succeeded, labels: { outcome: "succeeded" })
      gauge.set(failed, labels: { outcome: "failed" })
    end

    # Per process: a gauge of each number its heartbeat reports, and a counter of its stalls (a total that only rises
    # while the process runs).
    PROCESS_METRICS = {
      capacity: [ :gauge, "Jobs the process's pool can run at once", ->(view) { view.capacity } ],
      busy: [ :gauge, "Jobs the process is running (its last heartbeat)", ->(view) { view.busy } ],
      queued: [ :gauge, "Jobs claimed and waiting for a free fiber or thread", ->(view) { view.queued } ],
      resident_memory_bytes: [ :gauge, "Resident memory", ->(view) { view.rss_kb && view.rss_kb * 1024 } ],
      db_connections: [ :gauge, "Database connections in the process's pool", ->(view) { view.db_pool } ],
      db_connections_in_use: [ :gauge, "Database connections checked out", ->(view) { view.db_in_use } ],
      heartbeat_age_seconds: [ :gauge, "Seconds since the process's last heartbeat", ->(view) { view.heartbeat_age } ],
      loop_lag_seconds: [ :gauge, "Event-loop lag of a fiber pool now", ->(view) { view.health["loop_lag_ms"]&./(1000.0) } ],
      max_loop_lag_seconds: [ :gauge, "Longest event-loop lag of a fiber pool since it started", ->(view) { view.health["max_loop_lag_ms"]&./(1000.0) } ],
      stalls_total: [ :counter, "Times a job held a fiber pool's event loop past its stall threshold, since the process started", ->(view) { view.health["stalls"] } ]
    }.freeze

    def processes(registry, now)
      labels = %i[process kind name hostname os_pid mode] # `pid` is the client library's own label
      metrics = PROCESS_METRICS.to_h { |name, (kind, doc, _)| [ name, send(kind, registry, :"bobbin_process_#{name}", docstring: doc, labels: labels) ] }
      Operator::ProcessView.all(now).each do |view|
        text = { kind: view.kind, name: view.name, hostname: view.hostname, mode: view.mode }.transform_values { |value| Printable.utf8(value) }
        set = { process: view.id, os_pid: view.pid, **text }
        PROCESS_METRICS.each do |name, (kind, _, value)|
          number = value.call(view)
          next unless number.is_a?(Numeric)

          kind == :counter ? metrics[name].increment(by: number, labels: set) : metrics[name].set(number, labels: set)
        end
      end
    end
  end
end
