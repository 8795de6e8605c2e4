# frozen_string_literal: true

module Bobbin
  # Include in a class with a `perform` method to make it a Bobbin job.
  #
  #   class FetchJob
  #     include Bobbin::Job
  #     bobbin_options queue: "llm", priority: 0, retries: 5
  #     def perform(url) = ...
  #   end
  #
  # `bobbin_options concurrency: { to: 2, key: ->(account_id, *) { account_id }, duration: 300 }` lets at most
  # two jobs with the same key run at once across all processes (Concurrency::Limit).
  # `bobbin_options runs_on: :thread` runs the job on a fiber pool's thread lane instead of its event loop (RunsOn).
  module Job
    DEFAULTS = { queue: "default", priority: 0, retries: 5, backoff: 2.0, concurrency: nil, runs_on: nil }.freeze

    def self.included(base)
      base.extend(ClassMethods)
    end

    module ClassMethods
      # With options, sets this class's queue, priority, retries, backoff (seconds) and concurrency; without, returns them:
      # its own over its parent's as they are now (a copy taken at the first read kept a subclass on the parent's old
      # options once the parent changed them; a review). A nil queue or priority is the default's.
      def bobbin_options(**options)
        if options.empty?
          parent = inherited_bobbin_options
          return @bobbin_options if @bobbin_options && @bobbin_options_over.equal?(parent)

          @bobbin_options_over = parent
          return @bobbin_options = parent.merge(@own_bobbin_options || {}).freeze
        end

        unknown = options.keys - DEFAULTS.keys
        raise ConfigurationError, "#{name || inspect}: unknown bobbin_options #{unknown.join(', ')} (known: #{DEFAULTS.keys.join(', ')})" if unknown.any?

        check_bobbin_options(options)
        # `queue: nil` was kept, and every enqueue then failed on it (a review).
        %i[queue priority].each { |key| options[key] = DEFAULTS[key] if options.key?(key) && options[key].nil? }
        options = options.merge(concurrency: Concurrency::Limit.parse(options[:concurrency], name)) if options[:concurrency]
        options = options.merge(runs_on: RunsOn.check(options[:runs_on], name)) if options.key?(:runs_on)
        @own_bobbin_options = (@own_bobbin_options || {}).merge(options).freeze
        @bobbin_options = nil
        bobbin_options
      end

      # Stores a job to run as soon as a worker is free; returns its id.
      def enqueue(*args) = Client::Enqueuer.enqueue(self, args)

      # Stores a job to run at `time` (or later): a Time, DateTime or ActiveSupport::TimeWithZone in the years
      # 1970..9999; anything else raises EnqueueError. Returns its id.
      def enqueue_at(time, *args) = Client::Enqueuer.enqueue(self, args, run_at: time)

      # Stores a job to run `seconds` (a finite Numeric ≥ 0) from now; returns its id.
      def enqueue_in(seconds, *args) = Client::Enqueuer.enqueue(self, args, run_at: Client::Fields.delay(seconds, name))

      # :thread when this job must not run as a fiber (see RunsOn); nil otherwise.
      def bobbin_runs_on = bobbin_options[:runs_on]

      # Runs the job inline, in this process, as a worker would (tests, consoles).
      def perform_now(*args) = new.perform(*Client::Arguments.load(Client::Arguments.dump(name, args)))

      private
        # A bad queue, priority, retries or backoff is refused where it is declared, as the enqueue would refuse it (nil:
        # the default). A backoff the worker could not compute a delay from would fail as the first retry came.
        def check_bobbin_options(options)
          Client::Fields.queue(options[:queue], name) unless options[:queue].nil?
          Client::Fields.priority(options[:priority], name) unless options[:priority].nil?
          check_retries(options[:retries]) if options.key?(:retries)
          check_backoff(options[:backoff]) if options.key?(:backoff)
        rescue EnqueueError => error
          raise ConfigurationError, error.message
        end

        def check_retries(retries)
          return if retries.is_a?(Integer) && retries >= 0 && retries < Client::Fields::INT32.max

          raise ConfigurationError, "#{name || inspect}: retries must be a whole number from 0 to #{Client::Fields::INT32.max - 1} " \
                                    "(the runs after the first), got #{retries.inspect}"
        end

        def check_backoff(backoff)
          return if backoff.is_a?(Numeric) && backoff.real? && backoff.finite? && backoff >= 0

          raise ConfigurationError, "#{name || inspect}: backoff must be a finite number of seconds ≥ 0 (the first retry's delay, " \
                                    "doubled at each one after), got #{backoff.inspect}"
        end

        def inherited_bobbin_options
          superclass.respond_to?(:bobbin_options) ? superclass.bobbin_options : DEFAULTS
        end
    end
  end
end
