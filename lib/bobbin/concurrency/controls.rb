# frozen_string_literal: true

module Bobbin
  module Concurrency
    # `limits_concurrency` for Active Job classes, included in ActiveJob::Base when Active Job loads:
    #
    #   class SyncAccountJob < ApplicationJob
    #     limits_concurrency to: 2, key: ->(account) { account }, duration: 5.minutes
    #   end
    #
    # The same keywords as Solid Queue's, so jobs port unchanged; when Solid Queue's own version wins (both gems
    # loaded), Bobbin's adapter reads it through the same names (concurrency_limit, concurrency_key).
    module Controls
      extend ActiveSupport::Concern

      included do
        class_attribute :bobbin_concurrency, instance_accessor: false, instance_predicate: false
      end

      class_methods do
        # At most `to` jobs of this class with the same key run at once across all processes (see Limit).
        def limits_concurrency(key:, to: 1, duration: Limit::DEFAULT_DURATION, group: nil, on_conflict: :block)
          self.bobbin_concurrency = Limit.new(key: key, to: to, duration: duration, group: group, on_conflict: on_conflict, job_name: name)
        end

        # The limit set with limits_concurrency (nil: none).
        def concurrency_limit = bobbin_concurrency&.to

        # Seconds a running job holds its slot at most.
        def concurrency_duration = bobbin_concurrency&.duration
      end

      # This job's concurrency key (nil when its class has no limit).
      def concurrency_key
        self.class.bobbin_concurrency&.key_for(arguments, self.class.name, self)
      end
    end
  end
end
