# frozen_string_literal: true

require "test_helper"
require "open3"
require "tmpdir"

# `Bobbin.connect("sqlite3:db/jobs.sqlite3")` (the README's plain-Ruby start) names a file relative to the working
# directory, and Active Record opened every later connection by that relative path: a job that ran in a
# `Dir.chdir(dir) { … }` block while the worker opened its outcome writer (or the pool a connection) had it open, and
# create, `dir/db/jobs.sqlite3`, an empty file. The worker's outcomes failed ("no such table: bobbin_jobs"), the
# jobs stayed claimed until it stopped and ran again, and the job's enqueues failed (a trial).
class RelativeSQLitePathTest < Bobbin::TestCase
  SCRIPT = <<~RUBY
    require "bobbin"
    Bobbin.connect("sqlite3:db/jobs.sqlite3")
    Bobbin.migrate!
    ELSEWHERE = ARGV.fetch(0)
    IN = File.join(ELSEWHERE, "..", "in")

    class ChildJob
      include Bobbin::Job
      def perform = nil
    end

    # Works in another directory until the other jobs' outcomes are written (10 s at most).
    class ChdirJob
      include Bobbin::Job
      bobbin_options priority: -1, retries: 0
      def perform
        Dir.chdir(ELSEWHERE) do
          FileUtils.touch(IN)
          deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 10
          sleep(0.05) until Bobbin::JobRecord.where(class_name: "EnqueueJob", state: "succeeded").count == 3 ||
                            Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
        end
      end
    end

    # Enqueues a job while the other one is in its directory.
    class EnqueueJob
      include Bobbin::Job
      bobbin_options retries: 0
      def perform
        sleep(0.01) until File.exist?(IN)
        ChildJob.enqueue
      end
    end

    ChdirJob.enqueue
    3.times { EnqueueJob.enqueue }
    Bobbin::Worker.new(queues: [ "*" ], threads: 4).run_until_empty
    puts JSON.generate(Bobbin.counts)
  RUBY

  test "a relative SQLite path stays the one Bobbin.connect was given while a job works in another directory" do
    once_per_run
    Dir.mktmpdir("bobbin-relative") do |dir|
      app = File.join(dir, "app")
      elsewhere = File.join(dir, "elsewhere")
      FileUtils.mkdir_p([ File.join(app, "db"), elsewhere ])
      out, err, status = Open3.capture3(*ruby, "-I", File.join(ROOT, "lib"), "-e", SCRIPT, elsewhere, chdir: app)
      assert status.success?, "the script ran (stderr: #{err.lines.last(5).join})"
      counts = JSON.parse(out.lines.last)
      assert_equal 7, counts["succeeded"], "every job ran once and its outcome was written: #{counts}"
      assert_equal 7, counts.values.sum
      assert_empty Dir.children(elsewhere), "no database was made in the job's directory"
      refute_match(/no such table|unable to open/, err)
    end
  end
end
