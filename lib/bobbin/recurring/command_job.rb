# frozen_string_literal: true

module Bobbin
  module Recurring
    # Runs a recurring task's command. The job's argument is only the task's key: the code comes from this
    # process's own configuration (config/recurring.yml, Bobbin.recurring), never from the database.
    class CommandJob
      include Job
      bobbin_options retries: 0

      # Evaluates the command of recurring task `key` at the top level of the app.
      def perform(key)
        task = Bobbin.config.recurring_tasks[key]
        raise UnrunnableJob, "recurring task #{key.inspect} is not configured in this process (config/recurring.yml)" unless task&.command

        eval(task.command, TOPLEVEL_BINDING, "recurring task #{key}") # rubocop:disable Security/Eval -- the app's own configured code
      end
    end
  end
end
