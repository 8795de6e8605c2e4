# frozen_string_literal: true

require "rails/railtie"

module Bobbin
  # Bobbin in a Rails app: config/bobbin.yml and config/recurring.yml are loaded at boot, then `config.bobbin`
  # (the same settings as Bobbin.configure: shutdown_timeout, workers, connects_to, logger, …); Bobbin logs to
  # Rails.logger with Rails-style lines; `bin/rails bobbin:start` and friends; the Puma plugin (`plugin :bobbin`).
  #
  #   config.bobbin.connects_to = { database: { writing: :queue } }   # Bobbin's tables in their own database
  class Railtie < ::Rails::Railtie
    config.bobbin = ActiveSupport::OrderedOptions.new
    # Files read at boot (paths from the app's root); config.bobbin.config_file / recurring_file change them.
    FILES = { config_file: "config/bobbin.yml", recurring_file: "config/recurring.yml" }.freeze

    rake_tasks { load File.expand_path("../tasks/bobbin.rake", __dir__) }

    initializer "bobbin.configure", before: :load_config_initializers do |app|
      options = app.config.bobbin
      # Before recurring.yml is read: its schedules that name no zone are in the app's (Solid Queue's reading).
      Bobbin.config.recurring_time_zone = options.fetch(:recurring_time_zone) { app.config.time_zone || "UTC" }
      path = Railtie.file(app, :config_file)
      ConfigFile.load(path, env: Railtie.environment, optional: true) if File.exist?(path)
      recurring = Railtie.file(app, :recurring_file)
      Recurring.load_file(recurring, env: Railtie.environment) if File.exist?(recurring)
      Railtie.apply(options.except(*FILES.keys, :recurring_time_zone))
    end

    initializer "bobbin.logger", after: :initialize_logger do |app|
      Bobbin.config.logger = ::Rails.logger unless app.config.bobbin.key?(:logger)
      LogSubscriber.attach_to(:bobbin)
    end

    config.after_initialize do |app|
      Railtie.connect(app)
    end

    # Mission Control – Jobs, when the app has it: the Bobbin adapter answers its queries (MissionControlAdapter).
    # Before Mission Control's after_initialize builds its adapter instances.
    config.before_initialize do
      if defined?(::MissionControl::Jobs::Adapter)
        require "active_job/queue_adapters/bobbin_adapter"
        MissionControlAdapter.install(ActiveJob::QueueAdapters::BobbinAdapter)
      end
    end

    class << self
      # The section of config/bobbin.yml and config/recurring.yml that applies: BOBBIN_ENV, as outside Rails
      # (ConfigFile.environment), else Rails.env. (Rails.env alone ran production's section under BOBBIN_ENV=development.)
      def environment = ENV["BOBBIN_ENV"].presence || ::Rails.env

      # The path of the file `setting` (a key of FILES) names: config.bobbin's, else the default, from the app's root. A
      # nil (`config.bobbin.config_file = ENV["BOBBIN_CONFIG"]`, the variable unset) failed the boot with Pathname's
      # TypeError, naming neither the setting nor Bobbin (a review).
      def file(app, setting)
        value = app.config.bobbin.fetch(setting, FILES[setting])
        return app.root.join(value).to_s if value.is_a?(String) || value.is_a?(Pathname)

        raise ConfigurationError, "config.bobbin.#{setting}: must be a path (a String or Pathname, from the app's root), got #{value.inspect[0, 80]}"
      end

      # Applies `config.bobbin` settings to Bobbin.config, naming any it does not know.
      def apply(options)
        options.each do |name, value|
          raise ConfigurationError, "config.bobbin.#{name}: unknown setting" unless Bobbin.config.respond_to?(:"#{name}=")

          Bobbin.config.public_send(:"#{name}=", value)
        end
      end

      # Points Bobbin's models at their own database (connects_to). With the jobs in another database than the
      # app's records, perform_later inside a transaction cannot commit with it, so Active Job defers it to after
      # the commit (dropped on rollback) unless the app chose otherwise: in Rails 7.2 by the setting, which Rails
      # applies itself; from Rails 8.0, which ignores the setting, only by setting it false (`true` is kept).
      def connect(app)
        return unless (target = Bobbin.config.connects_to)

        Record.connects_to(**target)
        return unless app.config.respond_to?(:active_job) # an app without Active Job (rails new --minimal): Bobbin::Job only
        return if app.config.active_job.key?(:enqueue_after_transaction_commit) &&
                  (ActiveJob.gem_version < Gem::Version.new("8.0") || [ false, :never ].include?(app.config.active_job.enqueue_after_transaction_commit))

        ActiveSupport.on_load(:active_job) { self.enqueue_after_transaction_commit = true }
      end
    end
  end
end
