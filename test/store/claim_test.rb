# frozen_string_literal: true

require "test_helper"

class ClaimTest < Bobbin::TestCase
  setup do
    @process_id = Bobbin::ProcessRecord.register(kind: "test", name: "claim-test").id
  end

  teardown { @store&.close }

  def store(queues = [ "*" ]) = @store = Bobbin::Store.open(Bobbin::Store::QueueSelection.new(queues))

  test "claims by priority, then run_at, then id, and marks the jobs running for the process" do
    low = SleepJob.enqueue(0)
    high = Bobbin::Client::Enqueuer.enqueue(SleepJob, [ 1 ], priority: -5)
    older = Bobbin::Client::Enqueuer.enqueue(SleepJob, [ 2 ], run_at: Time.now - 60)
    tied = Bobbin.enqueue_all([ [ SleepJob, [ 3 ] ], [ SleepJob, [ 4 ] ] ])
    assert_equal 1, Bobbin::JobRecord.where(id: tied).distinct.count(:run_at), "one run_at: only the id tells them apart"
    claimed = Array.new(5) { store.claim(@process_id, 1).map(&:id) }.flatten
    assert_equal [ high, older, low, *tied ], claimed
    assert_equal [ "running" ], Bobbin::JobRecord.where(id: claimed).distinct.pluck(:state)
    assert_equal [ @process_id ], Bobbin::JobRecord.where(id: claimed).distinct.pluck(:claimed_by)
    assert_empty store.claim(@process_id, 10)
  end

  # The worker starts a claim's jobs in the order it returns them; RETURNING alone gave the table's (id) order.
  test "one claim of many jobs returns them by priority, then run_at, then id" do
    ids = [ 5, 1, 0, 5, -3 ].map { |priority| Bobbin::Client::Enqueuer.enqueue(SleepJob, [ priority ], priority: priority) }
    older = Bobbin::Client::Enqueuer.enqueue(SleepJob, [ 0 ], priority: 0, run_at: Time.now - 60)
    assert_equal [ ids[4], older, ids[2], ids[1], ids[0], ids[3] ], store.claim(@process_id, 10).map(&:id)
  end

  # A worker woken a little before a due time claims the jobs due by then (Worker::Pacer::LEAD), so that the claim's
  # round trip is not part of their lateness: each comes back with when it may start (its run_at by the database's
  # clock, counted from the answer), and its row says it started at its run_at. Never more than AHEAD_AT_MOST ahead.
  test "a claim through a due time also takes the jobs due by then, ahead of their run_at, and says when each may start" do
    due_now = SleepJob.enqueue(0)
    far = Bobbin::Client::Enqueuer.enqueue(SleepJob, [ 1 ], run_at: Time.now + 60)
    far_run_at = Bobbin::JobRecord.find(far).run_at.to_f
    assert_equal [ [ due_now, nil ] ], store.claim(@process_id, 10, through: far_run_at).map { |job| [ job.id, job.due ] },
                 "what is due now, and not a job #{Bobbin::Store::AHEAD_AT_MOST}s or more ahead, whatever the claim's due time"

    soon = Bobbin::Client::Enqueuer.enqueue(SleepJob, [ 2 ], run_at: Time.now + Bobbin::Store::AHEAD_AT_MOST * 0.9)
    run_at = Bobbin::JobRecord.find(soon).run_at
    before = Bobbin.monotonic
    expected = before + (run_at.to_f - Process.clock_gettime(Process::CLOCK_REALTIME)) # its run_at as a monotonic time
    claimed = store.claim(@process_id, 10, through: run_at.to_f)
    took = Bobbin.monotonic - before
    assert_equal [ soon ], claimed.map(&:id), "the job due by then, not the one due after it"
    claimed_at, started_at = Bobbin::JobRecord.where(id: soon).pick(:claimed_at, :started_at)
    if claimed_at < run_at # as it is unless this machine took the job's 90 ms to get here
      assert_in_delta expected, claimed.first.due, took + 0.002, "may start at its run_at, counted from the claim's answer"
      assert_equal run_at, started_at, "started at its run_at"
    else
      assert_nil claimed.first.due, "due when claimed: starts at once"
    end
  end

  test "a claim never returns more than asked, and a job is claimed once" do
    Bobbin.enqueue_all(Array.new(25) { |i| [ SleepJob, [ i ] ] })
    batches = Array.new(4) { store.claim(@process_id, 10) }
    assert_equal [ 10, 10, 5, 0 ], batches.map(&:size)
    assert_equal 25, batches.flatten.map(&:id).uniq.size
    assert_equal [ 1 ], batches.flatten.map(&:attempts).uniq
  end

  test "exact names and prefix wildcards select queues; _ in a prefix matches literally" do
    ids = %w[llm_chat llm_x llmzchat default].to_h { |queue| [ queue, Bobbin::Client::Enqueuer.enqueue(SleepJob, [ 0 ], queue: queue) ] }
    claimed = store([ "llm_*" ]).claim(@process_id, 10).map(&:queue).sort
    assert_equal %w[llm_chat llm_x], claimed
    @store.close
    assert_equal [ ids["default"] ], store([ "default", "other" ]).claim(@process_id, 10).map(&:id)
  end

  test "an ordered list takes its first entry's jobs before the next's whatever their priority; a wildcard's queues rank together" do
    enqueue = ->(queue, priority) { Bobbin::Client::Enqueuer.enqueue(SleepJob, [ 0 ], queue: queue, priority: priority) }
    default = enqueue.("default", -10)
    critical = [ enqueue.("critical", 5), enqueue.("critical", 0) ]
    llm_a, llm_b = enqueue.("llm_a", 3), enqueue.("llm_b", 1)
    enqueue.("other", -20)
    ordered = store([ "critical", "llm_*", "default" ])
    assert_equal [ critical[1], critical[0], llm_b ], ordered.claim(@process_id, 3).map(&:id), "a batch fills from the next entry"
    assert_equal [ llm_a, default ], ordered.claim(@process_id, 10).map(&:id), "and starts in the list's order"
    assert_empty ordered.claim(@process_id, 10), "a queue the list does not name is not taken"
  end

  test "an ordered list ending in * takes its entries first, then every other queue by priority; a paused entry is passed over" do
    enqueue = ->(queue, priority) { Bobbin::Client::Enqueuer.enqueue(SleepJob, [ 0 ], queue: queue, priority: priority) }
    rest = [ enqueue.("b", 2), enqueue.("a", 1) ]
    urgent = enqueue.("urgent", 9)
    paused = enqueue.("first", 0)
    Bobbin.pause("first")
    assert_equal [ urgent, rest[1], rest[0] ], store([ "first", "urgent", "*" ]).claim(@process_id, 10).map(&:id)
    Bobbin.resume("first")
    assert_equal [ paused ], @store.claim(@process_id, 10).map(&:id)
    @store.close
    assert_equal "first,urgent,*", Bobbin::Store::QueueSelection.new([ "first", "urgent", "*", "later" ]).to_s
    assert_equal "*", Bobbin::Store::QueueSelection.new([ "*", "later" ]).to_s, "what follows * is in it"
  end

  test "an entry takes a queue by name, by prefix or as *; its rank is the first entry that takes it" do
    selection = Bobbin::Store::QueueSelection.new([ "mail", "llm_*", "*" ])
    assert_equal [ true, true, true ], [ "mail", "llm_chat", "other" ].map { |queue| selection.match?(queue) }
    assert_equal [ 0, 1, 2, 1 ], [ "mail", "llm_chat", "other", "llm_" ].map { |queue| selection.rank(queue) }
    narrow = Bobbin::Store::QueueSelection.new([ "llm_*", "mail" ])
    assert_equal [ true, true, false, false ], [ "llm_chat", "mail", "mailer", "llm" ].map { |queue| narrow.match?(queue) }
    assert_equal 0, Bobbin::Store::QueueSelection.new([ "llm_*" ]).rank("llm_chat"), "one entry orders nothing"
  end

  test "a wildcard takes the queues that start with its prefix, in the prefix's case, its characters taken literally" do
    ids = [ "mailers", "MAILERS", "Mailbox", "other", "a*bc", "aXbc", "q?[x" ].map { |queue| [ queue, Bobbin::Client::Enqueuer.enqueue(SleepJob, [ 0 ], queue: queue) ] }.to_h
    assert_equal [ ids["mailers"] ], store([ "mail*" ]).claim(@process_id, 10).map(&:id)
    @store.close
    assert_equal [ ids["a*bc"], ids["q?[x"] ], store([ "a*b*", "q?[*" ]).claim(@process_id, 10).map(&:id).sort
    assert_equal [ true, false, false ], [ "mailers", "MAILERS", "Mailbox" ].map { |queue| Bobbin::Store::QueueSelection.new([ "mail*" ]).match?(queue) }
  end

  test "a queue name with a quote and a backslash is selected as written" do
    odd = "it's a \\ queue"
    id = Bobbin::Client::Enqueuer.enqueue(SleepJob, [ 0 ], queue: odd)
    Bobbin::Client::Enqueuer.enqueue(SleepJob, [ 0 ], queue: "it's a  queue")
    assert_equal [ id ], store([ odd ]).claim(@process_id, 10).map(&:id)
    assert_empty @store.claim(@process_id, 10)
    @store.close
    ranked = Bobbin::Client::Enqueuer.enqueue(SleepJob, [ 0 ], queue: "it's_%")
    assert_equal [ ranked ], store([ "it's_*", odd ]).claim(@process_id, 10).map(&:id), "in an ordered list too"
  end

  # From its sixth run PostgreSQL may run a prepared statement on a generic plan, planned without the parameters'
  # values. With the worker's queues a parameter, that plan walked every ready job in priority order and dropped the
  # other queues' (a trial's table: 83 ms a claim where a fresh one took 2).
  test "PostgreSQL: the claim's generic plan reads only the worker's queues, however many jobs wait in others" do
    skip_unless_postgres
    Bobbin.enqueue_all(Array.new(3_000) { |i| [ SleepJob, [ i ], { queue: "backlog" } ] })
    Bobbin.enqueue_all(Array.new(3) { |i| [ SleepJob, [ i ], { queue: "quick" } ] })
    connection = Bobbin::Record.connection
    connection.execute("ANALYZE bobbin_jobs")
    sql = Bobbin::Store::PostgreSQL.new(connection, Bobbin::Store::QueueSelection.new([ "quick" ])).send(:claim_sql)
    nodes = TestDatabase.generic_plan_nodes(sql, [ @process_id, 10, true, "NULL" ])
    removed = nodes.sum { |node| node["Rows Removed by Filter"].to_i }
    assert_operator removed, :<, 300, "the generic plan read the other queue's 3,000 jobs: #{nodes.map { |node| node.except("Plans") }}"
  end

  # A wildcard is a LIKE, which a btree index of the database's collation bounds only under "C" (not en_US.UTF-8, nor
  # PostgreSQL 15's C.UTF-8): the claim walked every due job in priority order and dropped the other queues' (a review:
  # 40 ms a claim beside 300,000 of them, where a named queue's took 0.4). As the worker's session plans it (no sorts).
  test "PostgreSQL: a wildcard's claim reads only its own queues' jobs, however many wait in others, under any collation", long: true do
    skip_unless_postgres
    Bobbin.enqueue_all(Array.new(3_000) { |i| [ SleepJob, [ i ], { queue: "backlog", priority: -1 } ] })
    quick = Bobbin.enqueue_all(Array.new(4) { |i| [ SleepJob, [ i ], { queue: "quick_#{i % 2}", priority: i } ] })
    connection = Bobbin::Record.connection
    connection.execute("ANALYZE bobbin_jobs")
    connection.execute("SET enable_sort = off")
    { [ "quick_*" ] => quick.first(3), [ "urgent", "quick_*", "backlog" ] => quick.first(3) }.each do |queues, claimed|
      sql = Bobbin::Store::PostgreSQL.new(connection, Bobbin::Store::QueueSelection.new(queues)).send(:claim_sql)
      nodes = TestDatabase.generic_plan_nodes(sql, [ @process_id, 3, true, "NULL" ])
      read = nodes.sum { |node| node["Rows Removed by Filter"].to_i + node["Rows Removed by Join Filter"].to_i }
      assert_operator read, :<, 300, "#{queues}: the plan read the other queue's 3,000 jobs: #{nodes.map { |node| node.except("Plans") }}"
      assert_equal claimed, store(queues).claim(@process_id, 3).map(&:id), "#{queues}: the wildcard's first jobs by priority"
      @store.close
      Bobbin::JobRecord.where(id: claimed).update_all(state: "ready", claimed_by: nil)
    end
  ensure
    connection&.execute("RESET enable_sort")
  end

  # Planning a wildcard's claim cost more than running it, and PostgreSQL planned it afresh at every claim (its generic
  # plan looked dearer): a worker's drain of one wildcard's jobs took twice as long as before the wildcard had an index.
  test "PostgreSQL: a wildcard worker's session plans its claim once, not at every claim" do
    skip_unless_postgres
    Bobbin.enqueue_all(Array.new(8) { |i| [ SleepJob, [ i ], { queue: "quick_#{i % 2}" } ] })
    config = Bobbin::Record.connection_db_config
    adapter = ActiveRecord::DatabaseConfigurations::HashConfig.new("test", "store", config.configuration_hash).new_connection
    store = Bobbin::Store::PostgreSQL.new(adapter, Bobbin::Store::QueueSelection.new([ "quick_*" ]))
    assert_equal 8, Array.new(8) { store.claim(@process_id, 1).size }.sum
    plans = adapter.raw_connection.exec("SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE name LIKE 'bobbin_%'").values
    assert_equal [ [ 8, 0 ] ], plans, "[generic, custom] plans of the claim"
  ensure
    adapter&.disconnect!
  end

  # A prepared statement's cached plan is made again only after an ANALYZE: one made while the table was empty (a new
  # install) read every ready job (or every one of the wildcard's queues) at each claim once they grew (120 ms a claim
  # beside 500,000 jobs, 0.4 after ANALYZE), until autovacuum analyzed the table (here: never).
  test "PostgreSQL: a worker whose claim was planned on an empty table plans it again as its queues grow, before any ANALYZE", long: true do
    skip_unless_postgres
    connection = Bobbin::Record.connection
    Bobbin::Schema.down(connection) # a new install's tables: empty, and never analyzed (no other test's statistics)
    Bobbin.migrate!
    connection.execute("ALTER TABLE bobbin_jobs SET (autovacuum_enabled = false)")
    @process_id = Bobbin::ProcessRecord.register(kind: "test", name: "claim-test").id
    config = Bobbin::Record.connection_db_config
    adapter = ActiveRecord::DatabaseConfigurations::HashConfig.new("test", "store", config.configuration_hash).new_connection
    store = Bobbin::Store::PostgreSQL.new(adapter, Bobbin::Store::QueueSelection.new([ "quick_*" ]))
    Array.new(8) { store.claim(@process_id, 10) } # its plan is made now
    connection.execute(<<~SQL)
      INSERT INTO bobbin_jobs (queue, class_name, arguments, priority, run_at, max_attempts, state, attempts, enqueued_at)
      SELECT CASE WHEN i % 10 = 0 THEN 'quick_' || (i % 7) ELSE 'other_' || (i % 13) END, 'SleepJob', '[0]', i % 3,
             now() AT TIME ZONE 'UTC' - interval '1 minute', 3, CASE WHEN i % 5 = 0 THEN 'ready' ELSE 'succeeded' END, 0,
             now() AT TIME ZONE 'UTC'
      FROM generate_series(1, 100000) AS i
    SQL
    name = store.send(:statement_name, store.instance_variable_get(:@claim_sql))
    raw = adapter.raw_connection
    read = lambda do
      store.claim(@process_id, 0) # the store's next statement
      raw.exec("BEGIN")
      plan = JSON.parse(raw.exec("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE #{name}(#{@process_id}, 10, true, NULL)").getvalue(0, 0))
      raw.exec("ROLLBACK")
      nodes = ->(node) { [ node, *Array(node["Plans"]).flat_map(&nodes) ] }
      nodes.(plan.first["Plan"]).sum { |node| node["Rows Removed by Filter"].to_i + node["Rows Removed by Join Filter"].to_i }
    end
    wait_for("the claim to read its 10 jobs, not every ready one", timeout: 60, interval: 0.5, seen: -> { "#{read.call} rows read and dropped" }) do
      read.call < 300
    end
    assert_equal 10, store.claim(@process_id, 10).size
  ensure
    adapter&.disconnect!
    connection&.execute("ALTER TABLE bobbin_jobs RESET (autovacuum_enabled)")
  end

  # A wildcard's claim picks its candidates before it locks them: those another worker holds are passed over, and the
  # batch fills from the jobs after them, as a named queue's does; a queue made after the store opened is one of its.
  test "PostgreSQL: a wildcard's claim passes over jobs another worker holds and fills its batch from the jobs after them" do
    skip_unless_postgres
    ids = Bobbin.enqueue_all(Array.new(6) { |i| [ SleepJob, [ i ], { queue: "quick_#{i % 2}", priority: i } ] })
    held = Queue.new
    release = Queue.new
    holder = Thread.new do
      Bobbin::JobRecord.transaction do
        Bobbin::JobRecord.where(id: ids.first(2)).lock.to_a
        held << true
        release.pop
      end
    end
    held.pop
    assert_equal ids[2, 3], store([ "quick_*" ]).claim(@process_id, 3).map(&:id)
    release << true
    holder.join
    assert_equal [ *ids.first(2), ids[5] ], @store.claim(@process_id, 10).map(&:id)
  ensure
    release&.push(true)
    holder&.join
  end

  test "a wildcard's claim takes the jobs of a queue made after its worker started" do
    first = Bobbin::Client::Enqueuer.enqueue(SleepJob, [ 0 ], queue: "quick_a")
    assert_equal [ first ], store([ "quick_*", "other" ]).claim(@process_id, 10).map(&:id)
    later = Bobbin::Client::Enqueuer.enqueue(SleepJob, [ 0 ], queue: "quick_new")
    assert_equal [ later ], @store.claim(@process_id, 10).map(&:id)
  end

  test "PostgreSQL: a store whose session was replaced prepares its statements again on the new one" do
    skip_unless_postgres
    Bobbin.enqueue_all(Array.new(3) { |i| [ SleepJob, [ i ] ] })
    assert_equal 1, store.claim(@process_id, 1).size
    sessions_killed!
    Bobbin::Record.connection.select_all("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")
    assert_raises(Bobbin::Store::Unavailable) { @store.claim(@process_id, 1) }
    assert_equal 1, @store.claim(@process_id, 1).size, "claims after reconnecting (on a session that never saw the statements)"
    assert_equal 1, @store.claim(@process_id, 1).size
  end

  test "PostgreSQL: the worker's statements are prepared on its session, unless the config turns prepared statements off" do
    skip_unless_postgres
    Bobbin.enqueue_all(Array.new(2) { |i| [ SleepJob, [ i ] ] })
    config = Bobbin::Record.connection_db_config
    prepared = { true => 0, false => 0 }
    [ true, false ].each do |setting|
      adapter = ActiveRecord::DatabaseConfigurations::HashConfig.new("test", "store", config.configuration_hash.merge(prepared_statements: setting)).new_connection
      store = Bobbin::Store::PostgreSQL.new(adapter, Bobbin::Store::QueueSelection.new([ "*" ]))
      assert_equal 1, store.claim(@process_id, 1).size
      prepared[setting] = adapter.raw_connection.exec("SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'bobbin_%'").getvalue(0, 0).to_i
    ensure
      adapter&.disconnect!
    end
    assert_equal({ true => 1, false => 0 }, prepared, "behind PgBouncer in transaction mode (prepared_statements: false) nothing may be prepared")
  end

  test "a paused queue is skipped by the claim until resumed" do
    Bobbin::Client::Enqueuer.enqueue(SleepJob, [ 0 ], queue: "llm")
    Bobbin.pause("llm")
    Bobbin.pause("llm")
    assert_empty store.claim(@process_id, 10)
    Bobbin.resume("llm")
    assert_equal 1, store.claim(@process_id, 10).size
  end

  # A job that fell due between a claim and the look for the next due time was in neither: the worker slept to its
  # next poll (a trial: the second of two jobs due 3 ms apart ran 4–10 s late).
  test "the next due time is looked for after a given time, so a job due since then counts; paused queues' jobs do not" do
    now = Time.now
    SleepJob.enqueue_at(now - 0.1, 0)
    SleepJob.enqueue_at(now + 30, 0)
    Bobbin::Client::Enqueuer.enqueue(SleepJob, [ 0 ], queue: "llm", run_at: now + 5)
    assert_in_delta (now - 0.1).to_f, store.next_run_at((now - 0.25).to_f), 0.001, "due since the claim began: wake at once"
    assert_in_delta (now + 5).to_f, store.next_run_at(now.to_f), 0.001
    Bobbin.pause("llm")
    assert_in_delta (now + 30).to_f, store.next_run_at(now.to_f), 0.001, "a paused queue's job would wake the worker for nothing"
    assert_nil store([ "mail" ]).next_run_at(now.to_f)
  end

  test "a wildcard's next due time is its own queues' earliest, a paused one's left out; none is nil" do
    now = Time.now
    SleepJob.enqueue_at(now + 5, 0)
    Bobbin::Client::Enqueuer.enqueue(SleepJob, [ 0 ], queue: "quick_b", run_at: now + 20)
    Bobbin::Client::Enqueuer.enqueue(SleepJob, [ 0 ], queue: "quick_a", run_at: now + 10)
    assert_in_delta (now + 10).to_f, store([ "quick_*" ]).next_run_at(now.to_f), 0.001
    Bobbin.pause("quick_a")
    assert_in_delta (now + 20).to_f, @store.next_run_at(now.to_f), 0.001, "a paused queue's job would wake the worker for nothing"
    @store.close
    assert_in_delta (now + 5).to_f, store([ "quick_*", "default" ]).next_run_at(now.to_f), 0.001
    @store.close
    assert_nil store([ "slow_*", "mail" ]).next_run_at(now.to_f)
  end

  # An idle worker looks for its next due time at every poll and wakeup; a wildcard's look walked the later jobs of
  # every queue in run_at order (37 ms beside 300,000 scheduled jobs in other queues, a named queue's 0.04).
  test "PostgreSQL: a wildcard's next due time reads only its own queues' jobs, however many others are scheduled earlier" do
    skip_unless_postgres
    now = Time.now
    Bobbin.enqueue_all(Array.new(3_000) { |i| [ SleepJob, [ i ], { queue: "backlog", run_at: now + 60 + i } ] })
    Bobbin::Client::Enqueuer.enqueue(SleepJob, [ 0 ], queue: "quick_a", run_at: now + 7_200)
    connection = Bobbin::Record.connection
    connection.execute("ANALYZE bobbin_jobs")
    sql = Bobbin::Store::PostgreSQL.new(connection, Bobbin::Store::QueueSelection.new([ "quick_*" ])).send(:next_run_at_sql)
    nodes = TestDatabase.generic_plan_nodes(sql, [ now.to_f ])
    read = nodes.sum { |node| node["Rows Removed by Filter"].to_i + node["Actual Rows"].to_i * node["Actual Loops"].to_i }
    assert_operator read, :<, 300, "the plan read the other queue's 3,000 jobs: #{nodes.map { |node| node.except("Plans") }}"
    assert_in_delta (now + 7_200).to_f, store([ "quick_*" ]).next_run_at(now.to_f), 0.001
  end

  test "outcomes are written in one batch and only for jobs the process still holds" do
    ids = Bobbin.enqueue_all(Array.new(3) { |i| [ SleepJob, [ i ] ] })
    store.claim(@process_id, 3)
    now = Bobbin::Store.timestamp(Time.now)
    outcomes = [ outcome(ids[0], "succeeded", now, nil),
                 outcome(ids[1], "failed", now, nil, "RuntimeError", "boom", "a.rb:1"),
                 outcome(ids[2], "succeeded", now, nil) ]
    assert_equal 0, @store.finish(@process_id + 1, outcomes), "another process's outcomes for them change nothing"
    assert_equal [ "running" ], Bobbin::JobRecord.where(id: ids).distinct.pluck(:state)
    assert_equal 3, @store.finish(@process_id, outcomes)
    assert_equal 0, @store.finish(@process_id, outcomes), "a second write of the same outcomes changes nothing"
    failed = Bobbin::JobRecord.find(ids[1])
    assert_equal [ "failed", "RuntimeError", "boom", "a.rb:1" ], [ failed.state, failed.last_error_class, failed.last_error_message, failed.last_error_backtrace ]
  end

  test "a reclaim takes a recovered job back at the attempt it runs as, so its outcome is written" do
    id = SleepJob.enqueue(0)
    beside = SleepJob.enqueue(1)
    store.claim(@process_id, 2)
    assert_equal 2, Bobbin::Recovery.recover(@process_id, "pruned by this test")
    assert_equal [ 0 ], Bobbin::JobRecord.where(id: [ id, beside ]).distinct.pluck(:attempts), "recovery gave both attempts back"
    assert_equal 2, @store.reclaim(@process_id, { id => 1, beside => 1 })
    assert_equal [ [ "running", 1 ] ], Bobbin::JobRecord.where(id: [ id, beside ]).distinct.pluck(:state, :attempts)
    assert_equal 2, @store.finish(@process_id, [ id, beside ].map { |job| outcome(job, "succeeded", Bobbin::Store.timestamp(Time.now), nil, attempts: 1) })
  end

  # A worker pruned while alive had its running job recovered, then wrote that job's retry. Its heartbeat had read the
  # jobs it holds (the retry's outcome still unwritten) an instant before, and the reclaim it sent with them made the
  # retry's row running again, held by nobody: it stayed running until the worker stopped.
  test "a reclaim sent as an outcome lands leaves a retry written on a recovered job waiting for its time" do
    id = SleepJob.enqueue(0)
    store.claim(@process_id, 1)
    assert_equal 1, Bobbin::Recovery.recover(@process_id, "pruned by this test")
    held = { id => 1 } # what the heartbeat read: the retry's outcome not yet written
    assert_equal 1, @store.finish(@process_id, [ outcome(id, "ready", nil, Bobbin::Store.timestamp(Time.now + 60), "RuntimeError", "boom") ])
    assert_equal 0, @store.reclaim(@process_id, held)
    assert_equal [ "ready", 1 ], Bobbin::JobRecord.where(id: id).pick(:state, :attempts)
  end

  test "release returns held jobs to ready and gives back the attempt, except those kept" do
    ids = Bobbin.enqueue_all(Array.new(3) { |i| [ SleepJob, [ i ] ] })
    store.claim(@process_id, 3)
    assert_equal [ nil, nil ], @store.release(@process_id, [ ids[0] ]), "the concurrency key of each job it returned"
    assert_equal({ ids[0] => [ "running", 1 ], ids[1] => [ "ready", 0 ], ids[2] => [ "ready", 0 ] },
                 Bobbin::JobRecord.where(id: ids).to_h { |job| [ job.id, [ job.state, job.attempts ] ] })
  end

  private
    def outcome(id, state, finished_at, run_at, error_class = nil, message = nil, backtrace = nil, attempts: 1)
      Bobbin::Store::Outcome.new(id, state, finished_at, run_at, error_class, message, backtrace, nil, "default", attempts)
    end
end
