# frozen_string_literal: true

require "test_helper"

# Web servers and scripts that fork (Puma's workers, a `fork` in a rake task or a job) beside threads that enqueue.
class ForkTest < Bobbin::TestCase
  # Holds SQLite's write lock on the suite's file until it reads a line.
  HOLDER = <<~RUBY
    require "sqlite3"
    database = SQLite3::Database.new(ARGV.fetch(0))
    database.execute("BEGIN IMMEDIATE")
    $stdout.puts("locked")
    $stdout.flush
    $stdin.gets
    database.execute("COMMIT")
  RUBY

  test "SQLite: a child forked while another thread's enqueue waits for the write lock enqueues, and does not hang" do
    skip("SQLite only: the sqlite3 gem's after-fork close") if postgres?
    holder = IO.popen([ RbConfig.ruby, "-e", HOLDER, TestDatabase.sqlite_path ], "r+")
    assert_equal "locked\n", holder.gets
    waiting = Thread.new { SleepJob.enqueue(0, "parent") }
    wait_for("the enqueue to wait for the lock") { waiting.status == "sleep" }
    releaser = Thread.new { sleep(0.5) && holder.puts("go") } # after the fork has begun
    child = fork do
      SleepJob.enqueue(0, "child")
      exit!(0)
    rescue Exception # rubocop:disable Lint/RescueException
      exit!(1)
    end
    status = wait_exit(child, timeout: 60)
    assert status, "the child hung"
    assert_predicate status, :success?
    assert waiting.value
    assert_equal %w[child parent], Bobbin::JobRecord.pluck(:arguments).map { |arguments| JSON.parse(arguments).last }.sort
  ensure
    ensure_killed(child) { nil } if child && !status
    releaser&.join
    holder&.close
  end
end
