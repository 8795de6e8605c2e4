# frozen_string_literal: true

require "active_support/log_subscriber"

module Bobbin
  # Rails-style log lines for Bobbin's events, written to Bobbin.logger (Rails.logger in a Rails app, where the
  # Railtie attaches it; elsewhere `Bobbin::LogSubscriber.attach_to(:bobbin)`):
  #
  #   Bobbin Enqueued 1 job (ReportJob) to reports (0.9ms) ids: 42
  #   Bobbin Claimed 10 jobs (0.6ms) process: 7
  #   Bobbin Performing ReportJob 42 from reports (attempt 1)
  #   Bobbin Performed ReportJob 42 from reports in 12.3ms: succeeded
  #   Bobbin Enqueued recurring nightly_report tick 2026-11-24T03:00:00Z as job 43
  #
  # Enqueue, claim and perform lines are debug (Active Job logs its own performs at info); discards and releases
  # are info. Retries, failures, stalls, recoveries and process starts/stops are logged where they happen.
  class LogSubscriber < ActiveSupport::LogSubscriber
    include Printable

    # How a release line ends, by the event's reason (a stopping worker's: " stopping").
    RELEASED = { "quiet" => " quiet: claimed ahead, never started", "lost" => ": claimed but never started, a claim whose answer was lost" }.freeze

    # One line per enqueue statement; one that raised (the caller gets the error) says so, with no ids (an enqueue
    # that failed at debug level logged a NoMethodError of this subscriber's, with its backtrace: a review).
    def enqueue(event)
      payload = event.payload
      debug do
        jobs = "#{count(payload[:count])} (#{printable(payload[:class_names].join(', '))}) to #{printable(payload[:queues].join(', '))} " \
               "(#{event.duration.round(1)}ms)"
        error = payload[:exception]
        error ? "Bobbin Enqueue of #{jobs} failed: #{printable(error.first)}" : "Bobbin Enqueued #{jobs} ids: #{ids(payload[:ids])}"
      end
    end
    subscribe_log_level :enqueue, :debug

    # One line per claim statement that returned jobs.
    def claim(event)
      debug { "Bobbin Claimed #{count(event.payload[:count])} (#{event.payload[:duration_ms].to_f.round(1)}ms) process: #{event.payload[:process_id]}" }
    end
    subscribe_log_level :claim, :debug

    # A job starts.
    def perform_start(event)
      job = event.payload
      debug { "Bobbin Performing #{printable(job[:class_name])} #{job[:id]} from #{printable(job[:queue])} (attempt #{job[:attempts]})" }
    end
    subscribe_log_level :perform_start, :debug

    # A job ended: its new state (succeeded, ready or blocked for a retry, failed), or, with none, the exception with
    # which a stopping worker interrupted it (the job goes back to ready once it has stopped: see release).
    def perform(event)
      job = event.payload
      debug do
        ended = job[:state] || "interrupted by the shutdown (#{printable(job[:exception]&.first)})"
        "Bobbin Performed #{printable(job[:class_name])} #{job[:id]} from #{printable(job[:queue])} in #{event.duration.round(1)}ms: #{ended}"
      end
    end
    subscribe_log_level :perform, :debug

    # An operator discarded jobs.
    def discard(event)
      ids, count, by = event.payload.values_at(:ids, :count, :by)
      listed = " #{ids.first(10).join(', ')}#{' …' if count > 10}" if count == ids.size # else some of the ids were not discardable
      info { "Bobbin Discarded #{count == 1 ? 'job' : "#{count} jobs"}#{listed}#{" by #{printable(by)}" if by}" }
    end
    subscribe_log_level :discard, :info

    # A worker handed jobs back: stopping (unfinished), made quiet (claimed ahead), or those a lost claim left running.
    # Every release said "stopping": a running worker's lost claim too (a review).
    def release(event)
      why = RELEASED.fetch(event.payload[:reason], " stopping")
      info { "Bobbin Released #{count(event.payload[:count])} back to ready (process #{event.payload[:process_id]}#{why})" }
    end
    subscribe_log_level :release, :info

    # A recurring task's tick was enqueued.
    def recurring(event)
      tick = event.payload[:run_at].utc.iso8601
      info { "Bobbin Enqueued recurring #{printable(event.payload[:key])} tick #{tick} as job #{event.payload[:job_id]}" }
    end
    subscribe_log_level :recurring, :info

    # Bobbin's logger.
    def logger = Bobbin.logger

    private
      def count(number) = "#{number} job#{'s' unless number == 1}"

      def ids(list) = list.size > 10 ? "#{list.first(10).join(', ')}, … (#{list.size})" : list.join(", ")
  end
end
