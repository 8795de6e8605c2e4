# frozen_string_literal: true

require "test_helper"

class FiberWorkerTest < Bobbin::TestCase
  test "1,000 jobs that each sleep 0.2 s all succeed under fibers: 500, with at least 450 in flight at once" do
    Bobbin.enqueue_all(Array.new(1_000) { |i| [ SleepJob, [ 0.2, "job-#{i}" ] ] })
    drain(fibers: 500)
    assert_equal 1_000, Bobbin.counts["succeeded"]
    assert_equal 1_000, LedgerEntry.count
    assert_operator Recorder.max_in_flight, :>=, 450, "highest number of jobs seen running at once"
    assert_operator Recorder.max_in_flight, :<=, 500, "never more than the pool's capacity"
  end

  test "200 fibers writing to the database share a pool of 3; the process holds at most 3 + 2 connections and a listener" do
    SessionCountingJob.since = ActiveRecord::Base.connection.select_value("SELECT clock_timestamp()::text") if postgres?
    with_pool(3) do
      Bobbin.enqueue_all(Array.new(200) { |i| [ SessionCountingJob, [ "job-#{i}" ] ] })
      with_listener_connected { drain(fibers: 200) }
      assert_equal 200, LedgerEntry.count, "every job got a connection in turn; none timed out"
      assert_operator Recorder.max_in_flight, :>=, 150, "the jobs really overlapped"
      assert_operator SessionCountingJob.peak, :<=, 6, "server-side sessions seen from inside the jobs" if postgres?
    end
  end

  test "jobs that hold connections across a wait and leave others waiting past checkout_timeout: those fail, and the log says why once" do
    ActiveRecord::Base.establish_connection(TestDatabase.url_with_pool(3, name: TestDatabase.application_name) + "&checkout_timeout=0.2")
    Bobbin.enqueue_all(Array.new(8) { |i| [ TransactionSleepJob, [ "held-#{i}", 0.6 ] ] })
    log = bobbin_log { drain(fibers: 8) }
    states = Bobbin::JobRecord.group(:state, :last_error_class).count
    assert_equal 8, states.values.sum
    assert_operator states[[ "failed", "ActiveRecord::ConnectionTimeoutError" ]].to_i, :>=, 1, states.inspect
    assert_equal 1, log.scan(/a job waited past checkout_timeout for a database connection \(Active Record pool of 3\)\. .*a transaction/).size, log
  ensure
    ActiveRecord::Base.establish_connection(TestDatabase.url_with_pool(name: TestDatabase.application_name))
  end

  test "an exception in one fiber fails that job only; the others and the loop carry on" do
    Bobbin.enqueue_all([ [ NotImplementedJob, [] ] ] + Array.new(20) { |i| [ SleepJob, [ 0.01, "ok-#{i}" ] ] })
    drain(fibers: 10)
    assert_equal 20, LedgerEntry.count
    failed = Bobbin::JobRecord.find_by!(class_name: "NotImplementedJob")
    assert_equal [ "failed", "NotImplementedError", "not yet" ], [ failed.state, failed.last_error_class, failed.last_error_message ]
  end

  test "each job starts without what the job before it in the same fiber left in Fiber[], Thread.current[] or Rails' per-fiber state" do
    LeftoverJob.reset
    Fiber[:leftover] = "the worker's own"
    Bobbin.enqueue_all(Array.new(30) { |i| [ LeftoverJob, [ "job-#{i}" ] ] })
    drain(fibers: 3)
    found = Array.new(LeftoverJob.found.size) { LeftoverJob.found.pop }
    assert_equal 30, found.size
    assert_equal [ [ "the worker's own", nil ] ], found.map { |_, storage, local| [ storage, local ] }.uniq, "inherited storage, no locals"
    assert_equal [ [ nil, :writing ] ], found.map { |*, state, role| [ state, role ] }.uniq, "no Rails state: the writing role, not a replica"

    Bobbin.enqueue_all(Array.new(30) { |i| [ LeftoverJob, [ "fresh-#{i}" ] ] })
    Fiber.new(storage: nil) { drain_within(60, fibers: 3) }.resume # fibers with no storage until a job gives them some
    found = Array.new(LeftoverJob.found.size) { LeftoverJob.found.pop }
    assert_equal [ [ nil, nil ] ], found.map { |_, storage, local| [ storage, local ] }.uniq
    assert_equal 60, Bobbin.counts["succeeded"]
  ensure
    Fiber[:leftover] = nil
  end

  test "jobs that never wait still let the loop turn between them, so the claim loop need not wait for the line to empty" do
    executor = Bobbin::Worker::FiberExecutor.new(1, on_done: -> { })
    order = []
    executor.run do
      3.times { |i| executor.post(Bobbin::Store::ClaimedJob.new(i)) { order << "job #{i}" } }
      while executor.busy.positive?
        order << "loop"
        Async::Task.current.yield
      end
    end
    assert_equal [ "job 0", "loop", "job 1", "loop", "job 2" ], order.drop_while { |step| step == "loop" }.first(5)
  end

  # A job's row read succeeded while the tasks it started still ran, and a stop then cut them: their work was lost (a trial).
  test "a job's outcome waits for the tasks it started with Async { }, and one's exception fails the job" do
    FannedOutJob.enqueue(0.3, "fanned-out")
    failing = FannedOutJob.enqueue(0.1, "never", "the task's own")
    drain(fibers: 4)
    assert_equal [ "fanned-out" ], LedgerEntry.pluck(:key), "its task's work was done before the worker said the job succeeded"
    assert_equal [ "failed", "ArgumentError", "the task's own" ], Bobbin::JobRecord.where(id: failing).pick(:state, :last_error_class, :last_error_message)
    assert_equal 1, Bobbin.counts["succeeded"]
  end

  test "a task a job left running that swallows its stop is ended after the grace: the worker's run returns, its row goes, the job runs again", long: true do
    StubbornTaskJob::STOPS.clear
    id = StubbornTaskJob.enqueue
    worker = Bobbin::Worker.new(fibers: 2, polling_interval: 0.05, shutdown_timeout: 0)
    thread = Thread.new { worker.run }
    wait_for("the job to run") { Bobbin::JobRecord.find(id).state == "running" }
    sleep(0.2) # its task started
    worker.stop
    assert thread.join(60), "the worker's run returned (its loop ran the task for ever)"
    stops = Array.new(StubbornTaskJob::STOPS.size) { StubbornTaskJob::STOPS.pop }
    assert_includes stops, :swallowed, "the task ignored its stop"
    assert_equal :ended, stops.last, "then its fiber was ended, through its ensure"
    assert_equal 0, Bobbin::ProcessRecord.count
    assert_equal "ready", Bobbin::JobRecord.find(id).state, "the job's work was cut: it runs again"
  ensure
    thread&.kill&.join(10)
  end

  test "a worker beats as it starts, not a heartbeat_interval after registering (a slow boot was silence to prune)" do
    Bobbin.config.set(heartbeat_interval: 30, process_alive_threshold: 90)
    SleepJob.enqueue(15, "keeps it running")
    worker = Bobbin::Worker.new(queues: [ "*" ], fibers: 2)
    thread = Thread.new { worker.start }
    beaten = -> { Bobbin::ProcessRecord.where(kind: "worker").where("last_heartbeat_at > created_at").exists? }
    assert wait_for("the worker's first beat (heartbeat_interval 30 s)", timeout: 10) { beaten.call }
  ensure
    worker&.stop(timeout: 0)
    thread&.join(30)
  end

  test "a worker on an ordered queue list runs its first queue's jobs before the next's, whatever their priorities" do
    Bobbin.enqueue_all(Array.new(3) { |i| [ SleepJob, [ 0, "default-#{i}" ], { queue: "default", priority: -5 } ] } +
                       Array.new(3) { |i| [ SleepJob, [ 0, "critical-#{i}" ], { queue: "critical", priority: 5 } ] })
    drain(queues: [ "critical", "default" ], fibers: 1)

    assert_equal %w[critical-0 critical-1 critical-2 default-0 default-1 default-2], Recorder.calls
  end

  test "the worker registers its process while it runs and removes it when it stops" do
    seen = nil
    job = Class.new do
      include Bobbin::Job
      define_method(:perform) { seen = Bobbin::ProcessRecord.pluck(:id, :kind, :pid) }
    end
    stub_const(:ProcessSpyJob, job) do
      ProcessSpyJob.enqueue
      drain(fibers: 2)
    end
    assert_equal [ [ "worker", Process.pid ] ], seen.map { |_, kind, pid| [ kind, pid ] }
    assert_equal seen[0][0], Bobbin::JobRecord.last.claimed_by, "the job row names the process that ran it"
    assert_equal 0, Bobbin::ProcessRecord.count
  end

  private
    # Runs the block once this process's listener (PostgreSQL) listens, the drain's worker sharing it: while it
    # connects, its probe (a NOTIFY sent from a second session, see Listener.probe) holds one more session for a
    # moment, which jobs starting meanwhile would count.
    def with_listener_connected
      return yield unless postgres?

      subscriber = Object.new.tap { |idle| idle.define_singleton_method(:notice) { |*| } }
      Bobbin::Wakeups.subscribe(subscriber)
      wait_for("the listener to connect") { Bobbin::Wakeups.listening? }
      yield
    ensure
      Bobbin::Wakeups.unsubscribe(subscriber) if subscriber
    end

    def with_pool(size)
      ActiveRecord::Base.establish_connection(TestDatabase.url_with_pool(size, name: TestDatabase.application_name))
      yield
    ensure
      ActiveRecord::Base.establish_connection(TestDatabase.url_with_pool(name: TestDatabase.application_name))
    end

    def stub_const(name, value)
      Object.const_set(name, value)
      yield
    ensure
      Object.send(:remove_const, name)
    end

  test "a worker drains again after run_until_empty returned: fibers, fibers with a thread lane, threads" do
    [ { fibers: 5, thread_lane: 0 }, { fibers: 5, thread_lane: 1 }, { threads: 3 } ].each do |options|
      worker = Bobbin::Worker.new(polling_interval: 0.05, **options)
      3.times do |round|
        keys = Array.new(10) { |i| "#{options.keys.join('-')}-#{round}-#{i}" }
        Bobbin.enqueue_all(keys.map { |key| [ LedgerUpsertJob, [ key ] ] })
        worker.run_until_empty
        assert_equal keys.sort, LedgerEntry.where(key: keys).pluck(:key).sort, "#{options} round #{round}"
      end
    end
    assert_equal 0, Bobbin::JobRecord.where.not(state: "succeeded").count
  end
end
