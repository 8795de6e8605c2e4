# frozen_string_literal: true

module Bobbin
  # How many database connections a pool needs, and the boot checks that refuse a setup that cannot work.
  module ConnectionBudget
    # Connections each worker process opens for itself (claiming; writing outcomes and heartbeats).
    OWN_CONNECTIONS = 2
    # The supervisor's connections, from its Active Record pool for Bobbin's tables: its clock's thread (each second),
    # its heartbeat's (which keeps the host's house) and its main loop's (recovering a worker that exited) query at
    # once, each on a connection of its own; one beat held up (a lock, a long retention sweep) while the clock ticked
    # kept two open where this said one. (A worker running without a supervisor does its maintenance on its Active
    # Record pool, between its jobs' queries.)
    SUPERVISOR_CONNECTIONS = 3
    # In async mode the supervisor's clock and heartbeat threads query on the Active Record pool its jobs use (when
    # Bobbin's tables share it): a pool of exactly the jobs' need left them waiting checkout_timeout while jobs held
    # every connection (a transaction, a long query), and the supervisor's heartbeat went stale past
    # process_alive_threshold, recurring ticks and promotions with it.
    ASYNC_SUPERVISOR_CONNECTIONS = 2
    # The connection each worker process listens on for new work (PostgreSQL, notifications on; see Wakeups).
    LISTENER_CONNECTIONS = 1

    module_function

    # Every connection a deployment of `pools` opens at most, across its processes: each worker's own, its jobs'
    # (in async mode the pools share one process and one Active Record pool), Bobbin's database's pool when it is
    # a database of its own, and the supervisor's (none for `bobbin work`: `supervised: false`).
    def total(pools, mode, supervised: true)
      own = pools.sum { |pool| pool.processes * OWN_CONNECTIONS }
      own + listeners(pools, mode) + jobs_at_most(pools, mode) + queue_database_at_most(pools, mode) + (supervised ? supervisor(mode) : 0)
    end

    # The supervisor's connections: one per thread of it that queries, up to its pool's size. In async mode, when they
    # come from the pool its jobs use, jobs_at_most counts them (async_supervisor) and this none.
    def supervisor(mode)
      threads = mode == :async ? ASYNC_SUPERVISOR_CONNECTIONS - async_supervisor : SUPERVISOR_CONNECTIONS
      [ threads, size_of(Record.connection_pool) ].min
    end

    # Active Record connections the jobs of `pools` may hold at once, across their processes (in async mode, with the
    # supervisor's threads that share their pool).
    def jobs_at_most(pools, mode)
      if mode == :async # one process, one Active Record pool
        [ concurrency(pools) + async_supervisor, [ size_of(ActiveRecord::Base.connection_pool), per_process(pools, mode) ].max ].min
      else
        pools.sum { |pool| pool.processes * job_connections_at_most(pool) }
      end
    end

    # Active Record pool connections a pool's jobs may hold at once in one process. Fibers, like threads, lease one
    # per query and give it back after it, so the most is the pool's concurrency or the Active Record pool's size,
    # whichever is smaller: a fiber pool needs only its DB concurrency (`job_connections`), and holds no more when
    # database.yml's `pool:` says so, but a larger pool lets its fibers open as many.
    def job_connections_at_most(pool, pool_size = size_of(ActiveRecord::Base.connection_pool))
      [ at_once(pool), [ pool_size, job_connections(pool.mode, pool.size) ].max ].min
    end

    # With Bobbin's tables in a database of their own (connects_to), the Active Record connections jobs may open to
    # it (an enqueue from a job leases one), across the processes; 0 when they share the app's pool.
    def queue_database_at_most(pools, mode)
      queue = Record.connection_pool
      return 0 if queue.equal?(ActiveRecord::Base.connection_pool)

      return [ concurrency(pools), size_of(queue) ].min if mode == :async

      pools.sum { |pool| pool.processes * [ at_once(pool), size_of(queue) ].min }
    end

    # An Active Record pool's connections; without a limit (Rails 8.1 reads a negative pool: so), more than any need.
    def size_of(pool) = pool.size || Float::INFINITY

    # Jobs that run at once across `pools`' processes.
    def concurrency(pools) = pools.sum { |pool| pool.processes * at_once(pool) }

    # Jobs one process of `pool` runs at once: its size, and a fiber pool's thread lane beside its fibers (runs_on:
    # :thread jobs run there, each with its own lease, while the fibers run others). Counted as the size alone, a pool of
    # fibers: 2 with its lane of 2 held 4 connections where doctor said 2.
    def at_once(pool) = pool.mode == :fibers ? pool.size + (pool.thread_lane || Bobbin.config.thread_lane) : pool.size

    # Listening connections: one per worker process (all pools share one in async mode), on PostgreSQL.
    def listeners(pools, mode)
      return 0 unless Bobbin.config.notifications && Store.for_adapter(Record.connection_db_config.adapter) == Store::PostgreSQL

      (mode == :async ? 1 : pools.sum(&:processes)) * LISTENER_CONNECTIONS
    end

    # Active Record pool connections one process needs: the largest pool's (fork mode), or all pools' and the
    # supervisor's (async).
    def per_process(pools, mode)
      needs = pools.map { |pool| job_connections(pool.mode, pool.size) }
      mode == :async ? pools.zip(needs).sum { |pool, need| need * pool.processes } + async_supervisor : needs.max
    end

    # The connections an async-mode supervisor takes from its jobs' Active Record pool: none when Bobbin's tables are in
    # a database of their own (connects_to), whose pool its threads use instead.
    def async_supervisor = Record.connection_pool.equal?(ActiveRecord::Base.connection_pool) ? ASYNC_SUPERVISOR_CONNECTIONS : 0

    # Active Record pool connections a pool's jobs need: one per thread, or the fiber pool's DB concurrency.
    def job_connections(mode, size)
      mode == :fibers ? [ size, Bobbin.config.fiber_db_concurrency ].min : size
    end

    # What a supervisor of `pools` logs as it boots, one line per PostgreSQL server: it cannot hold every connection they
    # may open there (max_connections less the superusers' share), or cannot with the sessions other clients hold now. A
    # warning, not a refusal: the total is what they open at most. Without it a deployment that could not fit booted
    # without a word, and its workers' sessions were refused later, at their busiest.
    # `supervised: false`: one worker process of `pools`' one pool, without a supervisor (`bobbin work`).
    def server_warnings(pools, mode, supervised: true)
      servers = servers(pools, mode, supervised: supervised)
      servers.filter_map do |pool, needed|
        max, reserved, in_use = server_numbers(pool)
        others = in_use - 1 # this process's one session is in `needed`
        said = "#{supervised ? 'these pools' : 'this worker'} may open #{needed} database connections#{on_server(pool) if servers.size > 1}, " \
               "but PostgreSQL allows #{max - reserved} (max_connections #{max}, #{reserved} reserved for superusers)"
        remedies = "raise max_connections, or run fewer processes or a smaller Active Record pool (`bobbin doctor` shows what each pool needs)"
        if needed > max - reserved
          "#{said}: at their busiest their sessions are refused and jobs wait; #{remedies}"
        elsif needed > max - reserved - others
          "#{said} and other clients hold #{others} now, leaving #{max - reserved - others}: their sessions may be refused; #{remedies}"
        end
      end
    end

    # Logs server_warnings, if any, as a process of `pools` boots (`who`: "bobbin supervisor", "bobbin worker").
    def warn_server(pools, mode, who, supervised: true)
      server_warnings(pools, mode, supervised: supervised).each { |warning| Bobbin.logger.warn("#{who}: #{warning}") }
    rescue ActiveRecord::ActiveRecordError
      nil # the database went away since this process registered: its outage lines say so
    end

    # The PostgreSQL servers `pools` open connections on, each as [an Active Record pool that reaches it, the connections
    # they open there at most]. One server holds them all unless Bobbin's tables are in a database on another server
    # (connects_to, its URL another host's): there go Bobbin's own sessions, its listener, the supervisor's and the
    # jobs' enqueues, while the jobs' queries go to the app's. Checked against the app's server alone, a queue server
    # of 20 connections passed doctor and refused the workers' sessions, failing their jobs (a trial).
    def servers(pools, mode, supervised: true)
      app = ActiveRecord::Base.connection_pool
      bobbin = Record.connection_pool
      needed = total(pools, mode, supervised: supervised)
      return (Store.postgresql?(app.db_config) ? [ [ app, needed ] ] : []) if same_server?(app, bobbin)

      jobs = jobs_at_most(pools, mode)
      [ [ app, jobs ], [ bobbin, needed - jobs ] ].select { |pool, _| Store.postgresql?(pool.db_config) }
    end

    # True when two Active Record pools reach the same PostgreSQL server (whatever the hosts they name: an address,
    # a socket, a pooler in front), told by when its postmaster started.
    def same_server?(app, bobbin)
      return true if app.equal?(bobbin)
      return false unless [ app, bobbin ].all? { |pool| Store.postgresql?(pool.db_config) }

      [ app, bobbin ].map { |pool| pool.with_connection { |c| c.select_value("SELECT pg_postmaster_start_time()::text", "Bobbin Server") } }.uniq.one?
    end

    # How a warning names a server when there are two: by a database configuration that reaches it.
    def on_server(pool) = " on the server of #{pool.db_config.name} (#{pool.db_config.database})"

    # PostgreSQL's max_connections, the connections it keeps for superusers, and the client sessions open now (this one
    # too), on the server `pool` reaches.
    def server_numbers(pool = ActiveRecord::Base.connection_pool)
      pool.with_connection do |c|
        [ c.select_value("SHOW max_connections").to_i, c.select_value("SHOW superuser_reserved_connections").to_i,
          c.select_value("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'").to_i ]
      end
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
      supervisor = async_supervisor
      jobs = pools.sum { |pool, copies| job_connections(pool.mode, pool.size) * copies }
      what = "#{pools.sum { |_, copies| copies }} pools in one process"
      check_pool!(jobs + supervisor, "#{what}#{" and its supervisor's clock and heartbeat" if supervisor.positive?}")
      check_queue_pool!(jobs, what) if supervisor.zero?
    end

    # With Bobbin's tables in a database of their own (connects_to), the async supervisor's clock and heartbeat query on
    # that database's pool, where the jobs' enqueues lease theirs: a pool of the jobs' need or less left the heartbeat
    # waiting checkout_timeout while jobs held its connections (enqueues in a transaction), and the supervisor's row
    # went stale past process_alive_threshold (a review). The app's pool was checked, this one not.
    def check_queue_pool!(jobs, what)
      queue = Record.connection_pool
      needed = jobs + ASYNC_SUPERVISOR_CONNECTIONS
      return if size_of(queue) >= needed

      short!(queue.size, queue.db_config.name, needed, "#{what}' enqueues and its supervisor's clock and heartbeat", url: "its URL")
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
      return if size_of(pool) >= needed

      short!(pool.size, pool.db_config.name, needed, what)
    end

    # Raises ConfigurationError when an Active Record pool of `size` connections (named `name`) has none to lend:
    # pool: 0, a negative one (before Rails 8.1), or a RAILS_MAX_THREADS that is not a number, which Rails reads as 0.
    # Its first query would wait checkout_timeout (5 s) and fail as if the server were down; called before any
    # query, naming what the largest of `pools` needs (check_pools! checks a pool that is merely too small later).
    def check_connectable!(size, name, pools = Bobbin.config.pools)
      return if size.nil? || size.positive?

      largest = pools.max_by { |pool| job_connections(pool.mode, pool.size) }
      return short!(size, name, 1, "Bobbin") unless largest

      short!(size, name, job_connections(largest.mode, largest.size), "a #{largest.mode} pool of #{largest.size}")
    end

    # Outside Rails there is no database.yml: the refusal named one to a plain Ruby script (a trial).
    def short!(size, name, needed, what, url: "DATABASE_URL")
      zero = " (a RAILS_MAX_THREADS that is not a number reads as 0)" if size.zero?
      where = AppExecutor.rails? ? "database.yml #{POOL_KEY}" : "the database config "
      raise ConfigurationError, "the Active Record pool of #{name.inspect} has #{size} connections#{zero} but #{what} needs #{needed}; " \
                                "set pool: #{needed} in #{where}(or ?#{URL_POOL_KEY}=#{needed} in #{url})"
    end

    # Rails 8.1's database.yml names the pool's size max_connections: (pool: still works).
    POOL_KEY = ActiveRecord.gem_version >= Gem::Version.new("8.1") ? "(max_connections: in Rails 8.1's) " : ""
    # The DATABASE_URL parameter that sets it: Active Record 8.1 reads max_connections before pool, so a URL's ?pool=
    # beside database.yml's max_connections: (Rails 8.1's default) changed nothing.
    URL_POOL_KEY = ActiveRecord.gem_version >= Gem::Version.new("8.1") ? "max_connections" : "pool"
  end
end
