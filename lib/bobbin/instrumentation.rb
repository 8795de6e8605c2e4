# frozen_string_literal: true

module Bobbin
  # Bobbin's ActiveSupport::Notifications events, each named "EVENT.bobbin". Subscribe with
  # `ActiveSupport::Notifications.subscribe("perform.bobbin") { |event| ... }`. Payloads:
  #
  #   enqueue        ids, count, queues (distinct), class_names (distinct)
  #   claim          process_id, count, ids, duration_ms (the claim's; published after it, when it took jobs)
  #   perform_start  id, class_name, queue, attempts  (published as a worker starts the job, before its hooks)
  #   perform        id, class_name, queue, attempts, state ("succeeded", "ready"/"blocked" = retry, "failed"; set on finish;
  #                  none when a stopping worker interrupted the job: exception and exception_object name what stopped it)
  #   retry          id, class_name, queue, attempts, error (the exception), run_at
  #   fail           id, class_name, queue, attempts, error
  #   discard        ids, count, by (the operator's name, or nil)  (jobs given up on from Ruby, the CLI, the dashboard or Mission Control)
  #   release        process_id, count, reason ("stopping": jobs handed back to ready at shutdown; "quiet": those claimed
  #                  ahead, when made quiet; "lost": those a claim took whose answer never reached the worker)
  #   recover        process_id, reason, ready, failed, blamed (ids)  (a dead process's jobs)
  #   start_process  process_id, kind ("worker", "supervisor"), name, pid
  #   stop_process   process_id, kind, name, pid
  #   recurring      key, run_at (the tick), job_id  (a recurring task's tick enqueued; once across all schedulers)
  #   stall          id, class_name, queue, duration_ms, location, backtrace (taken while stuck), at, wall_ms (the loop held on the
  #                  clock, duration_ms plus the time it waited for a CPU or another thread), process_id
  #                  (a job held its fiber pool's event loop past stall_threshold; published when it let go)
  #
  # LogSubscriber turns them into log lines (Rails attaches it; plain Ruby: Bobbin::LogSubscriber.attach_to(:bobbin)).
  # With no subscriber (or only ones silenced by the log level) a hot-path event costs a lookup: its payload is built
  # only when `listening?`.
  module Instrumentation
    EVENTS = %w[enqueue claim perform_start perform retry fail discard release recover start_process stop_process recurring stall].freeze
    NAMES = EVENTS.to_h { |event| [ event.to_sym, "#{event}.bobbin".freeze ] }.freeze

    module_function

    # Publishes `event` (a symbol from EVENTS) with `payload`, around the block when one is given; returns the
    # block's value. A subscriber that raises is logged and reported (on_thread_error), never raised into Bobbin: one
    # raising in perform.bobbin recorded a job that had succeeded as failed with the subscriber's error, in claim.bobbin
    # stopped the worker, and in enqueue.bobbin raised from an enqueue whose job was stored (enqueued again: twice).
    def instrument(event, payload = {})
      name = NAMES.fetch(event)
      return (yield(payload) if block_given?) unless ActiveSupport::Notifications.notifier.listening?(name)

      handle = ActiveSupport::Notifications.instrumenter.build_handle(name, payload)
      guarded(name) { handle.start }
      begin
        yield(payload) if block_given?
      rescue Exception => error # rubocop:disable Lint/RescueException -- as ActiveSupport::Notifications.instrument: subscribers see it, it goes on
        payload[:exception] = [ error.class.name, error.message ]
        payload[:exception_object] = error
        raise
      ensure
        guarded(name) { handle.finish }
      end
    end

    # True when some subscriber would receive `event` now (one not silenced by its log level).
    def listening?(event) = ActiveSupport::Notifications.notifier.listening?(NAMES.fetch(event))

    # Runs the subscribers' part of publishing `name`; an error of theirs is logged and reported.
    def guarded(name)
      yield
    rescue StandardError => error
      Bobbin.logger.error("bobbin: a subscriber to #{name} raised #{error.class}: #{Printable.printable(error.message.to_s.lines.first.to_s.chomp)}")
      ThreadErrors.report(error, task: "bobbin: a subscriber to #{name}")
    end
  end
end
