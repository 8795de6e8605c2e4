# frozen_string_literal: true

require "tempfile"

# Runs Ruby in the dummy Rails app (test/rails_app) as a real, separate process: `bundle exec ruby` on Bobbin's
# Gemfile, from the app's root, against the test database.
module RailsAppProcesses
  APP = File.join(TestProcesses::ROOT, "test/rails_app")

  # Runs the block with a copy of the dummy app to change, in a directory removed after it (the suites beside a test
  # boot the dummy app itself).
  def with_app_copy
    Dir.mktmpdir do |dir|
      app = File.join(dir, "app")
      FileUtils.cp_r(APP, app)
      yield app
    end
  end

  # The URL the app's config/database.yml reads: the tests' database (an SQLite path made absolute).
  def rails_app_database_url
    url = TestDatabase.url
    url.start_with?("sqlite3:") ? url.sub(TestDatabase.sqlite_path, File.expand_path(TestDatabase.sqlite_path, TestProcesses::ROOT)) : url
  end

  # Runs `bundle exec ruby *args` in `app` with RAILS_ENV=`env` (and `variables`); returns [exit status, its output].
  def run_in_rails_app(*args, env:, app: APP, timeout: 120, variables: {})
    Tempfile.create("rails-app-output") do |log|
      pid = spawn_in_rails_app(*args, env: env, app: app, variables: variables, log: log)
      status = ensure_killed(pid) { wait_exit(pid, timeout: timeout) }
      output = File.read(log.path)
      flunk("#{args.join(' ')} (#{env}) did not exit within #{timeout}s:\n#{output}") unless status
      [ status, output ]
    end
  end

  # Starts `bundle exec ruby *args` in `app` with RAILS_ENV=`env` (and `variables`), its output to `log`; returns its pid.
  def spawn_in_rails_app(*args, env:, log:, app: APP, variables: {})
    environment = { "BUNDLE_GEMFILE" => File.join(TestProcesses::ROOT, "Gemfile"), "RAILS_ENV" => env,
                    "BOBBIN_RAILS_APP_DATABASE_URL" => rails_app_database_url, "DATABASE_URL" => nil, **variables }
    Bundler.with_original_env { Process.spawn(environment, "bundle", "exec", "ruby", "-r", TestProcesses::BOOT_CACHE, *args, chdir: app, out: log, err: log) }
  end

  # Runs `exe/bobbin *args` from the app's root (so it boots config/environment.rb); returns [status, output].
  def bobbin_in_rails_app(*args, env:, app: APP, variables: {})
    run_in_rails_app(File.join(TestProcesses::ROOT, "exe/bobbin"), *args, env: env, app: app, variables: variables)
  end
end
