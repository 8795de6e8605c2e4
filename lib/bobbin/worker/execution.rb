# frozen_string_literal: true

module Bobbin
  class Worker
    # Runs one claimed job and says what became of it; never lets a job's exception escape, except a stop.
    class Execution
      # Exceptions that mean "stop now", not "the job failed": the job stays claimed and is released on shutdown.
      STOPS = [ Interrupt, SignalException, SystemExit ].freeze
      MAX_BACKOFF = 6 * 3600
      BACKTRACE_LINES = 50

      def initialize
        @classes = {}
      end

      # Performs `job` (a Store::ClaimedJob) and returns its Store::Outcome.
      def call(job)
        job_class = resolve(job.class_name)
        perform(job_class, job)
        Store::Outcome.new(job.id, "succeeded", Store.timestamp(Time.now))
      rescue UnrunnableJob => error
        failed(job, error)
      rescue *STOPS, Worker::Shutdown
        raise
      rescue Exception => error # rubocop:disable Lint/RescueException -- a job's NotImplementedError or stack overflow fails the job, not the worker
        raise if stop?(error)

        job.attempts < job.max_attempts ? retried(job, job_class, error) : failed(job, error)
      ensure
        ActiveRecord::Base.connection_handler.clear_active_connections!(:all)
      end

      private
        def perform(job_class, job)
          if job.active_job_id
            ActiveJob::Base.execute(active_job_payload(job.arguments))
          else
            job_class.new.perform(*Client::Arguments.load(job.arguments))
          end
        end

        def resolve(name)
          @classes[name] ||= begin
            job_class = Object.const_get(name)
            raise UnrunnableJob, "#{name} is not a job class (include Bobbin::Job or inherit ActiveJob::Base)" unless runnable?(job_class)

            job_class
          rescue NameError => error
            raise UnrunnableJob, "unknown job class #{name} (#{error.message.lines.first.strip}); is it loaded in the worker (--require)?"
          end
        end

        def runnable?(job_class)
          return false unless job_class.is_a?(Class)

          job_class.include?(Bobbin::Job) || (defined?(ActiveJob::Base) && job_class < ActiveJob::Base)
        end

        def active_job_payload(json)
          payload = JSON.parse(json)
          raise UnrunnableJob, "Active Job payload is not a JSON object" unless payload.is_a?(Hash)

          payload
        rescue JSON::ParserError => error
          raise UnrunnableJob, "Active Job payload is not valid JSON (#{error.message[0, 120]})"
        end

        def stop?(error)
          defined?(Async::Stop) && error.is_a?(Async::Stop)
        end

        def retried(job, job_class, error)
          base = job_class.respond_to?(:bobbin_options) ? job_class.bobbin_options[:backoff] : Job::DEFAULTS[:backoff]
          delay = [ base * (2**(job.attempts - 1)), MAX_BACKOFF ].min * rand(0.75..1.25)
          outcome(job, "ready", error, run_at: Store.timestamp(Time.now + delay))
        end

        def failed(job, error) = outcome(job, "failed", error, finished_at: Store.timestamp(Time.now))

        def outcome(job, state, error, finished_at: nil, run_at: nil)
          Store::Outcome.new(job.id, state, finished_at, run_at, error.class.name, error.message.to_s[0, 10_000],
                             Array(error.backtrace).first(BACKTRACE_LINES).join("\n"))
        end
    end
  end
end
