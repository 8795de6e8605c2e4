# frozen_string_literal: true

module Bobbin
  # How many database connections a pool needs, and the boot checks that refuse a setup that cannot work.
  module ConnectionBudget
    # Connections each worker process opens for itself (claiming; writing outcomes and heartbeats).
    OWN_CONNECTIONS = 2

    module_function

    # Active Record pool connections a pool's jobs need: one per thread, or the fiber pool's DB concurrency.
    def job_connections(mode, size)
      mode == :fibers ? [ size, Bobbin.config.fiber_db_concurrency ].min : size
    end

    # Raises ConfigurationError when this process cannot run a `mode` pool of `size` jobs.
    def check!(mode, size)
      check_isolation!(size) if mode == :fibers
      check_pool!(mode, size)
    end

    def check_isolation!(size)
      level = ActiveSupport::IsolatedExecutionState.isolation_level
      return if level == :fiber

      raise ConfigurationError, "a fiber pool (fibers: #{size}) needs Active Support's isolation level :fiber, " \
                                "but it is #{level.inspect}: set config.active_support.isolation_level = :fiber " \
                                "(or ActiveSupport::IsolatedExecutionState.isolation_level = :fiber before connecting)"
    end

    def check_pool!(mode, size)
      pool = ActiveRecord::Base.connection_pool
      needed = job_connections(mode, size)
      return if pool.size >= needed

      raise ConfigurationError, "the Active Record pool of #{pool.db_config.name.inspect} has #{pool.size} connections " \
                                "but a #{mode} pool of #{size} needs #{needed}; set pool: #{needed} in database.yml " \
                                "(or ?pool=#{needed} in DATABASE_URL)"
    end
  end
end
