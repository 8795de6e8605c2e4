# frozen_string_literal: true

module Bobbin
  # How many database connections a pool needs, and the boot checks that refuse a setup that cannot work.
  module ConnectionBudget
    # Connections each worker process opens for itself (claiming; writing outcomes and heartbeats).
    OWN_CONNECTIONS = 2
    # The supervisor's one connection: its heartbeat and the host's maintenance. (A worker running without a
    # supervisor does its maintenance on its Active Record pool, between its jobs' queries.)
    SUPERVISOR_CONNECTIONS = 1
    # The connection each worker process listens on for new work (PostgreSQL, notifications on; see Wakeups).
    LISTENER_CONNECTIONS = 1

    module_function

    # Every connection a deployment of `pools` opens at most, across its processes: each worker's own, its jobs'
    # (in async mode the pools share one process and one Active Record pool), and the supervisor's.
    def total(pools, mode)
      own = pools.sum { |pool| pool.processes * OWN_CONNECTIONS }
      jobs = pools.sum { |pool| pool.processes * job_connections(pool.mode, pool.size) }
      own + listeners(pools, mode) + (mode == :async ? [ jobs, per_process(pools, mode) ].min : jobs) + SUPERVISOR_CONNECTIONS
    end

    # Listening connections: one per worker process (all pools share one in async mode), on PostgreSQL.
    def listeners(pools, mode)
      return 0 unless Bobbin.config.notifications && Store.for_adapter(Record.connection_db_config.adapter) == Store::PostgreSQL

      (mode == :async ? 1 : pools.sum(&:processes)) * LISTENER_CONNECTIONS
    end

    # Active Record pool connections one process needs: the largest pool's (fork mode), or all pools' (async).
    def per_process(pools, mode)
      needs = pools.map { |pool| job_connections(pool.mode, pool.size) }
      mode == :async ? pools.zip(needs).sum { |pool, need| need * pool.processes } : needs.max
    end

    # Active Record pool connections a pool's jobs need: one per thread, or the fiber pool's DB concurrency.
    def job_connections(mode, size)
      mode == :fibers ? [ size, Bobbin.config.fiber_db_concurrency ].min : size
    end

    # Raises ConfigurationError when this process cannot run a `mode` pool of `size` jobs.
    def check!(mode, size)
      check_isolation!(size) if mode == :fibers
      check_pool!(job_connections(mode, size), "a #{mode} pool of #{size}")
    end

    # Raises ConfigurationError before a supervisor starts anything when a pool could not boot: in fork mode each
    # pool gets its own processes (forked from this one, so with this Active Record pool and isolation level);
    # in async mode all of them share this process.
    def check_pools!(pools, mode)
      return check_process!(pools.map { |pool| [ pool, pool.processes ] }) if mode.to_sym == :async

      pools.each { |pool| check!(pool.mode, pool.size) }
    end

    # Like check!, for several pools sharing one process (`[[pool, copies], ...]`, the supervisor's async mode).
    def check_process!(pools)
      return if pools.empty?

      fibers = pools.find { |pool, _| pool.mode == :fibers }
      check_isolation!(fibers[0].size) if fibers
      needed = pools.sum { |pool, copies| job_connections(pool.mode, pool.size) * copies }
      check_pool!(needed, "#{pools.sum { |_, copies| copies }} pools in one process")
    end

    def check_isolation!(size)
      level = ActiveSupport::IsolatedExecutionState.isolation_level
      return if level == :fiber

      raise ConfigurationError, "a fiber pool (fibers: #{size}) needs Active Support's isolation level :fiber, " \
                                "but it is #{level.inspect}: set config.active_support.isolation_level = :fiber " \
                                "(or ActiveSupport::IsolatedExecutionState.isolation_level = :fiber before connecting)"
    end

    def check_pool!(needed, what)
      pool = ActiveRecord::Base.connection_pool
      return if pool.size >= needed

      raise ConfigurationError, "the Active Record pool of #{pool.db_config.name.inspect} has #{pool.size} connections " \
                                "but #{what} needs #{needed}; set pool: #{needed} in database.yml " \
                                "(or ?pool=#{needed} in DATABASE_URL)"
    end
  end
end
