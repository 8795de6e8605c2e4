# frozen_string_literal: true

module Bobbin
  # Where a job class runs in a fiber pool. Most jobs run as fibers; a job that blocks the event loop (a C client
  # that does not yield, such as mysql2 or typhoeus, or a long CPU-bound step) says it needs a thread, and a fiber
  # pool runs it on its thread lane (`thread_lane:` threads beside the loop) so the other fibers keep running.
  # Thread pools run every job on their threads anyway.
  #
  #   class ResizeImageJob
  #     include Bobbin::Job
  #     bobbin_options runs_on: :thread
  #   end
  #
  #   class LegacyReportJob < ApplicationJob
  #     bobbin_runs_on :thread
  #   end
  #
  # Included in ActiveJob::Base when Active Job loads (plain jobs get it from Bobbin::Job's bobbin_options).
  module RunsOn
    PLACES = [ :thread, :fiber, nil ].freeze

    # `value` if it is a place a job can run (:thread, :fiber, or nil: the pool's own); else ConfigurationError.
    def self.check(value, job_name)
      return value if PLACES.include?(value)

      raise ConfigurationError, "#{job_name}: runs_on must be :thread or :fiber, got #{value.inspect}"
    end

    # True when `job_class` asks to run on a thread.
    def self.thread?(job_class) = job_class.respond_to?(:bobbin_runs_on) && job_class.bobbin_runs_on == :thread

    def self.included(base)
      base.extend(ClassMethods)
    end

    # For Active Job classes.
    module ClassMethods
      # With `place` (:thread or :fiber), sets where this class runs in a fiber pool; without, returns it.
      def bobbin_runs_on(*place)
        return @bobbin_runs_on = RunsOn.check(place.first, name) if place.any?
        return @bobbin_runs_on if defined?(@bobbin_runs_on)

        superclass.bobbin_runs_on if superclass.respond_to?(:bobbin_runs_on)
      end
    end
  end
end
