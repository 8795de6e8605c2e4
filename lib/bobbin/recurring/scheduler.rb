# frozen_string_literal: true

module Bobbin
  module Recurring
    # Enqueues the ticks of this process's recurring tasks. Any number of schedulers may run, on any number of
    # hosts: each tick is written once because its run row has a unique key (RecurringRun.claim), not because
    # one scheduler was elected.
    #
    # Missed ticks. While a scheduler runs, every tick since its previous pass is enqueued, even when a pass
    # comes late. Ticks that fell while no scheduler ran (downtime) are caught up once: the latest of them is
    # enqueued when a scheduler starts, the older ones are skipped (and logged once the latest is enqueued). A task
    # that never ran starts at its next tick, and so does one new to the configuration or whose schedule changed: its
    # ticks count from when that schedule was set (a daily job moved from 3:00 to 4:00 ran again at the deploy, its
    # 4:00 tick "missed" since its 3:00 run; a review). A pass more than MAX_BEHIND ticks late is treated like downtime, and so
    # is the pass after one the database failed: a scheduler that could not reach it missed those ticks as a stopped
    # one does (after an 80 s outage, a task of every 5 s ran 15 times at once; a trial).
    class Scheduler
      MAX_BEHIND = 60

      def initialize(tasks = Bobbin.config.recurring_tasks.values, logger: Bobbin.logger)
        @tasks = tasks
        @logger = logger
        @since = {}
        @synced = false
      end

      # True when this process has tasks to schedule.
      def any? = @tasks.any?

      # Enqueues every due tick, of every task in one transaction; returns when the next one is due (nil without
      # tasks). A task that cannot be enqueued (its class cannot be found, Active Job cannot serialize its arguments)
      # is logged and its ticks skipped, and the other tasks still run; a database error ends the pass with nothing
      # enqueued, and the next pass retries its ticks.
      #
      # Without `now`, the time is the database's, so every host's scheduler ticks at the same moments (a host whose
      # clock ran 30 s ahead enqueued every tick 30 s early, and twice as many for 30 s as it started: a trial); the
      # next tick is returned on this host's clock, for its wait.
      def pass(now = nil)
        offset = 0 # the database's clock less this host's
        unless now || (@synced && @tasks.empty?)
          here = Time.now
          now = ProcessRecord.now
          offset = now - here
        end
        sync(now) unless @synced # with no tasks too: the last ones taken out of the configuration are removed then
        return if @tasks.empty?

        @resumes_from = nil
        plans = @tasks.filter_map { |task| plan(task, now) }
        ticks = plans.flat_map { |task, due, _skipped_since, rows| due.zip(rows).map { |tick, row| [ task.key, tick, row ] } }
        taken = ticks.map { |key, tick, _row| [ key, tick ] }.zip(RecurringRun.claim_all(ticks)).to_h
        plans.each do |task, due, skipped_since|
          # Missed by this scheduler only, when another took the latest tick (it was cut off; the others ran).
          skipped(task, skipped_since, due.last) if skipped_since && taken[[ task.key, due.last ]]
          @since[task.key] = now
        end
        @failed = false
        @tasks.map { |task| task.next_time(now) }.min - offset
      rescue ActiveRecord::ActiveRecordError
        @failed = true
        raise
      end

      private
        # A task that cannot be stored is refused, said once, and the others are stored: its args (NaN) failed the sync
        # of every task, at every pass, so none ticked (its job could not be written either).
        def sync(now)
          @tasks = @tasks.select { |task| storable?(task) }
          RecurringTask.sync(@tasks, now.getutc)
          @synced = true
        end

        def storable?(task)
          task.attributes
          true
        rescue ConfigurationError => error
          @logger.error("bobbin recurring: #{error.message}; it is not scheduled")
          false
        end

        # The task's due ticks, with their job rows and when the ticks it skips began; nil when its job cannot be built.
        # A database error reading its ticks ends the pass, and the next one tries them again.
        def plan(task, now)
          ticks, skipped_since = due(task, now)
          rows = job_rows(task, ticks, now)
          [ task, ticks, skipped_since, rows ] if rows
        end

        # The ticks' job rows, or nil when the task's job cannot be built (its class cannot be found or loaded, Active
        # Job cannot serialize its arguments, its queue_as block raised): that is logged with the task's key and its
        # ticks skipped. Only an outage meanwhile ends the pass: any Active Record error did, so a queue_as block that
        # looked up a record gone (RecordNotFound) stopped every task, every second, in a line that named none (a review).
        def job_rows(task, ticks, now)
          ticks.map { task.job_row }
        rescue StandardError => error
          raise if Store.outage?(error)

          @since[task.key] = now
          @logger.error("bobbin recurring: #{error.is_a?(ConfigurationError) ? error.message : "task #{task.key}: #{error.class}: #{error.message}"}")
          nil
        end

        # The ticks to enqueue now, by the missed-ticks policy above, and when the ticks it skips began (nil: none).
        def due(task, now)
          since = @since[task.key]
          return steady(task, since, now) if since && !@failed
          return resume(task, since, now) if since

          last = resumes_from[task.key]
          last ? resume(task, last, now) : [ [] ]
        end

        # Every tick since this scheduler's previous pass, unless it fell that far behind.
        def steady(task, since, now)
          ticks = task.ticks(since, now, limit: MAX_BEHIND + 1)
          ticks.size > MAX_BEHIND ? resume(task, since, now) : [ ticks ]
        end

        # After downtime: the latest missed tick only.
        def resume(task, since, now)
          missed = task.ticks(since, now, limit: 2)
          missed.size < 2 ? [ missed ] : [ [ task.latest_tick(now) ], since ]
        end

        # Said once the latest tick is enqueued: said before, it was said every second while the database was down,
        # of a tick not written.
        def skipped(task, since, latest)
          @logger.warn("bobbin recurring: #{task.key} missed ticks since #{since.utc.iso8601} (no scheduler ran, or none reached the database); " \
                       "enqueued only the latest (#{latest.utc.iso8601})")
        end

        # Where each task that ran counts its missed ticks from: its latest tick (by any scheduler), or when its schedule
        # was set if that is later. Read once a pass for all of them.
        def resumes_from
          @resumes_from ||= begin
            latest = RecurringRun.where(task_key: @tasks.map(&:key)).group(:task_key).maximum(:run_at)
            set = RecurringTask.where(key: latest.keys).pluck(:key, :updated_at).to_h
            latest.to_h { |key, run_at| [ key, [ run_at, set[key] ].compact.max ] }
          end
        end
    end
  end
end
