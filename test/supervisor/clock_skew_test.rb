# frozen_string_literal: true

require "test_helper"
require "open3"

# Hosts whose clocks disagree share one PostgreSQL: what one host writes for others to act on is on the database's
# clock. A process here runs 30 s ahead under libfaketime (Debian's faketime package, which bin/setup installs).
class ClockSkewTest < Bobbin::TestCase
  FAKETIME = Dir["/usr/lib/*/faketime/libfaketime.so.1"].first.to_s

  setup do
    skip "on SQLite the database's clock is the process's" unless postgres?
    skip "libfaketime is missing: run bin/setup" unless File.exist?(FAKETIME)
  end

  # Runs `code` in a Ruby process whose clock is 30 s ahead (or `by`), connected to the test database; returns its output.
  def ahead(code, by: "+30s")
    env = { "LD_PRELOAD" => FAKETIME, "FAKETIME" => by, "FAKETIME_DONT_FAKE_MONOTONIC" => "1", "DATABASE_URL" => TestDatabase.url_with_pool }
    output, status = Open3.capture2e(env, *ruby, "-I", File.join(ROOT, "lib"), "-e",
                                     "require 'bobbin'; Bobbin.connect(ENV['DATABASE_URL']); Bobbin.config.logger.level = Logger::WARN; #{code}")
    assert status.success?, output
    output
  end

  def database_now = Bobbin::ProcessRecord.now

  # A host 30 s ahead enqueued every tick 30 s early, and twice as many for 30 s as it started (a trial).
  test "a scheduler on a clock 30 s ahead enqueues the ticks of the database's time" do
    before = database_now
    output = ahead(<<~RUBY)
      task = Bobbin::Recurring::Task.parse("skewed", { schedule: "every second", command: "nil" }, "t")
      scheduler = Bobbin::Recurring::Scheduler.new([ task ])
      scheduler.pass
      sleep(1.5)
      puts "next in \#{(scheduler.pass - Time.now).round(2)}"
    RUBY
    ticks = Bobbin::RecurringRun.where(task_key: "skewed").pluck(:run_at)
    assert_operator ticks.size, :>=, 1, output
    assert ticks.all? { |tick| tick.between?(before, database_now) }, "ticks #{ticks} not between #{before} and #{database_now}: #{output}"
    assert_operator output[/next in (-?[\d.]+)/, 1].to_f, :<=, 1.0, "the wait for the next tick is on the process's own clock: #{output}"
  end

  # The database judges when a job is due, by its own clock. A worker 5 s ahead woke for a scheduled job by its own,
  # found nothing due, then looked only for jobs due after its own time: the job waited for the next poll (a review).
  test "a worker on a clock 5 s ahead starts a job scheduled 3 s ahead on the database's clock, without waiting for its poll" do
    id = Bobbin::JobRecord.create!(queue: "skewed", class_name: "SkewedJob", arguments: "[]", priority: 0, run_at: database_now + 3, max_attempts: 1,
                                   state: "ready", attempts: 0, enqueued_at: database_now).id
    output = ahead(<<~RUBY, by: "+5s")
      class SkewedJob
        include Bobbin::Job
        def perform = nil
      end
      worker = Bobbin::Worker.new(queues: [ "skewed" ], fibers: 2, polling_interval: 60, notified_polling_interval: 60)
      Thread.new do
        deadline = Bobbin.monotonic + 20 # a third of the poll
        sleep(0.1) until Bobbin::JobRecord.where(id: #{id}, state: "succeeded").exists? || Bobbin.monotonic > deadline
        worker.stop
      end
      worker.run
    RUBY
    state, run_at, started_at = Bobbin::JobRecord.where(id: id).pick(:state, :run_at, :started_at)
    assert_equal "succeeded", state, "ran before the worker's poll: #{output}"
    assert_operator started_at, :>=, run_at
  end

  # A host 30 s ahead that recovered a dead host's jobs made them wait 30 s more (a trial).
  test "jobs a host 30 s ahead recovers are due at once" do
    process = Bobbin::ProcessRecord.register(kind: "worker", name: "gone", metadata: {})
    id = Bobbin::JobRecord.create!(queue: "default", class_name: "LedgerJob", arguments: "[]", priority: 0, run_at: database_now, max_attempts: 1,
                                   state: "running", attempts: 1, enqueued_at: database_now, claimed_by: process.id, claimed_at: database_now).id
    ahead("Bobbin::Recovery.recover(#{process.id}, 'test: gone')")
    state, run_at = Bobbin::JobRecord.where(id: id).pick(:state, :run_at)
    assert_equal "ready", state
    assert_operator run_at, :<=, database_now, "due now on the database's clock, not 30 s ahead"
  end

  # Its promotion pass chose the keys with due blocked jobs by its own clock: a retried limited job waited 30 s more.
  test "a host 30 s behind lets a due blocked job through to its free slot" do
    id = Bobbin::JobRecord.create!(queue: "default", class_name: "LedgerJob", arguments: "[]", priority: 0, run_at: database_now - 5, max_attempts: 1,
                                   state: "blocked", attempts: 0, enqueued_at: database_now, concurrency_key: "skew/k", concurrency_limit: 1,
                                   concurrency_duration: 60).id
    output = ahead("puts Bobbin::Store.promote_due", by: "-30s")
    assert_equal "1", output.lines.last.strip, output
    assert_equal "ready", Bobbin::JobRecord.where(id: id).pick(:state)
  end
end
