# frozen_string_literal: true

module Bobbin
  # What Mission Control – Jobs (1.3) asks of a queue adapter (MissionControl::Jobs::Adapter), answered by the
  # operator layer: the Railtie includes it into the Bobbin adapter when the mission_control-jobs gem is loaded.
  # Statuses map onto Bobbin's states (pending = due ready jobs, in_progress = running, finished = succeeded;
  # discarded jobs are kept by Bobbin but listed by no Mission Control status). Mission Control pages by
  # OFFSET; Bobbin's own dashboard and CLI page by keyset.
  module MissionControlAdapter
    STATES = { pending: "ready", scheduled: "scheduled", in_progress: "running", blocked: "blocked", failed: "failed", finished: "succeeded" }.freeze
    ACTOR = "mission_control"

    # Adds Mission Control's adapter defaults, then these answers over them, to `adapter_class`.
    def self.install(adapter_class)
      adapter_class.include(::MissionControl::Jobs::Adapter)
      adapter_class.include(self)
    end

    def supported_job_statuses = STATES.keys
    def supported_job_filters(*) = %i[queue_name job_class_name worker_id recurring_task_id finished_at scheduled_at enqueued_at]
    def supports_queue_pausing? = true
    def exposes_workers? = true
    def supports_recurring_tasks? = true

    # Every queue a job row names, finished jobs' included, and every paused one: Mission Control finds a job's queue
    # by name in this list (ActiveJob::Base#queue) to link its pages, and a finished or discarded job whose queue had
    # nothing waiting, running or failed (the queues Operator.queues counts) made its pages fail. Those others show 0.
    def queues
      listed = Operator.queues.map { |queue| { name: queue.name, size: queue.ready, active: !queue.paused } }
      listed + (queue_names - listed.map { |queue| queue[:name] }).map { |name| { name: name, size: 0, active: true } }
    end

    def queue_size(queue_name) = Operator::Filter.new(state: "ready", queue: queue_name).scope.count
    def clear_queue(queue_name) = Operator.discard_all({ state: "ready", queue: queue_name }, by: ACTOR)
    def pause_queue(queue_name) = Operator.pause(queue_name)
    def resume_queue(queue_name) = Operator.resume(queue_name)
    def queue_paused?(queue_name) = QueuePause.exists?(queue: queue_name)

    # The jobs the relation lists (its offset and limit too). Mission Control's own rule: without a limit, count at most
    # internal_query_count_limit rows (infinity above), in no order: how many does not depend on it, and scheduled jobs
    # (two states' index ranges) in run_at order were all read and sorted first, up to the cap (a review).
    def jobs_count(relation)
      return listed(relation).count if relation.limit_value_provided?

      cap = ::MissionControl::Jobs.internal_query_count_limit + 1
      counted = JobRecord.from(listed(relation).unscope(:order).select(:id).limit(cap), :capped).count
      counted == cap ? Float::INFINITY : counted
    end

    def fetch_jobs(relation) = listed(relation).map { |row| job_proxy(row, relation.status) }

    def find_job(job_id, relation = nil)
      row = job_row(job_id) or return
      return if relation&.status && !mission_control_scope(relation).exists?(id: row.id)

      job_proxy(row)
    end

    # A job the action no longer applies to (it was retried, ran or was discarded since the page showed it) is one Mission
    # Control cannot find in that list: it redirects with that alert instead of reporting a success.
    def retry_job(job, relation) = Operator.retry(job_row!(job.job_id, relation).id, by: ACTOR) || not_found!(job.job_id, relation)
    def discard_job(job, relation) = Operator.discard(job_row!(job.job_id, relation).id, by: ACTOR) || not_found!(job.job_id, relation)

    # "Retry/Discard all" and "… selection": the whole filtered set, in the operator's batches (Mission Control's
    # 3,000-job cap guards stores without them), so the count its notice shows is the count acted on.
    def retry_all_jobs(relation) = Operator.retry_all(acted_on(relation), by: ACTOR)
    def discard_all_jobs(relation) = Operator.discard_all(acted_on(relation), by: ACTOR)

    # "Run now", on a scheduled job (due at once) or a blocked one (let through past its concurrency limit, as Solid
    # Queue's adapter does): ready, and never later in line than it was. A limited job still scheduled (blocked, due
    # later) is made due and takes its turn for a slot, as Solid Queue's does: let through, it ran beside the job
    # holding its key's only slot (a trial).
    def dispatch_job(job, relation)
      row = job_row!(job.job_id, relation)
      binds = { now: Store.timestamp(Time.now), actor: ACTOR } # text: quoted, a Time turns local on `default_timezone = :local`
      dispatched = "operation = 'dispatched', operated_by = :actor, operated_at = :now"
      if JobRecord.where(id: row.id, state: "blocked").where(run_at: binds[:now]..).update_all([ "run_at = :now, #{dispatched}", binds ]).positive?
        return Store.promote_keys([ row.concurrency_key ])
      end

      JobRecord.where(id: row.id, state: %w[ready blocked])
               .update_all([ "state = 'ready', run_at = CASE WHEN run_at > :now THEN :now ELSE run_at END, #{dispatched}", binds ])
      Wakeups.announce(nil)
    end

    def fetch_workers(relation)
      ProcessRecord.where(kind: "worker").order(:id).offset(relation.offset_value).limit(relation.limit_value)
                   .map { |process| ::MissionControl::Jobs::Worker.new(queue_adapter: self, **worker_attributes(process)) }
    end

    def count_workers(_relation) = ProcessRecord.where(kind: "worker").count

    def find_worker(worker_id) = ProcessRecord.find_by(id: worker_id)&.then { |process| worker_attributes(process) }

    def recurring_tasks = RecurringTask.order(:key).map { |task| recurring_task_attributes(task) }

    def find_recurring_task(task_id) = RecurringTask.find_by(key: task_id)&.then { |task| recurring_task_attributes(task) }

    # Mission Control's "Run now": the task's job enqueued now, recorded as a run of the task (so it is listed with the
    # task's other jobs), as Solid Queue's adapter does. Offered for a task whose job can be built here.
    def can_enqueue_recurring_task?(task_id)
      task = recurring_task(task_id)
      task.present? && task.job_row.present?
    rescue StandardError # a class gone, or arguments its job refuses (a concurrency key that cannot be computed): one such
      false              # task made Mission Control's whole Recurring list fail (500; a trial)
    end

    # The job enqueued, as Mission Control's page goes on to show it (an id alone made its controller fail, 500, with
    # the job enqueued all the same: a trial).
    def enqueue_recurring_task(task_id)
      task = recurring_task(task_id) or return
      id = RecurringRun.claim(task.key, Time.now.utc, task.job_row) or return
      job_proxy(JobRecord.find(id)).tap { |job| job.successfully_enqueued = true }
    end

    # The queue names of bobbin_jobs, found without reading its rows: no index leads with queue (the claim's
    # bobbin_jobs_claim_by_prefix holds ready jobs only), so a skip scan of bobbin_jobs_state_queue (state, queue,
    # run_at): one seek per state for the next state, then one per state and queue for the next queue, in one
    # statement on both databases. About (states + 1) × (queues + 1) index seeks, however many finished rows: a
    # DISTINCT, or a GROUP BY, would read an index entry per job (millions of finished ones).
    QUEUE_NAMES = <<~SQL
      WITH RECURSIVE states(state) AS (
        SELECT MIN(state) FROM bobbin_jobs
        UNION ALL
        SELECT (SELECT MIN(state) FROM bobbin_jobs WHERE state > states.state) FROM states WHERE states.state IS NOT NULL
      ), names(state, queue) AS (
        SELECT states.state, (SELECT MIN(queue) FROM bobbin_jobs WHERE state = states.state) FROM states WHERE states.state IS NOT NULL
        UNION ALL
        SELECT names.state, (SELECT MIN(queue) FROM bobbin_jobs WHERE state = names.state AND queue > names.queue)
        FROM names WHERE names.queue IS NOT NULL
      )
      SELECT DISTINCT queue FROM names WHERE queue IS NOT NULL ORDER BY queue
    SQL

    private
      # The task as this process configured it, else as the schedulers stored it.
      def recurring_task(task_id)
        record = RecurringTask.find_by(key: task_id)
        return unless record

        Bobbin.config.recurring_tasks[record.key] || Recurring::Task.parse(record.key, {
          "schedule" => record.schedule, "class" => record.class_name, "command" => record.command,
          "args" => (record.parsed_arguments unless record.command), "queue" => record.queue, "priority" => record.priority
        }.compact, "recurring task #{record.key}")
      end

      def queue_names = JobRecord.with_connection { |connection| connection.select_values(QUEUE_NAMES, "Bobbin queue names") }

      # The relation's jobs in its status's order, from its offset, at most its limit: what Mission Control lists.
      def listed(relation)
        column, direction = Operator::Page::ORDERS.fetch(STATES[relation.status], [ :id, :desc ])
        scope = mission_control_scope(relation).order(column => direction, id: direction)
        return scheduled_page(scope, relation) if relation.status == :scheduled && relation.limit_value_provided?

        scope = scope.offset(relation.offset_value)
        relation.limit_value_provided? ? scope.limit(relation.limit_value) : scope
      end

      # A page of scheduled jobs: its rows' ids found as the operator's pages find them (Operator::Page.scheduled_first),
      # not by sorting every scheduled job (0.5 s at 1,000,000).
      def scheduled_page(scope, relation)
        offset = relation.offset_value.to_i
        ids = Operator::Page.scheduled_first(scope.select(:id, :run_at), offset + relation.limit_value).drop(offset).map(&:id)
        scope.where(id: ids)
      end

      # What a bulk action acts on: every job the relation selects; of a paged one (`limit`, `offset`), the jobs it
      # lists. Its scheduled_at and recurring task too: an action that dropped them, as a limit and an offset, retried
      # or discarded every failed job (a review).
      def acted_on(relation)
        scope = mission_control_scope(relation)
        relation.paginated? ? scope.where(id: listed(relation).pluck(:id)) : scope
      end

      def mission_control_scope(relation)
        scope = filter_of(relation).scope
        scope = scope.where(run_at: relation.scheduled_at) if relation.scheduled_at
        if relation.recurring_task_id
          scope = scope.where(id: RecurringRun.where(task_key: relation.recurring_task_id).where.not(job_id: nil).select(:job_id))
        end
        scope
      end

      # The operator's filter for a relation; its date ranges too, so "Discard selection" and "Retry selection" act on
      # the jobs listed and no others.
      def filter_of(relation)
        Operator::Filter.new(state: STATES[relation.status], queue: relation.queue_name, class_name: relation.job_class_name,
                             process_id: relation.worker_id, **window(:enqueued, relation.enqueued_at), **window(:finished, relation.finished_at))
      end

      # A Mission Control date range (either end may be open) as the filter's NAME_after and NAME_before (exclusive:
      # an inclusive range's end, as its pages make, reaches a microsecond further, the precision both databases keep).
      def window(name, range)
        return {} unless range

        last = range.end && !range.exclude_end? ? range.end + Rational(1, 1_000_000) : range.end
        { "#{name}_after": range.begin, "#{name}_before": last }
      end

      # Active Job jobs are found by their job id; Bobbin::Job rows (no Active Job id) by "bobbin-ID".
      def job_row(job_id)
        id = job_id.to_s[/\Abobbin-(\d+)\z/, 1]
        id ? JobRecord.find_by(id: id) : JobRecord.where(active_job_id: job_id.to_s).order(:id).last
      end

      def job_row!(job_id, relation)
        job_row(job_id) or not_found!(job_id, relation)
      end

      def not_found!(job_id, relation) = raise(ActiveJob::Errors::JobNotFoundError.new(job_id, relation))

      def job_proxy(row, status = nil)
        payload = active_job_payload(row)
        ActiveJob::JobProxy.new(payload).tap do |job|
          job.status = status || status_of(row)
          job.provider_job_id = row.id
          job.raw_data = row.as_json.merge("arguments" => payload)
          job.filtered_raw_data = job.raw_data.deep_dup.tap do |data|
            data["arguments"]["arguments"] = ::MissionControl::Jobs.job_arguments_filter.apply_to(data.dig("arguments", "arguments"))
          end
          job.scheduled_at = row.run_at
          job.finished_at = row.finished_at
          job.started_at = row.started_at if row.state == "running" # Mission Control says "Running for" whenever it is set
          job.worker_id = row.claimed_by
          job.blocked_by = row.concurrency_key
          if row.state == "failed"
            job.failed_at = row.finished_at
            job.last_execution_error = ActiveJob::ExecutionError.new(error_class: row.last_error_class, message: row.last_error_message,
                                                                     backtrace: row.last_error_backtrace.to_s.lines.map(&:chomp))
          end
        end
      end

      # The stored Active Job payload, or one made for a Bobbin::Job row (plain JSON arguments). Whatever the row
      # holds, Mission Control's pages get an arguments list and an enqueue time: one failed row whose arguments were
      # not JSON, or whose payload's were not a list, made the whole Failed list fail (500; a trial).
      def active_job_payload(row)
        parsed = begin
          JSON.parse(row.arguments)
        rescue JSON::ParserError
          [ row.arguments ]
        end
        row_payload = { "job_class" => row.class_name, "job_id" => "bobbin-#{row.id}", "queue_name" => row.queue, "priority" => row.priority,
                        "executions" => [ row.attempts - 1, 0 ].max } # as Active Job counts: runs before this one
        payload = parsed.is_a?(Hash) && parsed["job_class"] ? row_payload.merge(parsed.compact) : row_payload.merge("arguments" => parsed)
        payload["arguments"] = Array.wrap(payload["arguments"])
        payload["enqueued_at"] = row.enqueued_at&.utc&.iso8601(6) unless (Time.iso8601(payload["enqueued_at"]) rescue nil)
        payload
      end

      def status_of(row)
        state = row.shown_state
        STATES.key(state) || state.to_sym
      end

      def worker_attributes(process)
        { id: process.id, name: "#{process.name} (PID #{process.pid})", hostname: process.hostname, last_heartbeat_at: process.last_heartbeat_at,
          configuration: (JSON.parse(process.metadata) rescue {}), raw_data: process.as_json }
      end

      # Mission Control joins a task's arguments with commas: a String reads as itself, anything else as JSON (a Hash
      # showed as Ruby's `{"a" => 1}`).
      def recurring_task_attributes(task)
        arguments = task.parsed_arguments.map { |argument| argument.is_a?(String) ? argument : JSON.generate(argument) }
        { id: task.key, job_class_name: task.class_name, command: task.command, arguments: arguments, schedule: task.schedule,
          next_time: task.next_run_at, queue_name: task.queue, priority: task.priority, last_enqueued_at: task.last_run_at }
      end
  end
end
