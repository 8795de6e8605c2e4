# frozen_string_literal: true

require "test_helper"
require_relative "rails_app_processes"

# README: config/bobbin.yml's section is BOBBIN_ENV, else RAILS_ENV/RACK_ENV. In a Rails app the Railtie loaded
# Rails.env's: BOBBIN_ENV=development with RAILS_ENV=production ran production's section, and BOBBIN_ENV=staging
# (no such section) ran instead of stopping (a trial).
class RailsBobbinEnvTest < Bobbin::TestCase
  include RailsAppProcesses

  PRINT = 'require "./config/environment"; puts "timeout=#{Bobbin.config.shutdown_timeout} tasks=#{Bobbin.config.recurring_tasks.keys.inspect}"'

  test "BOBBIN_ENV chooses the section of config/bobbin.yml and config/recurring.yml in a Rails app; RAILS_ENV only without it", long: true do
    once_per_run
    with_app_copy do |app|
      File.write(File.join(app, "config/bobbin.yml"), "development:\n  shutdown_timeout: 7\nproduction:\n  shutdown_timeout: 11\n")
      File.write(File.join(app, "config/recurring.yml"), <<~YAML)
        development:
          dev_task: { class: LedgerJob, schedule: every hour }
        production:
          prod_task: { class: LedgerJob, schedule: every hour }
      YAML
      run = ->(bobbin_env) { run_in_rails_app("-e", PRINT, env: "production", app: app, variables: { "BOBBIN_ENV" => bobbin_env }) }

      status, output = run.call("development")
      assert status.success?, output
      assert_match(/^timeout=7.0 tasks=\["dev_task"\]$/, output, "BOBBIN_ENV=development over RAILS_ENV=production")
      status, output = run.call(nil)
      assert status.success?, output
      assert_match(/^timeout=11.0 tasks=\["prod_task"\]$/, output, "RAILS_ENV without BOBBIN_ENV")

      status, output = bobbin_in_rails_app("start", env: "production", app: app, variables: { "BOBBIN_ENV" => "staging" })
      assert_equal 78, status.exitstatus, output
      assert_match(%r{bobbin: config/bobbin\.yml: no "staging" section \(found: development, production\)}, output)
      assert_no_match(/supervisor \d+ .*starting/, output)
    end
  end

  # Solid Queue reads a schedule that names no zone in config.time_zone; Bobbin read it in UTC, so a recurring.yml
  # ported from an app of Tokyo ran every task nine hours late (a trial).
  test "recurring.yml's schedules that name no zone are in the app's config.time_zone; config.bobbin.recurring_time_zone overrides it", long: true do
    once_per_run
    with_app_copy do |app|
      File.write(File.join(app, "config/recurring.yml"), "production:\n  nightly: { class: LedgerJob, schedule: every day at 3am }\n")
      application = File.join(app, "config/application.rb")
      original = File.read(application)
      print = 'require "./config/environment"; puts "zone=#{Bobbin.config.recurring_time_zone} next=#{Bobbin.config.recurring_tasks["nightly"].next_time(Time.utc(2026, 11, 26, 12)).iso8601}"'
      [ [ nil, "zone=UTC next=2026-11-27T03:00:00Z" ], [ 'config.time_zone = "Tokyo"', "zone=Asia/Tokyo next=2026-11-26T18:00:00Z" ],
        [ "config.time_zone = \"Tokyo\"\n    config.bobbin.recurring_time_zone = \"Europe/Paris\"", "zone=Europe/Paris next=2026-11-27T02:00:00Z" ] ].each do |line, expected|
        File.write(application, line ? original.sub(/^(\s*)config\.load_defaults.*$/) { "#{$&}\n#{$1}#{line}" } : original)
        status, output = run_in_rails_app("-e", print, env: "production", app: app)
        assert status.success?, output
        assert_includes output, expected, line
      end
    end
  end

  # config.bobbin.config_file = ENV["BOBBIN_CONFIG"], the variable unset, stopped the boot with "TypeError: no implicit
  # conversion of nil into String" from Pathname, naming neither the setting nor Bobbin (a review).
  test "config.bobbin.config_file or recurring_file that is not a path stops the boot naming the setting; a Pathname is one", long: true do
    once_per_run
    with_app_copy do |app|
      production = File.join(app, "config/environments/production.rb")
      original = File.read(production)
      set = ->(line) { File.write(production, original.sub("config.eager_load = true", "config.eager_load = true\n  #{line}")) }
      %w[config_file recurring_file].each do |setting|
        set.call("config.bobbin.#{setting} = ENV[\"BOBBIN_UNSET_FILE\"]")
        status, output = run_in_rails_app("-e", PRINT, env: "production", app: app)
        assert_not status.success?, output
        assert_match(/config\.bobbin\.#{setting}: must be a path \(a String or Pathname, from the app's root\), got nil \(Bobbin::ConfigurationError\)/, output)
        assert_no_match(/TypeError/, output)
      end

      File.write(File.join(app, "config/jobs.yml"), "production:\n  shutdown_timeout: 13\n")
      set.call('config.bobbin.config_file = Rails.root.join("config/jobs.yml")')
      status, output = run_in_rails_app("-e", PRINT, env: "production", app: app)
      assert status.success?, output
      assert_match(/^timeout=13.0 /, output)
    end
  end
end
