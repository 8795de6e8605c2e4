# frozen_string_literal: true

require "test_helper"
require "open3"
require_relative "../rails/rails_app_processes"

# SQLite goes on with the file a process opened. A web process whose database file was deleted (or a backup moved over
# it) went on enqueuing into the old file, each call returning an id, while the workers, which notice, had exited
# (a trial: 1,144 jobs lost). The enqueue now raises, saying where the job went and what to do.
class ReplacedDatabaseTest < Bobbin::TestCase
  SCRIPT = <<~RUBY
    require "bobbin"
    class NoteJob
      include Bobbin::Job
      def perform = nil
    end
    path = ARGV.fetch(0)
    Bobbin.connect("sqlite3:\#{path}")
    Bobbin.migrate!
    puts "first #{'#{NoteJob.enqueue}'}"
    File.rename(path, "\#{path}.moved") # a mv of the directory or a backup restored over it does the same
    File.write(path, "")
    begin
      NoteJob.enqueue
      puts "second enqueue returned"
    rescue Bobbin::EnqueueError => error
      puts error.message
    end
    begin
      Bobbin.enqueue_all([ [ NoteJob, [] ], [ NoteJob, [] ] ])
      puts "enqueue_all returned"
    rescue Bobbin::EnqueueError => error
      puts error.message
    end
  RUBY

  test "SQLite: an enqueue into a database file that was moved away since this process's first enqueue raises, naming the file" do
    once_per_run
    Dir.mktmpdir do |dir|
      path = File.join(dir, "jobs.sqlite3")
      out, status = Open3.capture2e(*ruby, "-I", File.join(ROOT, "lib"), "-e", SCRIPT, path)
      assert status.success?, out
      lines = out.lines.map(&:chomp)
      assert_equal "first 1", lines[0]
      assert_equal "the SQLite database #{path} was moved, deleted or replaced since this process opened it: job 2 went into the old file " \
                   "it still has open, which workers that have not noticed yet (a second or two) may still run, and then none will; " \
                   "start this process again to open the file at the path", lines[1]
      assert_match(/: 2 jobs \(3…4\) went into the old file/, lines[2])
    end
  end

  RAILS_SCRIPT = <<~RUBY
    require File.join(ARGV.fetch(0), "config/environment")
    Bobbin.migrate!
    class NoteJob < ActiveJob::Base
      def perform = nil
    end
    puts "first \#{NoteJob.perform_later.provider_job_id}"
    path = Rails.root.join("db/jobs.sqlite3").to_s
    File.rename(path, "\#{path}.moved")
    File.write(path, "")
    begin
      puts "second enqueue returned \#{NoteJob.perform_later.provider_job_id}"
    rescue Bobbin::EnqueueError => error
      puts error.message
    end
  RUBY

  test "SQLite in a Rails app started from another directory: database.yml's relative path is watched from Rails.root" do
    once_per_run
    extend RailsAppProcesses
    with_app_copy do |app|
      Dir.mktmpdir do |elsewhere| # systemd's WorkingDirectory unset, `puma -C /app/config/puma.rb` run from another directory
        environment = { "BUNDLE_GEMFILE" => File.join(ROOT, "Gemfile"), "RAILS_ENV" => "test", "DATABASE_URL" => nil,
                        "BOBBIN_RAILS_APP_DATABASE_URL" => "sqlite3:db/jobs.sqlite3" }
        out, status = Bundler.with_original_env do
          Open3.capture2e(environment, "bundle", "exec", "ruby", "-I", File.join(ROOT, "lib"), "-e", RAILS_SCRIPT, app, chdir: elsewhere)
        end
        assert status.success?, out
        assert_match(/^first \d+$/, out)
        assert_no_match(/second enqueue returned/, out)
        assert_match %r{the SQLite database \S*/db/jobs\.sqlite3 was moved, deleted or replaced since this process opened it: job 2}, out
      end
    end
  end
end
