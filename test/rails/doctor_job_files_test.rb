# frozen_string_literal: true

require "test_helper"
require_relative "rails_app_processes"

# `bobbin doctor` is the check before a deploy. In development (eager_load off) a job file that does not load passed
# it, and its jobs failed later; an app that eager-loads would not boot (a trial).
class RailsDoctorJobFilesTest < Bobbin::TestCase
  include RailsAppProcesses

  test "bobbin doctor in development names each job file that does not load, and fails", long: true do
    once_per_run
    with_app_copy do |app|
      File.write(File.join(app, "app/jobs/needs_key_job.rb"), "class NeedsKeyJob < ApplicationJob\n  KEY = ENV.fetch(\"BOBBIN_NO_SUCH_KEY\")\nend\n")
      File.write(File.join(app, "app/jobs/broken_syntax_job.rb"), "class BrokenSyntaxJob < ApplicationJob\n  def perform(\nend\n")
      # An app moved from GoodJob, its cron still on (GoodJob's railtie makes config.good_job these options).
      good_job = File.join(FileUtils.mkdir_p(File.join(app, "config/initializers")).first, "good_job.rb")
      File.write(good_job, "Rails.application.config.good_job = ActiveSupport::OrderedOptions.new.merge!(enable_cron: true, " \
                           "cron: { tick: { cron: \"* * * * *\", class: \"LedgerJob\" } })\n")
      status, output = bobbin_in_rails_app("doctor", env: "development", app: app,
                                           variables: { "BOBBIN_RAILS_APP_DATABASE_URL" => rails_app_database_url })
      assert_equal 1, status.exitstatus, output
      assert_match(%r{✗ app/jobs/broken_syntax_job\.rb does not load \(SyntaxError: \S*broken_syntax_job\.rb:\d+: (?!syntax errors found).+\): its jobs would fail, and an app that eager-loads would not boot}, output)
      assert_match(%r{✗ app/jobs/needs_key_job\.rb does not load \(KeyError: key not found: "BOBBIN_NO_SUCH_KEY"\)}, output)
      assert_no_match(%r{ledger_job\.rb|failing_job\.rb}, output, "the files that load are not named")
      assert_match(/! config\.good_job\.cron has 1 entries and enable_cron is on: .*every tick runs twice; set config\.good_job\.enable_cron = false/, output)

      FileUtils.rm([ File.join(app, "app/jobs/needs_key_job.rb"), File.join(app, "app/jobs/broken_syntax_job.rb") ])
      File.write(good_job, "Rails.application.config.good_job = ActiveSupport::OrderedOptions.new.merge!(enable_cron: false, cron: {})\n")
      status, output = bobbin_in_rails_app("doctor", env: "development", app: app,
                                           variables: { "BOBBIN_RAILS_APP_DATABASE_URL" => rails_app_database_url })
      assert_no_match(/does not load|good_job/, output)
    end
  end
end
