# frozen_string_literal: true

module Bobbin
  # The log of one periodic task that retries while the database is away (a heartbeat, the clock, unwritten outcomes):
  # the failure when it starts, a reminder at most every REPEAT seconds while it lasts, and one line when the task
  # works again. A two-minute outage is a few lines per task, not one (of several lines, libpq's) per retry.
  class OutageLog
    REPEAT = 30

    # Logs a failure of `task` that is not an outage (a bug, a schema that does not match): waiting will not cure
    # it, so it is an error, with the first line of Bobbin's or the app's code that raised it (not a driver's).
    # `next_try` says what happens now.
    def self.error(task, error, next_try)
      origin = LibraryFrames.first_own(error.backtrace, bobbin: true)
      Bobbin.logger.error("#{task} failed: #{Store.reason(error)}#{" (#{origin})" if origin}; #{next_try}")
      ThreadErrors.report(error, task: task)
    end

    # `task` starts each line: "bobbin supervisor: heartbeat"; `repeat`: seconds between reminders.
    def initialize(task, logger: nil, repeat: REPEAT)
      @task = task
      @repeat = repeat
      @logger = logger
      @since = nil
    end

    # Records a failure of the task (an exception or a message); logs it unless a line said so less than `repeat` s ago.
    # `cause`: the exception on_thread_error hears of at the outage's start (the failure's own, when it is one).
    def failed(error, cause: error)
      Store.drop_read_only_sessions(error) if error.is_a?(Exception)
      reason = error.is_a?(Exception) ? "#{error.message.lines.first&.strip}#{Store.driver_said(error)}" : error.to_s.lines.first&.strip
      now = Bobbin.monotonic
      if @since.nil?
        @since = @said = now
        logger.warn("#{@task} failed: #{reason}; retrying")
        ThreadErrors.report(cause, task: @task, severity: :warning) if cause.is_a?(Exception) # once an outage, at its start
      elsif now - @said >= @repeat
        @said = now
        logger.warn("#{@task} still failing after #{(now - @since).round}s: #{reason}; retrying")
      end
    end

    # True from a failure until the next success.
    def failing? = !@since.nil?

    # Records a success; after failures, logs that the task works again.
    def succeeded
      return if @since.nil?

      logger.info("#{@task} works again after #{(Bobbin.monotonic - @since).round}s")
      @since = nil
    end

    private
      def logger = @logger || Bobbin.logger
  end
end
