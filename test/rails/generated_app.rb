# frozen_string_literal: true

require "digest"
require "erb"
require "open3"

# A Rails 8 app made by `rails new` in a temporary directory, once per test process, on the tests' database kind
# (PostgreSQL or SQLite) and the gems already installed (Bobbin's bundle path: no network). Bobbin is added with
# `bundle add`, then installed with its generator, as a user would.
class GeneratedApp
  ROOT = TestProcesses::ROOT
  SKIPS = %w[--skip-bundle --skip-git --skip-docker --skip-kamal --skip-thruster --skip-javascript --skip-hotwire
             --skip-jbuilder --skip-test --skip-system-test --skip-rubocop --skip-brakeman --skip-bundler-audit --skip-ci
             --skip-dev-gems --skip-action-mailbox --skip-action-text --skip-active-storage --skip-action-cable
             --skip-asset-pipeline --skip-solid --quiet].freeze
  # What Solid Queue's installer (run by a default `rails new`) leaves in production.rb; the generator must replace it.
  SOLID_QUEUE_LINES = "config.active_job.queue_adapter = :solid_queue\n  config.solid_queue.connects_to = { database: { writing: :queue } }"

  # The app, generated and installed (generator run twice by default; db:prepare and bin/bobbin start tried in development;
  # the generator with --environments all, twice; db:prepare).
  def self.installed = @installed ||= new.tap(&:install)

  attr_reader :dir, :outputs, :snapshots

  def initialize
    @base = Dir.mktmpdir("bobbin-rails-app")
    @dir = File.join(@base, "bobbin_app_#{Process.pid}")
    @outputs = {}
    @snapshots = {}
    Minitest.after_run { destroy }
  end

  def postgres? = TestDatabase.postgres?

  def install
    drop_left_behind if postgres?
    rails_new
    File.write(path("config/environments/production.rb"), read("config/environments/production.rb").sub("# config.active_job.queue_adapter = :resque", SOLID_QUEUE_LINES))
    @snapshots[:before] = snapshot
    @outputs[:install] = run!("bin/rails", "generate", "bobbin:install")
    @snapshots[:installed] = snapshot
    @outputs[:again] = run!("bin/rails", "generate", "bobbin:install")
    @snapshots[:again] = snapshot
    # A user's next steps, in development, where that install (production only) put nothing: db:prepare, bin/bobbin start.
    @outputs[:prepare_production_only] = run!("bin/rails", "db:prepare")
    @outputs[:start_production_only] = capture("bin/bobbin", "start")
    @outputs[:all] = run!("bin/rails", "generate", "bobbin:install", "--environments", "all")
    @snapshots[:all] = snapshot
    @outputs[:all_again] = run!("bin/rails", "generate", "bobbin:install", "--environments", "all")
    @snapshots[:all_again] = snapshot
    File.write(path("app/jobs/file_job.rb"), <<~RUBY)
      # Writes tmp/NAME with the Bobbin job id, the adapter and the process that ran it.
      class FileJob < ApplicationJob
        def perform(name) = File.write(Rails.root.join("tmp", name), "\#{provider_job_id} \#{self.class.queue_adapter_name} \#{Process.pid}")
      end
    RUBY
    @outputs[:prepare] = run!("bin/rails", "db:prepare")
  end

  # Runs a command in the app's directory with its bundle; returns its output, failing on a non-zero exit.
  def run!(*command, env: {})
    output, status = capture(*command, env: env)
    raise "#{command.join(' ')} failed in #{@dir}:\n#{output}" unless status.success?

    output
  end

  # Runs a command in the app's directory with its bundle; returns [its output, its exit status].
  def capture(*command, env: {})
    Bundler.with_unbundled_env { Open3.capture2e(environment.merge(env), *command, chdir: @dir) }
  end

  # Starts a command in the app's directory (its own process group); returns the pid.
  def spawn(*command, log:, env: {})
    Bundler.with_unbundled_env { Process.spawn(environment.merge(env), *command, chdir: @dir, [ :out, :err ] => [ log, "w" ], pgroup: true) }
  end

  def path(file) = File.join(@dir, file)

  # The development queue database of config/database.yml, for a connection from the test process: SQLite's path
  # made absolute, PostgreSQL's port as the app's commands get it.
  def queue_database
    config = YAML.safe_load(ERB.new(read("config/database.yml")).result, aliases: true).dig("development", "queue")
    return config.merge("database" => path(config["database"])) unless postgres?

    config.merge("port" => environment["PGPORT"].to_i)
  end

  def read(file) = File.read(path(file))

  # Digests of the app's files (not tmp/, log/ or databases): what a generator run changed.
  def snapshot
    Dir.glob("**/*", base: @dir).reject { |f| f.start_with?("tmp/", "log/", "storage/") || File.directory?(path(f)) }.sort
       .to_h { |file| [ file, Digest::SHA256.file(path(file)).hexdigest ] }
  end

  private
    # A run killed before its after_run (a CI job stopped mid-suite) leaves its app's databases, named after its pid,
    # and a later run with that pid (machines that boot alike hand out alike pids) would find them set up. Drops those
    # of runs that are gone, and any of this pid: this run has made none yet.
    def drop_left_behind
      connection = Bobbin::Record.connection
      connection.select_values("SELECT datname FROM pg_database WHERE datname ~ '^bobbin_app_[0-9]+_'").each do |name|
        pid = name[/\Abobbin_app_(\d+)_/, 1].to_i
        next if pid != Process.pid && TestProcesses.alive?(pid)

        connection.execute("DROP DATABASE IF EXISTS #{connection.quote_table_name(name)} WITH (FORCE)")
      end
    end

    def environment
      env = { "BUNDLE_GEMFILE" => path("Gemfile"), "BUNDLE_PATH" => File.join(ROOT, "vendor/bundle"), "RAILS_ENV" => "development",
              "DATABASE_URL" => nil, "BUNDLE_FROZEN" => nil }
      postgres? ? env.merge("PGPORT" => TestDatabase.url[/port=(\d+)/, 1] || "5432") : env
    end

    def rails_new
      Bundler.with_unbundled_env do
        output, status = Open3.capture2e({ "BUNDLE_GEMFILE" => File.join(ROOT, "Gemfile") }, "bundle", "exec", "rails", "new", @dir, *SKIPS,
                                         "--database", postgres? ? "postgresql" : "sqlite3", chdir: @base)
        raise "rails new failed:\n#{output}" unless status.success?
      end
      run!("bundle", "remove", "debug")
      run!("bundle", "add", "bobbin", "--path", ROOT, "--skip-install")
      run!("bundle", "install", "--local")
    end

    def destroy
      run!("bin/rails", "db:drop", env: { "DISABLE_DATABASE_ENVIRONMENT_CHECK" => "1" }) if postgres? && File.exist?(path("bin/rails"))
    rescue RuntimeError => error
      warn(error.message)
    ensure
      FileUtils.rm_rf(@base)
    end
end
