# frozen_string_literal: true

require_relative "operator_helper"

# Counts, queue sizes and latency, throughput per minute, and process views.
class OperatorStatsTest < Bobbin::TestCase
  include OperatorHelper

  setup { Bobbin::Operator::Stats.forget_throughput } # an earlier test's rows, gone now, in the kept minutes

  test "counts by state split ready from scheduled" do
    insert_jobs(3, run_at: Time.now.utc - 1)
    insert_jobs(2, run_at: Time.now.utc + 600)
    insert_jobs(4, **failed_attributes)
    counts = Bobbin::Operator.counts
    assert_equal [ 3, 2, 4, 0 ], [ counts[:ready], counts[:scheduled], counts[:failed], counts[:succeeded] ]
    assert_empty counts.estimated
  end

  test "counts above the exact limit are counted on SQLite and estimated from statistics on PostgreSQL" do
    insert_jobs(Bobbin::Operator::Stats::EXACT_UP_TO + 500, state: "succeeded", finished_at: Time.now.utc)
    Bobbin::JobRecord.connection.execute("ANALYZE bobbin_jobs") if postgres?
    counts = Bobbin::Operator.counts
    if postgres?
      assert counts.estimated?(:succeeded)
      assert_in_delta Bobbin::Operator::Stats::EXACT_UP_TO + 500, counts[:succeeded], 2_000
    else
      assert_equal Bobbin::Operator::Stats::EXACT_UP_TO + 500, counts[:succeeded]
    end
  end

  # Rails 7.2+ apps may forbid ActiveRecord::Base.connection (`permanent_connection_checkout = :disallowed`, which the
  # README suggests as `:deprecated` to find what holds connections in fiber jobs): the estimate leased one that way, and
  # the dashboard's overview raised once a state held more than the exact limit, that is in production.
  test "counts above the exact limit are estimated where the app disallows ActiveRecord::Base.connection" do
    insert_jobs(Bobbin::Operator::Stats::EXACT_UP_TO + 500, state: "succeeded", finished_at: Time.now.utc)
    Bobbin::JobRecord.with_connection { |connection| connection.execute("ANALYZE bobbin_jobs") } if postgres?
    checkout, ActiveRecord.permanent_connection_checkout = ActiveRecord.permanent_connection_checkout, :disallowed
    begin
      counts = Bobbin::Operator.counts
    ensure
      ActiveRecord.permanent_connection_checkout = checkout
    end
    assert_in_delta Bobbin::Operator::Stats::EXACT_UP_TO + 500, counts[:succeeded], 2_000
  end

  # Only waiting jobs have a run_at ahead: the planner, taking state and run_at as independent, estimated ~2,000
  # scheduled jobs here, and the overview and /metrics showed ≈ 10,001 (the cap) for 15,000; at 3,000,000 jobs with
  # 50,000 scheduled, 10,001 too (a trial).
  test "the estimate of scheduled jobs among many finished ones is near their number, not the planner's guess for state and run_at apart" do
    skip_unless_postgres
    generate_jobs(15_000, "ready", "(now() AT TIME ZONE 'UTC') + interval '1 day'", "NULL")
    generate_finished(100_000, "succeeded", "1 day")
    generate_jobs(3, "ready", "(now() AT TIME ZONE 'UTC') - interval '1 minute'", "NULL")
    Bobbin::JobRecord.connection.execute("ANALYZE bobbin_jobs")
    counts = Bobbin::Operator.counts
    assert counts.estimated?(:scheduled)
    assert_in_delta 15_000, counts[:scheduled], 3_000
    assert_equal 3, counts[:ready]
  end

  # With both sides of the ready state over the exact limit, each was the planner's estimate of state and run_at taken
  # as independent: ≈ 55,772 ready and ≈ 10,001 scheduled for 10,186 and 49,814 among 1,160,000 jobs (a review), on
  # the overview and in /metrics.
  test "the estimates of ready and scheduled jobs, both over the exact limit, are near their numbers" do
    skip_unless_postgres
    generate_jobs(15_000, "ready", "(now() AT TIME ZONE 'UTC') + n * interval '1 second'", "NULL")
    generate_jobs(10_500, "ready", "(now() AT TIME ZONE 'UTC') - n * interval '1 second'", "NULL")
    generate_finished(100_000, "succeeded", "1 day")
    Bobbin::JobRecord.connection.execute("ANALYZE bobbin_jobs")
    counts = Bobbin::Operator.counts
    assert counts.estimated?(:scheduled) && counts.estimated?(:ready)
    assert_in_delta 15_000, counts[:scheduled], 3_000
    assert_in_delta 10_500, counts[:ready], 3_000
  end

  # Statistics older than the jobs: 25,000 failures in a burst, or 30,000 jobs discarded at once, left the planner's
  # estimate of their state near 0, and the overview and /metrics said ≈ 10,001 for minutes (a trial).
  test "PostgreSQL: a state the statistics do not know yet is counted, not held at the exact limit" do
    skip_unless_postgres
    generate_jobs(12_000, "ready", "(now() AT TIME ZONE 'UTC') - interval '1 minute'", "NULL")
    generate_finished(12_000, "succeeded", "1 day")
    Bobbin::JobRecord.connection.execute("ANALYZE bobbin_jobs")
    Bobbin::JobRecord.where(state: "ready").update_all(state: "failed", finished_at: Time.now.utc) # no ANALYZE since
    counts = Bobbin::Operator.counts
    assert_equal 12_000, counts[:failed]
    assert_not counts.estimated?(:failed), "counted"
    assert counts.estimated?(:succeeded), "the statistics know those"
  end

  # Deleting 217,000 of 230,000 finished jobs left the overview at ≈ 229,173 until autovacuum's ANALYZE (a trial); the
  # same after a bulk discard or retry of more jobs than the counts take exactly.
  test "PostgreSQL: after an operator deletes, discards or retries many jobs, the estimates follow" do
    skip_unless_postgres
    generate_finished(30_000, "succeeded", "2 days")
    generate_finished(15_000, "succeeded", "1 hour")
    generate_finished(24_000, "failed", "1 hour")
    Bobbin::JobRecord.connection.execute("ANALYZE bobbin_jobs")
    assert_in_delta 45_000, Bobbin::Operator.counts[:succeeded], 4_500, "the statistics before"
    assert_equal 30_000, Bobbin::Operator.delete_finished(before: Time.now.utc - 86_400)
    assert_equal 12_000, Bobbin::Operator.discard_all(Bobbin::JobRecord.where(state: "failed").where("id % 2 = 0"), by: nil)
    counts = Bobbin::Operator.counts
    assert_in_delta 15_000, counts[:succeeded], 1_500
    assert_in_delta 12_000, counts[:discarded], 1_200
    assert_in_delta 12_000, counts[:failed], 1_200
  end

  test "queues: sizes by state, latency of the oldest due job, paused ones listed even when empty" do
    insert_jobs(2, queue: "mail", run_at: Time.now.utc - 120)
    insert_jobs(1, queue: "mail", run_at: Time.now.utc + 600)
    insert_jobs(1, queue: "mail", **failed_attributes)
    insert_jobs(5, queue: "llm")
    Bobbin::Operator.pause("idle")
    queues = Bobbin::Operator.queues.to_h { |queue| [ queue.name, queue ] }
    assert_equal %w[llm mail idle], Bobbin::Operator.queues.map(&:name), "most due first"
    mail = queues["mail"]
    assert_equal [ 2, 1, 1, 3 ], [ mail.ready, mail.scheduled, mail.failed, mail.size ]
    assert_operator mail.latency, :>=, 119
    assert queues["idle"].paused
    assert_operator Bobbin::Operator.latency([ "mail" ]), :>=, 119
  end

  # Two ways to a capped list: a grouped count capped after (few jobs), and capped reads per queue (a backlog).
  [ Bobbin::Operator::Stats::GROUPED_UP_TO, 0 ].each do |grouped_up_to|
    test "queues with a cap (grouped up to #{grouped_up_to} jobs): each count stops at the cap and says so, the rest as exact, the order and latency kept" do
      insert_jobs(4, queue: "mail", run_at: Time.now.utc - 120)
      insert_jobs(1, queue: "mail", run_at: Time.now.utc + 600)
      insert_jobs(3, queue: "mail", **failed_attributes)
      insert_jobs(3, queue: "llm", state: "running")
      insert_jobs(2, queue: "llm", state: "blocked", concurrency_key: "k")
      insert_jobs(1, queue: "llm", state: "blocked", concurrency_key: "k", run_at: Time.now.utc + 600)
      insert_jobs(9, queue: "webhooks")
      Bobbin::Operator.pause("idle")
      exact = Bobbin::Operator.queues
      under_cap = Bobbin::Operator::Stats.queues(grouped_up_to: grouped_up_to, cap: 9)
      # Latency is read from the clock at each call, a tenth of a second apart on a loaded machine.
      assert_equal exact.map { |queue| queue.with(latency: nil) }, under_cap.map { |queue| queue.with(latency: nil) }, "nothing reached the cap"
      assert_in_delta exact.find { |queue| queue.name == "mail" }.latency, under_cap.find { |queue| queue.name == "mail" }.latency, 5
      assert_equal %w[webhooks mail idle llm], exact.map(&:name), "most due first"
      capped = Bobbin::Operator::Stats.queues(grouped_up_to: grouped_up_to, cap: 3).to_h { |queue| [ queue.name, queue ] }
      mail = capped["mail"]
      assert_equal [ 3, 1, 3, [ :ready ] ], [ mail.ready, mail.scheduled, mail.failed, mail.capped ], "3 of 4 due shown as 3+; failed exactly 3"
      assert_operator mail.latency, :>=, 119
      assert_equal [ 0, 2, 1, 3, [] ], [ capped["llm"].ready, capped["llm"].blocked, capped["llm"].scheduled, capped["llm"].running, capped["llm"].capped ],
                   "a limited job set to run later is scheduled, not blocked"
      assert capped["webhooks"].capped?(:ready)
      assert capped["idle"].paused
      assert_equal %w[mail webhooks idle llm], Bobbin::Operator::Stats.queues(grouped_up_to: grouped_up_to, cap: 3).map(&:name), "capped ties by name"
      [ 0, -1, "10", 2.5 ].each { |bad| assert_raises(ArgumentError) { Bobbin::Operator::Stats.queues(grouped_up_to: grouped_up_to, cap: bad) } }
    end
  end

  # The capped reads cost statements per queue: 5,000 queues of 4 jobs took 50,000 statements and ~10 s for each
  # refresh of the dashboard's overview (a trial). Few jobs in many queues are counted in one grouped query.
  test "a capped list of many queues with few jobs costs a few statements, not some per queue" do
    Bobbin.enqueue_all(Array.new(300) { |i| [ SleepJob, [ 0 ], { queue: "q#{i}" } ] })
    statements = 0
    counting = ActiveSupport::Notifications.subscribe("sql.active_record") { |*, payload| statements += 1 unless payload[:name] == "SCHEMA" }
    queues = Bobbin::Operator.queues(cap: Bobbin::Operator::Stats::EXACT_UP_TO)
    ActiveSupport::Notifications.unsubscribe(counting)
    assert_equal 300, queues.size
    assert_operator statements, :<=, 4
  end

  # Over GROUPED_UP_TO jobs the capped list read each queue's counts with statements of their own: at 2,000 queues
  # and 155,000 jobs waiting or failed, 12,600 statements and 2.5-5 s for each refresh of the overview (a trial).
  test "a capped list over a backlog reads every queue's counts in one statement, however many queues" do
    Bobbin.enqueue_all(Array.new(300) { |i| [ SleepJob, [ 0 ], { queue: "q#{i}" } ] })
    insert_jobs(2, queue: "q7", **failed_attributes)
    insert_jobs(3, queue: "q8", state: "running")
    insert_jobs(1, queue: "q9", run_at: Time.now.utc + 600)
    Bobbin::Operator.pause("idle")
    statements = 0
    counting = ActiveSupport::Notifications.subscribe("sql.active_record") { |*, payload| statements += 1 unless payload[:name] == "SCHEMA" }
    queues = Bobbin::Operator::Stats.queues(grouped_up_to: 0, cap: 2).to_h { |queue| [ queue.name, queue ] }
    ActiveSupport::Notifications.unsubscribe(counting)
    assert_equal 301, queues.size
    assert_operator statements, :<=, 4
    assert_equal [ 1, 2, 2, [ :running ] ], [ queues["q8"].ready, queues["q8"].running, queues["q7"].failed, queues["q8"].capped ]
    assert_equal [ 1, 1 ], [ queues["q9"].ready, queues["q9"].scheduled ]
    assert queues["idle"].paused
  end

  test "throughput per minute counts succeeded and failed jobs by the minute they finished" do
    now = Time.now.utc
    insert_jobs(3, state: "succeeded", finished_at: now)
    insert_jobs(2, **failed_attributes(now - 120))
    insert_jobs(7, state: "succeeded", finished_at: now - 7200)
    minutes = Bobbin::Operator.throughput(minutes: 5)
    assert_equal 5, minutes.size
    assert_equal [ 3, 0 ], minutes.last.drop(1)
    assert_equal [ 0, 2 ], minutes[-3].drop(1)
    assert_equal 5, minutes.sum { |_, succeeded, failed| succeeded + failed }
  end

  test "throughput keeps complete minutes' counts and reads only the minutes it does not know, with the same answer" do
    now = Time.at((Time.now.utc.to_i / 60 - 10) * 60 + 20).utc # 20 s into a minute, ten minutes ago
    at = ->(minutes_before, second = 5) { Time.at((now.to_i / 60 - minutes_before) * 60 + second).utc }
    insert_jobs(3, state: "succeeded", finished_at: at.(0)) # the minute going on
    insert_jobs(2, **failed_attributes(at.(1, 50))) # ended 10 s ago: not kept yet (a late write may come)
    insert_jobs(4, state: "succeeded", finished_at: at.(3))
    insert_jobs(1, **failed_attributes(at.(4, 59)))
    insert_jobs(6, state: "succeeded", finished_at: at.(6)) # before the window
    # Per minute as counted from the rows, each on its own.
    counted = lambda do |time|
      Array.new(5) do |i|
        minute = Time.at((time.to_i / 60 - 4 + i) * 60).utc
        [ minute, *%w[succeeded failed].map { |state| Bobbin::JobRecord.where(state: state, finished_at: minute...minute + 60).count } ]
      end
    end
    read_from = lambda do |time|
      froms = []
      subscriber = ActiveSupport::Notifications.subscribe("sql.active_record") do |*, payload|
        froms << payload[:binds].find { |bind| bind.name == "finished_at" }.value if payload[:sql].include?("GROUP BY")
      end
      [ Bobbin::Operator::Stats.throughput(minutes: 5, now: time), froms ]
    ensure
      ActiveSupport::Notifications.unsubscribe(subscriber)
    end

    minutes, froms = read_from.(now)
    assert_equal counted.(now), minutes
    assert_equal [ 3, 0 ], minutes.last.drop(1)
    assert_equal [ at.(4, 0) ], froms, "nothing kept yet: the whole window"

    insert_jobs(5, state: "succeeded", finished_at: at.(0, 50)) # more finish before the current minute ends
    minutes, froms = read_from.(now + 60)
    assert_equal counted.(now + 60), minutes
    assert_equal [ 8, 0 ], minutes[-2].drop(1), "the minute that ended since counts its jobs"
    assert_equal [ at.(1, 0) ], froms, "from the first minute not kept (it ended 10 s before the first call)"

    minutes, froms = read_from.(now + 120)
    assert_equal counted.(now + 120), minutes
    assert_equal [ at.(0, 0) ], froms

    assert_equal 2, Bobbin::Operator.retry_all({ state: "failed", finished_after: at.(1, 0) }, by: "test")
    minutes, = read_from.(now + 120)
    assert_equal counted.(now + 120), minutes, "a failed job retried leaves its kept minute"
    assert_equal 0, minutes.sum { |_, _, failed| failed }
  end

  test "a worker's heartbeat counts the connections of its jobs' Active Record pool, not those of a queue database's own" do
    Dir.mktmpdir do |dir|
      Bobbin::Record.establish_connection(adapter: "sqlite3", database: File.join(dir, "queue.sqlite3"), pool: 2) # the queue database
      base = ActiveRecord::Base.connection_pool
      held = base.checkout # a job holding a connection
      resources = Bobbin::Operator::ProcessView.resources
      assert_equal [ base.size, base.stat[:busy] ], resources.values_at(:db_pool, :db_in_use)
      assert_operator resources[:db_in_use], :>=, 1
    ensure
      base&.checkin(held) if held
      Bobbin::Record.remove_connection
    end
  end

  test "a process row whose metadata is not a JSON object still lists, without its details" do
    ids = [ "null", "[1]", "not json", '{"mode":"fibers"}' ].map do |metadata|
      Bobbin::ProcessRecord.register(kind: "worker", name: "odd").id.tap { |id| Bobbin::ProcessRecord.where(id: id).update_all(metadata: metadata) }
    end
    views = Bobbin::Operator::ProcessView.all.select { |view| ids.include?(view.id) }
    assert_equal [ nil, nil, nil, "fibers" ], views.sort_by(&:id).map(&:mode)
  end

  test "processes show a live worker's pool, busy jobs, memory and connections from its heartbeat" do
    log = ENV["BOBBIN_TEST_LOG"] || File::NULL
    pids = []
    config = start_config({ "fibers" => 7, "queues" => "slow" }) # heartbeats each 0.5 s
    ensure_killed(pids) do
      pids << spawn_bobbin("work", "-c", config.path, log: log)
      SleepJob.enqueue(5, "s").then { nil }
      Bobbin::JobRecord.update_all(queue: "slow")
      view = wait_for("the worker to run the job and beat") do
        Bobbin::Operator.processes.find { |process| process.running == 1 && process.busy == 1 }
      end
      assert_equal [ "worker", "fibers", 7 ], [ view.kind, view.mode, view.capacity ], "an idle thread lane adds no capacity"
      assert_operator view.rss_kb, :>, 10_000
      assert_operator view.db_pool, :>=, 1
      assert_operator view.heartbeat_age, :<, Bobbin.config.process_alive_threshold
      refute view.stale?
    end
  ensure
    File.delete(config.path)
  end

  # Inserts `count` jobs in one statement (PostgreSQL): `run_at` and `finished_at` are SQL, `n` the row's number.
  # `count` jobs in finished state `state`, run and finished `ago` (an SQL interval: "1 day") ago.
  def generate_finished(count, state, ago) = generate_jobs(count, state, *[ "(now() AT TIME ZONE 'UTC') - interval '#{ago}'" ] * 2)

  def generate_jobs(count, state, run_at, finished_at)
    Bobbin::JobRecord.connection.execute(<<~SQL)
      INSERT INTO bobbin_jobs (queue, class_name, arguments, state, run_at, enqueued_at, finished_at)
      SELECT 'default', 'SleepJob', '[0]', '#{state}', #{run_at}, now() AT TIME ZONE 'UTC', #{finished_at} FROM generate_series(1, #{count}) AS s(n)
    SQL
  end
end
