# frozen_string_literal: true

require "test_helper"

class ConcurrencyLimitsTest < Bobbin::TestCase
  setup { ConcurrencyCounter.create_table }

  def states(key) = Bobbin::JobRecord.where(concurrency_key: key).order(:id).pluck(:state)

  test "jobs beyond their key's limit wait blocked; other keys and unlimited jobs are not held up" do
    3.times { |i| LimitedJob.enqueue("a", i) }
    LimitedJob.enqueue("b", 0)
    LedgerJob.enqueue("free")
    assert_equal %w[ready ready blocked], states("LimitedJob/a")
    assert_equal %w[ready], states("LimitedJob/b")
    assert_equal 1, Bobbin.counts["blocked"]
    assert_equal [ 2, 180.0 ], Bobbin::JobRecord.where(concurrency_key: "LimitedJob/a").pick(:concurrency_limit, :concurrency_duration)
  end

  # On SQLite each waiting job's own limit counted, on PostgreSQL the first waiting one's: a looser job went ahead of
  # the key's older waiting job on one database only (a review).
  test "jobs of one key with different limits: the first waiting job's limit decides, and none goes ahead of it" do
    ids = [ StrictSharedJob, StrictSharedJob, LooseSharedJob, LooseSharedJob, LooseSharedJob ].map { |job| job.enqueue("x") }
    assert_equal %w[ready blocked blocked blocked blocked], Bobbin::JobRecord.where(id: ids).order(:id).pluck(:state)
    Bobbin::JobRecord.where(id: ids.first).update_all(state: "succeeded")
    Bobbin::Store.promote_keys([ "shared/x" ])
    assert_equal %w[succeeded ready blocked blocked blocked], Bobbin::JobRecord.where(id: ids).order(:id).pluck(:state)
    Bobbin::JobRecord.where(id: ids[1]).update_all(state: "succeeded")
    Bobbin::Store.promote_keys([ "shared/x" ])
    assert_equal %w[succeeded succeeded ready ready ready], Bobbin::JobRecord.where(id: ids).order(:id).pluck(:state),
                 "the looser jobs at the head: three slots"
  end

  test "a finished holder lets the next waiting job of its key through, and the worker runs it" do
    ConcurrencyCounter.add_keys(%w[a])
    5.times { |i| LimitedJob.enqueue("a", i) }
    drain(threads: 5)
    assert_equal %w[succeeded] * 5, states("LimitedJob/a")
    assert_operator ConcurrencyCounter.seen.max, :<=, 2
  end

  test "a worker letting waiting jobs through logs no SQL for it at debug, as housekeeping's queries are held back" do
    ConcurrencyCounter.add_keys(%w[q])
    4.times { |i| LimitedJob.enqueue("q", i) }
    log = StringIO.new
    was = ActiveRecord::Base.logger
    ActiveRecord::Base.logger = ActiveSupport::Logger.new(log, level: :debug) # development's level
    drain(threads: 4)
    assert_equal %w[succeeded] * 4, states("LimitedJob/q")
    assert_includes log.string, "LimitedJob", "the log does see the jobs' own SQL"
    refute_includes log.string, "Bobbin Promote"
  ensure
    ActiveRecord::Base.logger = was
  end

  # Letting a job through takes its key's lock; inside the app's transaction that lock (PostgreSQL's advisory lock
  # lasts as long as the transaction) stopped every worker finishing a job of the key until the app committed.
  test "enqueued inside the app's transaction, a limited job is let through once it commits, and holds no lock before" do
    Bobbin::Record.transaction do
      id = LimitedJob.enqueue("t", 0)
      assert_equal "blocked", Bobbin::JobRecord.where(id: id).pick(:state), "let through after the commit"
      if postgres?
        backend = Bobbin::Record.connection.select_value("SELECT pg_backend_pid()")
        other = Bobbin::Record.connection_db_config.new_connection
        assert_equal 0, other.select_value("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = #{backend}").to_i
        other.disconnect!
      end
    end
    assert_equal %w[ready], states("LimitedJob/t")
    Bobbin::Record.transaction do
      LimitedJob.enqueue("t", 1)
      raise ActiveRecord::Rollback
    end
    assert_equal %w[ready], states("LimitedJob/t"), "rolled back: nothing stored, nothing let through"
  end

  test "a retried job with a limit waits blocked for its retry and frees its slot meanwhile" do
    job_class = Class.new(FlakyJob) { bobbin_options retries: 2, backoff: 30, concurrency: { to: 1, key: ->(_key, _failures) { "r" } } }
    Object.const_set(:RetryLimitedJob, job_class)
    failing = RetryLimitedJob.enqueue("fails once", 1)
    waiting = RetryLimitedJob.enqueue("waits", 0)
    assert_equal %w[ready blocked], states("RetryLimitedJob/r")
    drain(threads: 2)
    assert_equal %w[blocked succeeded], states("RetryLimitedJob/r"), "the retry waits blocked; the other job took the slot"
    assert_operator Bobbin::JobRecord.find(failing).run_at, :>, Time.now.utc + 20, "its retry is 30 s ahead"
    assert_equal "scheduled", Bobbin::JobRecord.find(failing).shown_state
    assert LedgerEntry.exists?(key: "waits")

    Bobbin::JobRecord.where(id: waiting).update_all(state: "running", claimed_at: Time.now.utc)
    Bobbin::JobRecord.where(id: failing).update_all(state: "failed")
    assert Bobbin.retry(failing)
    assert_equal "blocked", Bobbin::JobRecord.find(failing).state, "retried by an operator while its key is full: it waits"
    Bobbin::JobRecord.where(id: waiting).update_all(state: "succeeded")
    Bobbin::JobRecord.where(id: failing).update_all(state: "failed")
    assert Bobbin.retry(failing)
    assert_equal "ready", Bobbin::JobRecord.find(failing).state, "promoted at once: its key has room"
  ensure
    Object.send(:remove_const, :RetryLimitedJob)
  end

  test "an operator can discard a blocked job; discarding a holder lets the next one through at once" do
    3.times { |i| LimitedJob.enqueue("d", i) }
    blocked = Bobbin::JobRecord.find_by(state: "blocked")
    assert Bobbin.discard(blocked.id)
    assert_equal "discarded", blocked.reload.state
    LimitedJob.enqueue("d", 3)
    assert_equal %w[ready ready discarded blocked], states("LimitedJob/d")
    assert Bobbin.discard(Bobbin::JobRecord.find_by(concurrency_key: "LimitedJob/d", state: "ready").id)
    assert_equal %w[discarded ready discarded ready], states("LimitedJob/d"), "no promotion pass needed"
  end


  # A discard of a filter walks it in batches; each batch let its key's next blocked job through, one a later batch was
  # to discard, and an idle worker ran it first (a review: 134 of 2,500 such jobs ran).
  test "a bulk discard over more than one batch lets none of its jobs through, and frees the key once it is done" do
    jobs = Bobbin::Operator::Actions::BATCH + 100
    Bobbin.enqueue_all(Array.new(jobs) { |i| [ LimitedJob, [ "e", i ], { queue: "sweep" } ] })
    kept = Bobbin.enqueue_all([ [ LimitedJob, [ "e", jobs ], { queue: "keep" } ] ]).first
    ready = Bobbin::JobRecord.where(queue: "sweep", state: "ready").pluck(:id)
    assert_equal 2, ready.size
    let_through = []
    batches = 0
    ActiveSupport::Notifications.subscribed(->(*) { batches += 1; let_through.concat(Bobbin::JobRecord.where(queue: "sweep", state: "ready").where.not(id: ready).pluck(:id)) }, "discard.bobbin") do
      assert_equal jobs, Bobbin::Operator.discard_all({ queue: "sweep" }, by: "ops")
    end
    assert_operator batches, :>, 1
    assert_empty let_through, "a job the discard was to reach became ready before it"
    assert_equal [ "discarded" ], Bobbin::JobRecord.where(queue: "sweep").distinct.pluck(:state)
    assert_equal "ready", Bobbin::JobRecord.find(kept).state, "the key's slots were handed on to the job outside the filter"
  end
  # A `bobbin work` stopping handed its limited job back blocked, and only a promotion pass let it through: with no
  # other worker on the host, the next one's, up to heartbeat_interval later (a review: 7 s).
  test "a limited job a stopping worker hands back is let through as it is handed back, not at a later promotion pass" do
    id = SleepingLimitedJob.enqueue(120)
    worker = Bobbin::Worker.new(threads: 1, shutdown_timeout: 0.2, polling_interval: 0.05)
    thread = Thread.new { worker.run }
    wait_for("the job running") { Bobbin::JobRecord.find(id).state == "running" }
    worker.stop
    thread.join
    assert_equal [ "ready", 0 ], Bobbin::JobRecord.where(id: id).pick(:state, :attempts)
  end

  test "bad limits are refused where they are declared or enqueued, naming the job" do
    error = assert_raises(Bobbin::ConfigurationError) { Class.new { include Bobbin::Job }.bobbin_options(concurrency: { to: 0, key: "x" }) }
    assert_match(/to: must be a whole number/, error.message)
    # More than the row's integer column holds: declared, it failed every enqueue on PostgreSQL with the driver's error.
    error = assert_raises(Bobbin::ConfigurationError) { Class.new { include Bobbin::Job }.bobbin_options(concurrency: { to: 2**31, key: "x" }) }
    assert_match(/to: must be a whole number from 1 to 2147483647, got 2147483648/, error.message)
    error = assert_raises(Bobbin::ConfigurationError) { LedgerJob.dup.bobbin_options(concurrency: { to: 1 }) }
    assert_match(/needs key:/, error.message)
    error = assert_raises(Bobbin::ConfigurationError) { LedgerJob.dup.bobbin_options(concurrency: { to: 1, key: "x", per: 2 }) }
    assert_match(/unknown concurrency option :per/, error.message)

    broken = Class.new(LedgerJob) { bobbin_options concurrency: { key: ->(_key) { raise "no account" } } }
    stub_const_name(broken, "BrokenKeyJob") do
      assert_refused(/BrokenKeyJob: the concurrency key could not be computed \(RuntimeError: no account\)/) { broken.enqueue("k") }
    end
    huge = Class.new(LedgerJob) { bobbin_options concurrency: { to: 2**31 - 1, key: "x" } }
    stub_const_name(huge, "HugeLimitJob") { huge.enqueue("k") }
    assert_equal %w[ready], states("HugeLimitJob/x"), "the largest limit the row holds is taken"
  end

  # A model inside an Array was written as "#<LedgerEntry:0x…>": each job loads its own instance, so each had a key of
  # its own, and the limit held none of them back.
  test "an Active Record model in a key counts as Class/id, also inside an Array or a Hash: its jobs share its slots" do
    entry = LedgerEntry.create!(key: "account")
    by_region = Class.new(LedgerJob) { bobbin_options concurrency: { to: 1, key: ->(id, region) { [ LedgerEntry.find(id), region ] } } }
    by_hash = Class.new(LedgerJob) { bobbin_options concurrency: { to: 1, key: ->(id) { { account: LedgerEntry.find(id) } } } }
    alone = Class.new(LedgerJob) { bobbin_options concurrency: { to: 1, key: ->(id) { LedgerEntry.find(id) } } }
    stub_const_name(by_region, "RegionSyncJob") { 2.times { by_region.enqueue(entry.id, "eu") } }
    stub_const_name(by_hash, "HashSyncJob") { 2.times { by_hash.enqueue(entry.id) } }
    stub_const_name(alone, "AccountSyncJob") { 2.times { alone.enqueue(entry.id) } }
    assert_equal %w[ready blocked], states("RegionSyncJob/LedgerEntry/#{entry.id}/eu")
    assert_equal %w[ready blocked], states("HashSyncJob/account/LedgerEntry/#{entry.id}")
    assert_equal %w[ready blocked], states("AccountSyncJob/LedgerEntry/#{entry.id}")
    assert_equal 6, Bobbin::JobRecord.count
  end

  # The key's model was fixed; a group lambda's was still written as "#<LedgerEntry:0x…>", a group for each job, and the
  # limit held none of them back (a review).
  test "an Active Record model a group lambda returns counts as Class/id: the jobs of its group share their slots" do
    require_relative "../support/active_jobs"
    entry = LedgerEntry.create!(key: "account")
    grouped = Class.new(LedgerJob) { bobbin_options concurrency: { to: 1, key: "sync", group: ->(id) { LedgerEntry.find(id) } } }
    listed = Class.new(LedgerJob) { bobbin_options concurrency: { to: 1, key: "sync", group: ->(id) { [ LedgerEntry.find(id), "eu" ] } } }
    active = Class.new(ActiveJob::Base) { limits_concurrency key: ->(id) { id }, group: ->(id) { LedgerEntry.find(id) } }
    stub_const_name(grouped, "GroupedSyncJob") { 2.times { grouped.enqueue(entry.id) } }
    stub_const_name(listed, "ListedSyncJob") { 2.times { listed.enqueue(entry.id) } }
    stub_const_name(active, "ActiveGroupedSyncJob") { 2.times { active.perform_later(entry.id) } }
    assert_equal %w[ready blocked], states("LedgerEntry/#{entry.id}/sync")
    assert_equal %w[ready blocked], states("LedgerEntry/#{entry.id}/eu/sync")
    assert_equal %w[ready blocked], states("LedgerEntry/#{entry.id}/#{entry.id}")
    assert_equal 6, Bobbin::JobRecord.count
  end

  # A key of bytes no text column takes failed every enqueue of it with the driver's error: PostgreSQL's "string contains
  # null byte", SQLite's "source sequence is illegal/malformed utf-8" (a key lambda's Digest#digest).
  test "a key with a NUL or bytes that are not UTF-8 is stored hashed, and its jobs share its slots" do
    nul = Class.new(LedgerJob) { bobbin_options concurrency: { to: 1, key: ->(name) { "#{name}\0tenant" } } }
    digest = Class.new(LedgerJob) { bobbin_options concurrency: { to: 1, key: ->(name) { Digest::SHA256.digest(name) } } }
    stub_const_name(nul, "NulKeyJob") { [ "a", "a", "b" ].each { |name| nul.enqueue(name) } }
    stub_const_name(digest, "DigestKeyJob") { [ "a", "a", "b" ].each { |name| digest.enqueue(name) } }
    { "NulKeyJob" => "a\0tenant", "DigestKeyJob" => Digest::SHA256.digest("a") }.each do |group, value|
      key = Bobbin::Concurrency::Limit.key(group, value)
      assert_match(%r{\A#{group}/sha256-\h{64}\z}, key)
      assert_equal %w[ready blocked], states(key), "the same bytes, the same slots"
    end
    assert_equal 4, Bobbin::JobRecord.where(state: "ready").count, "another key's job has slots of its own"
  end

  # PostgreSQL reckons a holder's expiry as duration × 1 second, and an interval or timestamp past its range (about
  # 30,000 years) failed the statement: every enqueue of the key while a holder ran raised "interval out of range",
  # and the promotion pass failed for every key beside it. SQLite took the same duration.
  test "a duration meant as forever (Float::MAX) holds the slot on both databases; the key's next jobs wait blocked" do
    forever = Class.new(LedgerJob) { bobbin_options concurrency: { key: ->(key) { key }, duration: Float::MAX } }
    stub_const_name(forever, "ForeverJob") do
      holder = forever.enqueue("k")
      forever.enqueue("k")
      Bobbin::JobRecord.where(id: holder).update_all(state: "running", claimed_at: Time.now.utc - 10 * 365 * 86_400)
      3.times { |i| LimitedJob.enqueue("other", i) }
      Bobbin::JobRecord.where(concurrency_key: "LimitedJob/other").order(:id).limit(2).update_all(state: "succeeded")
      assert_equal 1, Bobbin::Store.promote_due, "the other key's waiting job is let through; ten years on, the holder still holds its slot"
      assert_equal %w[succeeded succeeded ready], states("LimitedJob/other")
      forever.enqueue("k")
      assert_equal %w[running blocked blocked], states("ForeverJob/k")
    end
  end

  test "limits_concurrency on an Active Job class: the key is group/value, and the limit holds" do
    require_relative "../support/active_jobs"
    ConcurrencyCounter.add_keys(%w[acct-1])
    3.times { |i| LimitedActiveJob.perform_later("acct-1", i) }
    assert_equal %w[ready blocked blocked], states("LimitedActiveJob/acct-1")
    assert_equal [ 1, 60.0 ], Bobbin::JobRecord.where(concurrency_key: "LimitedActiveJob/acct-1").pick(:concurrency_limit, :concurrency_duration)
    drain(threads: 3)
    assert_equal %w[succeeded] * 3, states("LimitedActiveJob/acct-1")
    assert_equal [ 1 ], ConcurrencyCounter.seen.uniq, "one at a time"
  end

  test "limits_concurrency on a parent class: each subclass has slots of its own (as in Solid Queue); a group lambda is called" do
    require_relative "../support/active_jobs"
    parent = Class.new(ActiveJob::Base) { limits_concurrency to: 1, key: ->(account) { account } }
    contacts = Class.new(parent)
    invoices = Class.new(parent)
    { parent => "AccountSyncJob", contacts => "SyncContactsJob", invoices => "SyncInvoicesJob" }.each { |job, name| stub_const_name(job, name) { } }
    [ contacts, contacts, invoices ].each { |job| job.perform_later("acct-1") }
    assert_equal [ %w[ready blocked], %w[ready] ], [ states("SyncContactsJob/acct-1"), states("SyncInvoicesJob/acct-1") ]
    shared = Class.new(ActiveJob::Base) { limits_concurrency key: ->(account) { account }, group: ->(account) { "accounts-#{account.size}" } }
    stub_const_name(shared, "SharedGroupJob") { 2.times { shared.perform_later("acct-2") } }
    assert_equal %w[ready blocked], states("accounts-6/acct-2"), "the group lambda gets the job's arguments"
    assert_raises(Bobbin::ConfigurationError, match: /group: must be a String, Symbol or lambda, got 5/) do
      Class.new(ActiveJob::Base) { limits_concurrency key: "k", group: 5 }
    end
  end

  test "200 jobs over 5 keys with limit 2 never run more than 2 at once per key, across worker processes", long: true do
    keys = %w[k1 k2 k3 k4 k5]
    ConcurrencyCounter.add_keys(keys)
    pids = Array.new(2) { spawn_bobbin("work", "--threads", "8", "--polling-interval", "0.05") }
    ensure_killed(pids) do
      wait_for("both workers to start", timeout: 60) { Bobbin::ProcessRecord.where(kind: "worker").count == 2 }
      Bobbin.enqueue_all(Array.new(200) { |i| [ LimitedJob, [ keys[i % 5], i ] ] })
      wait_for("200 limited jobs", timeout: 120) { Bobbin::JobRecord.where(state: "succeeded").count == 200 }
    end
    seen = ConcurrencyCounter.seen
    assert_equal 200, seen.size
    assert_equal 2, seen.max, "never more than 2 running per key (and the limit was reached: jobs did run side by side)"
    assert_equal 2, LedgerEntry.distinct.count(:pid), "both processes ran jobs"
  end

  test "a killed holder's slot frees at once, and a holder that hangs loses its slot after duration", long: true do
    pid = spawn_bobbin("start", "--threads", "1", "--processes", "2", "--polling-interval", "0.05")
    ensure_killed(pid) do
      killed = LongHolderJob.enqueue("killed", 120)
      holder = wait_for("the holder to start", timeout: 60) { LedgerEntry.find_by(key: "killed started") }
      claimed_at = Bobbin::JobRecord.find(killed).claimed_at
      third = LongHolderJob.enqueue("third", 0)
      assert_equal "blocked", Bobbin::JobRecord.find(third).state, "the next one waits while the holder runs"
      Process.kill(:KILL, holder.pid)
      wait_for("the killed holder's slot to free", timeout: 60) { LedgerEntry.exists?(key: "third finished") }
      assert_operator Bobbin::JobRecord.find(third).started_at, :<, claimed_at + 600,
                      "freed when the supervisor saw its worker die, not when the holder's duration ran out"

      HolderJob.enqueue("hung", 120)
      holder = wait_for("the holder to start", timeout: 60) { LedgerEntry.find_by(key: "hung started") }
      HolderJob.enqueue("waiter", 120)
      assert_equal "blocked", Bobbin::JobRecord.order(:id).last.state, "the waiter waits while the holder runs"
      freeze(holder.pid)
      waiter = wait_for("the waiter to take the slot after the holder's 2 s", timeout: 60) { LedgerEntry.find_by(key: "waiter started") }
      assert_not_equal holder.pid, waiter.pid
    end
  end

  # The Clock's routine pass lets blocked jobs through once a second: a limited job's `wait:` (or its retry's backoff)
  # ran up to that second late, where an unlimited job starts on time (a trial: 0.09 to 0.88 s late, against 0.002 to
  # 0.03). With the routine pass an hour away, the job is let through only if the Clock wakes for its due time.
  test "a limited job set to run later is let through when it falls due, not at the clock's next routine pass" do
    ConcurrencyCounter.create_table
    tick = Bobbin::Maintenance::Clock::TICK
    Bobbin::Maintenance::Clock.send(:remove_const, :TICK)
    Bobbin::Maintenance::Clock.const_set(:TICK, 3600.0)
    id = LimitedJob.enqueue_in(3, "later", 0)
    clock = Bobbin::Maintenance::Clock.start("test", scheduler: nil)
    assert_equal "blocked", Bobbin::JobRecord.find(id).state, "scheduled: not let through before its time"
    wait_for("the job let through at its time", timeout: 60) { Bobbin::JobRecord.find(id).state == "ready" }
  ensure
    clock&.stop
    Bobbin::Maintenance::Clock.send(:remove_const, :TICK)
    Bobbin::Maintenance::Clock.const_set(:TICK, tick)
  end

  private
    def stub_const_name(klass, name)
      klass.define_singleton_method(:name) { name }
      yield
    end

  # Each key let through takes an advisory lock on PostgreSQL until its transaction ends, in a lock table the whole
  # cluster shares: tens of thousands of keys in one transaction ran out of it ("out of shared memory").
  test "keys are let through PROMOTE_SLICE per transaction, at enqueue and by the promotion pass" do
    slice = Bobbin::Store::PROMOTE_SLICE
    promotions = []
    count = ->(_, _, _, _, payload) { promotions << payload[:sql] if payload[:sql].start_with?("UPDATE bobbin_jobs SET state = 'ready'") }
    keys = slice + 100
    ActiveSupport::Notifications.subscribed(count, "sql.active_record") do
      Bobbin.enqueue_all(Array.new(keys) { |i| [ LimitedJob, [ "k#{i}", 0 ] ] })
    end
    assert_equal 2, promotions.size, "#{keys} keys: two transactions"
    assert_equal keys, Bobbin::JobRecord.where(state: "ready").count

    Bobbin::JobRecord.update_all(state: "blocked")
    promotions.clear
    ActiveSupport::Notifications.subscribed(count, "sql.active_record") { assert_equal keys, Bobbin::Store.promote_due }
    assert_equal 2, promotions.size
  end

  # A promotion reads its key's waiting jobs, then updates them; an operator's discard committed in between (it takes no
  # key lock) must stay discarded. PostgreSQL re-checks a row a concurrent transaction changed against the UPDATE's
  # own WHERE, so that WHERE must say the row is still blocked.
  test "PostgreSQL: a blocked job discarded while a promotion of its key waits for the row stays discarded" do
    skip_unless_postgres
    2.times { |i| LimitedJob.enqueue("race", i) }
    blocked = LimitedJob.enqueue("race", 2)
    Bobbin::JobRecord.where(concurrency_key: "LimitedJob/race", state: "ready").limit(1).update_all(state: "succeeded") # a slot frees
    discarded = Queue.new
    commit = Queue.new
    operator = Thread.new do
      Bobbin::Record.connection_pool.with_connection do
        Bobbin::Record.transaction do
          discarded << Bobbin::Operator.discard(blocked, by: "ann")
          commit.pop
        end
      end
    end
    assert discarded.pop, "the operator's discard"
    promotion = Thread.new { Bobbin::Store.promote_keys([ "LimitedJob/race" ]) }
    waiting = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%UPDATE bobbin_jobs SET state = ''ready''%'"
    wait_for("the promotion waiting for the discarded row") { Bobbin::Record.with_connection { |c| c.select_value(waiting) }.to_i.positive? }
    commit << true
    operator.join
    assert_equal 0, promotion.value, "nothing left to let through"
    assert_equal "discarded", Bobbin::JobRecord.where(id: blocked).pick(:state)
  ensure
    commit&.<< true
    operator&.join
  end
end

# Sleeps, one at a time.
class SleepingLimitedJob
  include Bobbin::Job
  bobbin_options retries: 0, concurrency: { to: 1, key: ->(_seconds) { "one" } }

  def perform(seconds) = sleep(seconds)
end
