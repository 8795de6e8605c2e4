# frozen_string_literal: true

require_relative "recurring/task"
require_relative "recurring/command_job"
require_relative "recurring/scheduler"

module Bobbin
  # Recurring jobs: tasks from config/recurring.yml or Bobbin.recurring, enqueued by the host's Maintenance
  # clock (Scheduler), listed with their last and next runs by RecurringTask.
  #
  #   production:
  #     nightly_report:
  #       class: ReportJob
  #       args: [ "daily" ]
  #       schedule: every day at 3am
  #     purge_sessions:
  #       command: "Session.expired.delete_all"
  #       schedule: "*/15 * * * *"
  module Recurring
    module_function

    # Adds the tasks in the `env` section of `path` (ERB, then YAML) to Bobbin.config; returns them. A file without
    # that section adds none, unless it is a file of tasks without sections (each top-level value a task's mapping,
    # with its `schedule:`, `class:` or `command:`), which Solid Queue reads for every environment: so does Bobbin
    # (such a recurring.yml, ported from Solid Queue, scheduled nothing, and nothing said so).
    def load_file(path, env: ConfigFile.environment)
      document = ConfigFile.parse(path)
      raise ConfigurationError, "#{path}: expected a mapping at the top, got #{document.class}" unless document.is_a?(Hash)

      flat = !document.key?(env) && tasks_without_sections?(document)
      section = flat ? document : document.fetch(env, nil) || {}
      raise ConfigurationError, "#{path}: #{env} must be a mapping of task names to tasks" unless section.is_a?(Hash)

      section.map do |key, task|
        where = flat ? "#{path}: #{key}" : "#{path}: #{env}.#{key}"
        # A task written as a string, or left empty, is refused naming it (not a NoMethodError); a key that is not a name, as unknown.
        Bobbin.config.recurring(key, where: where, **Task.mapping!(task, where).transform_keys { |name| name.to_s.to_sym })
      end
    end

    # True when every top-level value of `document` is a task (a mapping that names its schedule, class or command),
    # not an environment's section (a mapping of task names to tasks).
    def tasks_without_sections?(document)
      document.any? && document.each_value.all? { |value| value.is_a?(Hash) && value.keys.map(&:to_s).intersect?(%w[schedule class command]) }
    end
  end
end
