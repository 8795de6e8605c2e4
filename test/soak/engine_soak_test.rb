# frozen_string_literal: true

require "test_helper"

# `bin/rake soak` (SOAK_ROUNDS=40 rounds of SOAK_JOBS=20000 jobs on PostgreSQL; CI runs 4 × 2,000): one fiber worker
# in this process drains round after round, as a busy queue runs all day. In every round each job succeeds exactly
# once (1 in 50 fails its first attempt and is retried at once; 1 in 3 queries the database), and retention then
# deletes the finished rows, as it does in production, so the table churns. Across rounds the worker's live Ruby
# objects stay flat (no leak). Each round's time, RSS and the table's dead rows are printed for a person to read;
# nothing asserts a time.
class EngineSoakTest < Bobbin::TestCase
  ROUNDS = Integer(ENV.fetch("SOAK_ROUNDS", 40))
  JOBS = Integer(ENV.fetch("SOAK_JOBS", 20_000))
  # Live objects may grow by this much from the second round to the last (caches filling, the heap settling); a
  # leak of a few objects a job outgrows it within a few rounds of the long form.
  GROWTH = 0.10

  # What the jobs of the current round did: successful runs and failed first attempts per index.
  module Tally
    @lock = Mutex.new

    module_function

    def reset(round, jobs)
      @lock.synchronize do
        @round = round
        @runs = Array.new(jobs, 0)
        @failed = Array.new(jobs, 0)
      end
    end

    # True the first time job `index` asks (it then fails that attempt).
    def fail_first?(round, index) = @lock.synchronize { round == @round && (@failed[index] += 1) == 1 }

    def done(round, index) = @lock.synchronize { @runs[index] += 1 if round == @round }

    def runs = @lock.synchronize { @runs.dup }

    def failed = @lock.synchronize { @failed.dup }
  end

  class SoakJob
    include Bobbin::Job
    bobbin_options retries: 1, backoff: 0

    def perform(round, index)
      raise "first attempt of job #{index} fails" if (index % 50).zero? && Tally.fail_first?(round, index)

      ActiveRecord::Base.connection_pool.with_connection { |connection| connection.select_value("SELECT 1") } if (index % 3).zero?
      Tally.done(round, index)
    end
  end

  def test_rounds_of_jobs_run_exactly_once_and_leave_no_garbage_behind
    level = Bobbin.config.logger.level
    Bobbin.config.logger.level = Logger::WARN # a retried attempt logs at info
    worker = Bobbin::Worker.new(queues: [ "*" ], fibers: 100, polling_interval: 0.05)
    live = []
    puts "\nsoak: #{ROUNDS} rounds of #{JOBS} jobs, one worker of 100 fibers, #{postgres? ? 'PostgreSQL' : 'SQLite'}"
    (1..ROUNDS).each do |round|
      Tally.reset(round, JOBS)
      started = monotonic
      (0...JOBS).each_slice(5_000) { |slice| Bobbin.enqueue_all(slice.map { |index| [ SoakJob, [ round, index ] ] }) }
      worker.run_until_empty
      seconds = monotonic - started
      check_round(round)
      Bobbin::Retention.sweep(retention: 0, budget: 600)
      GC.start
      live << ObjectSpace.count_objects.then { |counts| counts[:TOTAL] - counts[:FREE] }
      puts format("round %d/%d: %.1f s (%d jobs/s), RSS %d MB, live objects %d%s", round, ROUNDS, seconds, JOBS / seconds,
                  File.read("/proc/self/status")[/VmRSS:\s+(\d+)/, 1].to_i / 1024, live.last, dead_rows)
    end
    return if ROUNDS < 3

    assert_operator live.last, :<=, live[1] * (1 + GROWTH),
                    "live objects grew from #{live[1]} after round 2 to #{live.last} after round #{ROUNDS}: #{live.inspect}"
  ensure
    Bobbin.config.logger.level = level
  end

  private
    # Every job of `round` succeeded exactly once, and each one that failed its first attempt was retried once.
    def check_round(round)
      runs = Tally.runs
      wrong = runs.each_index.reject { |index| runs[index] == 1 }
      assert_empty wrong.first(10), "round #{round}: #{wrong.size} jobs did not run exactly once (runs: #{wrong.first(10).map { |i| runs[i] }})"
      failed = Tally.failed
      assert_equal (0...JOBS).step(50).to_a, failed.each_index.select { |index| failed[index] == 2 },
                   "round #{round}: every 50th job fails once, then runs again"
      assert_equal({ "succeeded" => JOBS }, Bobbin::JobRecord.group(:state).count, "round #{round}: every row succeeded")
    end

    def dead_rows
      return "" unless postgres?

      dead = ActiveRecord::Base.connection_pool.with_connection do |connection|
        connection.select_value("SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'bobbin_jobs'")
      end
      ", dead rows #{dead}"
    end

    def monotonic = Process.clock_gettime(Process::CLOCK_MONOTONIC)
end
