# frozen_string_literal: true

require "test_helper"
require "open3"

# `bobbin start` on SQLite forks its workers from a supervisor that holds SQLite connections; the sqlite3 gem closes
# them in each worker, as Bobbin expects. On Active Record 7.2 (which, unlike 8, does not silence the gem's warning
# about it) every worker's start printed "Writable sqlite database connection(s) were inherited from a forked
# process. This is unsafe …": a first run on Rails 7.2 looked broken.
class SqliteForkWarningTest < Bobbin::TestCase
  GEMFILE = File.join(ROOT, "test/active_job/rails_suite/rails-7.2.gemfile")

  setup { skip "the warning is SQLite's" if postgres? }

  # Runs `exe/bobbin ARGS` on Active Record 7.2's bundle against `url`, as `bundle exec bobbin` would.
  def bobbin_on_rails_72(url, *args)
    env = { "BUNDLE_GEMFILE" => GEMFILE, "BUNDLE_PATH" => File.join(ROOT, "vendor/bundle"), "DATABASE_URL" => url }
    Bundler.with_unbundled_env { yield env, [ "bundle", "exec", RbConfig.ruby, File.join(ROOT, "exe/bobbin"), *args ] }
  end

  test "bobbin start on Active Record 7.2 and SQLite starts its workers without the sqlite3 gem's fork warning", long: true do
    url = "sqlite3:#{File.join(Dir.mktmpdir, 'jobs.sqlite3')}"
    bobbin_on_rails_72(url) do |env, _|
      output, status = Open3.capture2e(env, "bundle", "check", chdir: ROOT)
      skip "Active Record 7.2's bundle is not installed (bin/setup installs it): #{output}" unless status.success?
    end
    bobbin_on_rails_72(url, "migrate") { |env, command| assert_predicate Open3.capture2e(env, *command, chdir: ROOT).last, :success? }
    log = File.join(Dir.mktmpdir, "bobbin.log")
    pid = bobbin_on_rails_72(url, "start", "--threads", "1", "--processes", "2") do |env, command|
      Process.spawn(env, *command, chdir: ROOT, [ :out, :err ] => [ log, "w" ], pgroup: true)
    end
    ensure_killed([ pid ]) do
      wait_for("two workers started", seen: -> { File.read(log) }) { File.read(log).scan(/bobbin worker \d+ \(pid \d+\) started/).size == 2 }
      Process.kill("TERM", pid)
      assert wait_exit(pid)&.success?, File.read(log)
    end
    refute_match(/Writable sqlite database connection/, File.read(log))
  end
end
