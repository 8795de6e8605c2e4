# frozen_string_literal: true

# Job classes the tests (and the worker processes they start) run.
require "fiddle"
require "net/http"
require "zlib"

# Records, from inside jobs, how many ran at once and what ran: no inference from timing.
module Recorder
  @lock = Mutex.new

  class << self
    attr_reader :max_in_flight, :calls

    def reset
      @lock.synchronize { @in_flight = 0; @max_in_flight = 0; @calls = []; @started = {} }
    end

    # When the job recorded as `name` began its work (epoch seconds, this host's clock: a database on this host keeps
    # the same). A row's started_at says when it was claimed, or its run_at for a job claimed ahead of it.
    def started(name) = @lock.synchronize { @started[name] }

    def around(name)
      @lock.synchronize do
        @started[name] ||= Process.clock_gettime(Process::CLOCK_REALTIME)
        @in_flight += 1
        @max_in_flight = [ @max_in_flight, @in_flight ].max
        @calls << name
      end
      yield
    ensure
      @lock.synchronize { @in_flight -= 1 }
    end
  end
  reset
end

class LedgerEntry < ActiveRecord::Base
  self.table_name = "bobbin_test_ledger"
end

class SleepJob
  include Bobbin::Job
  bobbin_options retries: 0

  def perform(seconds, key = nil)
    Recorder.around(key) { sleep(seconds) }
    LedgerEntry.create!(key: key, pid: Process.pid) if key
  end
end

# Holds its worker until the test opens its gate (creates the file GATE), then records KEY: it stays running for as
# long as the test needs, however slow the machine, where a fixed sleep can end before the test looks. The gate is
# a file, not a row: on SQLite a write from the test could wait out the busy timeout behind the workers' writes.
class GatedJob
  include Bobbin::Job
  bobbin_options retries: 0

  # A gate for this test process (an absolute path; closed until opened).
  def self.gate(name) = File.expand_path("../../tmp/gate-#{name}-#{Process.pid}", __dir__).tap { |path| FileUtils.rm_f(path) }

  # Lets every job waiting at `gate` finish.
  def self.open_gate(gate) = FileUtils.touch(gate)

  # How many jobs have started waiting at `gate`. A job counts as running from its claim, before its worker starts
  # it, and a signal sent in between finds it only claimed ahead (TSTP and TERM hand it back, TTIN has no stack).
  def self.started(gate) = Dir["#{gate}.started-*"].size

  def perform(gate, key)
    FileUtils.touch("#{gate}.started-#{key}")
    sleep(0.05) until File.exist?(gate)
    LedgerEntry.create!(key: key, pid: Process.pid)
  end
end

class StartEntry < ActiveRecord::Base
  self.table_name = "bobbin_test_starts"
end

# Records each start, sleeps, then records its one allowed finish: a crash between the two shows as a second start.
# Deaf to every interrupt, its thread's kill too, as a C call that never checks for one, until the test opens its gate
# (creates the file GATE); records each start.
class DeafJob
  include Bobbin::Job
  bobbin_options retries: 0

  def perform(key, gate)
    StartEntry.create!(key: key)
    Thread.handle_interrupt(Object => :never) { sleep(0.05) until File.exist?(gate) }
  end
end

class CrashSafeJob
  include Bobbin::Job
  bobbin_options retries: 0

  def perform(seconds, key)
    StartEntry.create!(key: key)
    sleep(seconds)
    LedgerEntry.create!(key: key, pid: Process.pid)
  end
end

# Takes the process's TERM, as a gem that traps it at load does: the handler only records that it ran.
class TrapTermJob
  include Bobbin::Job
  bobbin_options retries: 0

  def perform(mark)
    Signal.trap("TERM") { File.write(mark, "the job's handler ran") }
    LedgerEntry.create!(key: "trapped", pid: Process.pid)
  end
end

# Ends its worker's loop from a thread of its own, as an app that sets Thread.abort_on_exception does: once `running`
# jobs have started, the thread's error is raised into the main thread.
class AbortingThreadJob
  include Bobbin::Job
  bobbin_options retries: 0

  def perform(running)
    sleep 0.05 until StartEntry.count >= running
    Thread.abort_on_exception = true
    Thread.new { raise "boom from the job's thread" }
    sleep 5
  end
end

# Survives database outages: retried quickly, and its ledger write is idempotent.
class OutageSafeJob
  include Bobbin::Job
  bobbin_options retries: 25, backoff: 0.05

  def perform(key)
    sleep(0.01)
    LedgerEntry.upsert({ key: key, pid: Process.pid }, unique_by: :key)
  end
end

# Chaos: records each start, works a little, records its finish idempotently; survives outages by retrying.
class ChaosJob
  include Bobbin::Job
  bobbin_options retries: 25, backoff: 0.05

  def perform(seconds, key)
    StartEntry.create!(key: key)
    sleep(seconds)
    LedgerEntry.upsert({ key: key, pid: Process.pid }, unique_by: :key)
  end
end

class LedgerJob
  include Bobbin::Job
  bobbin_options retries: 0

  def perform(key) = LedgerEntry.create!(key: key, pid: Process.pid)
end

# One statement outside a transaction (no BEGIN for Active Record to retry on a fresh connection), no retries.
class LedgerUpsertJob
  include Bobbin::Job
  bobbin_options retries: 0

  def perform(key) = LedgerEntry.upsert({ key: key, pid: Process.pid }, unique_by: :key)
end

class SessionCountingJob
  include Bobbin::Job
  bobbin_options retries: 0

  class << self
    # `since`: the database's time as the test began (a String from PostgreSQL).
    attr_accessor :peak, :since
  end

  def perform(key)
    Recorder.around(key) { sleep(0.05) }
    sessions = LedgerEntry.with_connection { |c| c.select_value(SESSIONS, nil, [ self.class.since ]) if c.adapter_name.match?(/postg/i) }
    self.class.peak = [ self.class.peak.to_i, sessions.to_i ].max
    LedgerEntry.create!(key: key, pid: Process.pid)
  end

  # This process's own sessions (TestDatabase names them), not autovacuum's or another client's, opened since the
  # test began: a session an earlier test closed stays in pg_stat_activity until its backend has exited.
  SESSIONS = "SELECT count(*) FROM pg_stat_activity WHERE application_name = current_setting('application_name') " \
             "AND backend_start >= $1::timestamptz"
end

class FlakyJob
  include Bobbin::Job
  bobbin_options retries: 3, backoff: 0

  # Fails until it has been called `failures` times for `key`, then records success.
  def perform(key, failures)
    Recorder.around(key) { }
    raise ArgumentError, "flaky #{key}" if Recorder.calls.count(key) <= failures

    LedgerEntry.create!(key: key, pid: Process.pid)
  end
end

class NotImplementedJob
  include Bobbin::Job
  bobbin_options retries: 0

  def perform = raise(NotImplementedError, "not yet")
end

class NotAJob
  def perform = nil
end

# Jobs that misbehave: each must fail (or stop) alone, never take its pool or process down with it.
class ExitJob
  include Bobbin::Job
  bobbin_options retries: 0

  def perform(how)
    case how
    when "exit" then exit
    when "abort" then abort("aborting from a job")
    when "interrupt" then raise Interrupt
    when "stop" then raise Async::Stop
    when "shutdown" then raise Bobbin::Worker::Shutdown
    when "thread_exit" then Thread.exit
    when "thread_kill" then Thread.current.kill
    when "fiber_kill" then Fiber.current.kill
    end
  end
end

# Writes a ledger row inside a transaction it opens and never closes (`how` "leave"), or in the usual way. "within"
# opens it inside `with_connection`, which checks the connection back in as its block ends ("within-raise": then raises).
class TransactionLeavingJob
  include Bobbin::Job
  bobbin_options retries: 0

  def perform(how, key)
    return LedgerEntry.with_connection { |connection| within(connection, how, key) } if how.start_with?("within")

    LedgerEntry.connection.begin_transaction if how == "leave"
    LedgerEntry.create!(key: key, pid: Process.pid)
  end

  def within(connection, how, key)
    connection.begin_transaction
    LedgerEntry.create!(key: key, pid: Process.pid)
    raise "gave up" if how == "within-raise"
  end
end

# Checks out a connection of its own (`connection_pool.checkout`) and never checks it in; "transaction": writes its row
# in a transaction it leaves open on it, else writes it there in the usual way.
class CheckoutKeepingJob
  include Bobbin::Job
  bobbin_options retries: 0

  def perform(how, key)
    connection = LedgerEntry.connection_pool.checkout
    connection.begin_transaction if how == "transaction"
    connection.insert("INSERT INTO bobbin_test_ledger (#{connection.quote_column_name('key')}) VALUES (#{connection.quote(key)})")
  end
end

# ExitJob on a fiber pool's thread lane.
class LaneExitJob < ExitJob
  bobbin_options runs_on: :thread
end

# Forks a process and waits for it: with a block ("block"), or without one, its child coming back from perform as if
# the job were done ("bare"); records the child's exit status under `key`. The wait is a blocking one: async 2.46's
# scheduler wait for a child sometimes returns nil when several fibers wait for children at once (plain async too).
class ForkingJob
  include Bobbin::Job
  bobbin_options retries: 0

  def perform(how, key)
    LedgerEntry.connection.select_value("SELECT 1") # the job's own pooled session, in use across the fork
    pid = how == "block" ? fork { 1 + 1 } : fork
    if pid.nil? # the child: back to whoever called perform
      raise "the child's code failed" if how == "raising"

      return
    end

    LedgerEntry.create!(key: "#{key}:#{Fiber.blocking { Process.wait2(pid) }.last.exitstatus}", pid: Process.pid)
  end
end

# Leaves a background process behind, as `system("cmd &")` does: its shell exits at once, and the process, orphaned,
# goes to pid 1 (or a subreaper) to be waited for once it exits.
class BackgroundChildJob
  include Bobbin::Job
  bobbin_options retries: 0

  def perform(key)
    system("sh", "-c", "sleep 0.1 & exit 0", exception: true)
    LedgerEntry.create!(key: key, pid: Process.pid)
  end
end

# Ignores every interrupt and keeps running until its process is gone; records each start.
class StubbornJob
  include Bobbin::Job
  bobbin_options retries: 0

  def perform(key)
    StartEntry.create!(key: key)
    loop do
      sleep(0.1)
    rescue Exception # rubocop:disable Lint/RescueException -- the point of this job
      nil
    end
  end
end

# Kills its own process (`exit!` skips every ensure and at_exit), like a C extension crash would.
class PoisonJob
  include Bobbin::Job
  bobbin_options retries: 0

  def perform(key)
    StartEntry.create!(key: key)
    sleep(0.2)
    exit!(9)
  end
end

# Returns at once, leaving a watchdog thread that raises `error` ("Interrupt" or "Exception", neither a StandardError)
# into the thread the job ran on a moment later: in a fiber pool, the thread of its worker's loop.
class WatchdogRaisingJob
  include Bobbin::Job
  bobbin_options retries: 0

  def perform(error)
    target = Thread.current
    Thread.new do
      sleep(0.3)
      target.raise(Object.const_get(error), "the watchdog's #{error}")
    end
  end
end

# Blocks the event loop (a C call that releases the GVL but does not yield to the fiber scheduler).
class LoopBlockingJob
  include Bobbin::Job
  bobbin_options retries: 0

  def perform(seconds, key)
    require "fiddle"
    usleep = Fiddle::Function.new(Fiddle::Handle::DEFAULT["usleep"], [ Fiddle::TYPE_INT ], Fiddle::TYPE_INT)
    usleep.call(Integer(seconds * 1_000_000))
    LedgerEntry.create!(key: key, pid: Process.pid)
  end
end

# Writes pairs of ledger rows in transactions, each row naming the process: an interrupt must never leave half a
# pair, and a job handed back must have stopped writing before another process starts it again.
class TransactionLoopJob
  include Bobbin::Job
  bobbin_options retries: 0

  # Stopped midway, it takes half a second to unwind, then records (a StartEntry) whether its row was still held by
  # this process: a job handed back before it stopped could start again elsewhere while it still wrote.
  def perform(key, pairs)
    pairs.times do |i|
      LedgerEntry.transaction do
        LedgerEntry.create!(key: "#{key}/#{i}/#{Process.pid}/a", pid: Process.pid)
        LedgerEntry.create!(key: "#{key}/#{i}/#{Process.pid}/b", pid: Process.pid)
      end
    end
  rescue Exception # rubocop:disable Lint/RescueException -- whatever stopped it, it unwinds, then lets it go on
    sleep(0.5)
    unwound(key)
    raise
  end

  # On a session of its own: the job's is the one its stop interrupted mid-transaction, which the worker throws away.
  def unwound(key)
    session = LedgerEntry.connection_db_config.new_connection
    state, claimed_by = session.select_rows("SELECT state, claimed_by FROM bobbin_jobs WHERE arguments LIKE #{session.quote("%\"#{key}\"%")}").first
    held = state == "running" && session.select_value("SELECT pid FROM bobbin_processes WHERE id = #{Integer(claimed_by)}").to_i == Process.pid
    session.execute("INSERT INTO bobbin_test_starts (key) VALUES (#{session.quote("#{key}/unwound/#{Process.pid}/#{held ? 'held' : 'let go'}")})")
  ensure
    session&.disconnect!
  end
end

# A job limited to two running at once per key. Inside the job, the key's running count is read from the database
# as the job starts (an atomic increment), so the test sees what really ran together, not an inference from timing.
class LimitedJob
  include Bobbin::Job
  bobbin_options retries: 0, concurrency: { to: 2, key: ->(key, _n) { key } }

  def perform(key, number) = ConcurrencyCounter.record(key, number)
end

# Waits long; interrupted, it takes `unwind` seconds to clean up, then writes `path`.
class SlowUnwindJob
  include Bobbin::Job

  def perform(path, unwind)
    sleep(120)
  ensure
    sleep(unwind)
    File.write(path, "unwound")
  end
end

# Two classes sharing one concurrency key ("shared/…") with different limits.
class StrictSharedJob
  include Bobbin::Job
  bobbin_options retries: 0, concurrency: { to: 1, key: ->(key) { key }, group: "shared" }

  def perform(_key) = nil
end

class LooseSharedJob < StrictSharedJob
  bobbin_options concurrency: { to: 3, key: ->(key) { key }, group: "shared" }
end

# Per-key running counts, kept in the database so every worker process shares them.
module ConcurrencyCounter
  module_function

  def create_table
    ActiveRecord::Base.connection_pool.with_connection do |connection|
      connection.create_table(:bobbin_test_counters, id: false, if_not_exists: true) do |t|
        t.string :key, null: false
        t.integer :running, null: false, default: 0
      end
      connection.execute("DELETE FROM bobbin_test_counters")
    end
  end

  def add_keys(keys)
    ActiveRecord::Base.connection_pool.with_connection do |connection|
      keys.each { |key| connection.execute("INSERT INTO bobbin_test_counters (key, running) VALUES (#{connection.quote(key)}, 0)") }
    end
  end

  # Records in the ledger how many jobs of `key` run while this one does (20 ms), this one included.
  def record(key, number)
    running = enter(key)
    LedgerEntry.create!(key: "#{key}/#{number} running=#{running}", pid: Process.pid)
    sleep(0.02)
  ensure
    leave(key) if running
  end

  # The running counts the jobs recorded, one a job.
  def seen = LedgerEntry.pluck(:key).map { |key| key[/running=(\d+)/, 1].to_i }

  def enter(key) = change(key, "+")

  def leave(key) = change(key, "-")

  def change(key, sign)
    ActiveRecord::Base.connection_pool.with_connection do |connection|
      sql = "UPDATE bobbin_test_counters SET running = running #{sign} 1 WHERE key = #{connection.quote(key)} RETURNING running"
      connection.select_value(sql).to_i
    end
  end
end

# Holds its key's only slot until released: records its start (with its pid), then sleeps.
class HolderJob
  include Bobbin::Job
  bobbin_options retries: 0, concurrency: { to: 1, key: ->(_key, _seconds) { "shared" }, duration: 2 }

  def perform(key, seconds)
    LedgerEntry.create!(key: "#{key} started", pid: Process.pid)
    sleep(seconds)
    LedgerEntry.create!(key: "#{key} finished", pid: Process.pid)
  end
end

# A HolderJob whose slot outlasts any test's wait unless something frees it.
class LongHolderJob < HolderJob
  bobbin_options concurrency: { to: 1, key: ->(_key, _seconds) { "long" }, duration: 600 }
end

# Records a setting as the worker that runs it sees it.
class SettingJob
  include Bobbin::Job

  def perform(name) = LedgerEntry.create!(key: "#{name}=#{Bobbin.config.public_send(name)}", pid: Process.pid)
end

# Records that it ran (recurring tests enqueue it every tick).
class TickJob
  include Bobbin::Job
  bobbin_options retries: 0, queue: "ticks"

  def perform(label) = LedgerEntry.create!(key: "tick #{label} #{SecureRandom.uuid}", pid: Process.pid)
end

# Fiber safety. Each records where it ran: "fiber" under a fiber scheduler, "thread" on a thread lane or pool.
module Blocking
  # libc usleep: a C call that releases the GVL but is not offload-safe, so it holds a fiber pool's event loop.
  USLEEP = Fiddle::Function.new(Fiddle::Handle::DEFAULT["usleep"], [ Fiddle::TYPE_INT ], Fiddle::TYPE_INT)
  # The same call keeping the GVL meanwhile, as some extensions' blocking calls do: no other thread runs until it returns.
  USLEEP_KEEPING_GVL = Fiddle::Function.new(Fiddle::Handle::DEFAULT["usleep"], [ Fiddle::TYPE_INT ], Fiddle::TYPE_INT, need_gvl: true)

  def self.record(key) = LedgerEntry.create!(key: "#{key}/#{Fiber.scheduler ? 'fiber' : 'thread'}", pid: Process.pid)
end

class BlockingCallJob
  include Bobbin::Job
  bobbin_options retries: 0

  def perform(ms, key)
    Blocking::USLEEP.call(ms * 1000) # BlockingCallJob's stall
    Blocking.record(key)
  end
end

# Makes the same call in a task of its own (`Async { }`, as an Async::Barrier's fan-out or a client runs its work).
class ChildTaskBlockingJob
  include Bobbin::Job
  bobbin_options retries: 0

  def perform(ms, key)
    Async { Blocking::USLEEP.call(ms * 1000) }.wait # ChildTaskBlockingJob's stall
    Blocking.record(key)
  end
end

# Leaves a task running that swallows its stop and carries on (a pinger that must never die): STOPS gets
# :swallowed for each stop it ignored and :ended once it is gone.
class StubbornTaskJob
  include Bobbin::Job
  bobbin_options retries: 0
  STOPS = Thread::Queue.new

  def perform
    Async do
      sleep
    rescue Exception # rubocop:disable Lint/RescueException
      STOPS << :swallowed
      retry
    ensure
      STOPS << :ended
    end
  end
end

# Records its start, then waits in a C call that neither its interrupt nor Thread#kill cuts short (libc usleep, GVL
# released, no unblocking function): a thread pool's job that outlives its worker's stop.
class CCallJob
  include Bobbin::Job
  bobbin_options retries: 0

  def perform(ms, key)
    StartEntry.create!(key: key)
    Blocking::USLEEP.call(ms * 1000)
  end
end

class GvlKeepingCallJob
  include Bobbin::Job
  bobbin_options retries: 0

  # `wait_first`: a short wait (a query's) before the call; the call is the job's last stretch all the same.
  def perform(ms, wait_first = false)
    sleep(0.02) if wait_first
    Blocking::USLEEP_KEEPING_GVL.call(ms * 1000)
  end
end

# The same call, on the thread lane.
class LaneBlockingCallJob < BlockingCallJob
  bobbin_options runs_on: :thread
end

# Busy in Ruby (no I/O, no yield) for `ms` of its thread's CPU time (a loaded machine stretches the wall time).
class BusyRubyJob
  include Bobbin::Job
  bobbin_options retries: 0

  # `allocate`: makes strings as it goes (its garbage sets off GC, its own doing too: a quarter of its time or so; Time
  # objects set off a twentieth, under 100 ms in a CI run, too little for the test to tell counted from excused).
  def perform(ms, key, allocate = false)
    deadline = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) + ms / 1000.0
    (allocate ? Array.new(20) { +"" } : nil) while Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) < deadline # BusyRubyJob's stall
    Blocking.record(key)
  end
end

# Deflates `bytes` of random data: zlib's deflate is offload-safe on Ruby >= 3.4.
class DeflateJob
  include Bobbin::Job
  bobbin_options retries: 0

  def perform(bytes, key)
    Zlib.deflate(Random.new(1).bytes(bytes))
    Blocking.record(key)
  end
end

# A 50 ms HTTP call to the fake server (Net::HTTP: yields to the event loop while it waits).
class HttpJob
  include Bobbin::Job
  bobbin_options retries: 0

  def perform(url, key)
    Net::HTTP.get_response(URI(url)).value
    Blocking.record(key)
  end
end

# Waits until the test lets it go (GATE, in this process), and ends without waiting again.
class LetGoJob
  include Bobbin::Job
  bobbin_options retries: 0
  GATE = Thread::Queue.new

  def perform = GATE.pop
end

# Does nothing.
class NoopJob
  include Bobbin::Job
  bobbin_options retries: 0

  def perform = nil
end

# Makes garbage in small steps, yielding between them: GC pressure that is no job's stall.
class GarbageJob
  include Bobbin::Job
  bobbin_options retries: 0

  def perform(steps)
    steps.times do
      Array.new(2_000) { |i| "garbage #{i}" }
      sleep(0)
    end
  end
end

# Sleeps on the thread lane.
class LaneSleepJob < SleepJob
  bobbin_options runs_on: :thread
end

# Busy in Ruby forever: it never yields, so a fiber pool's loop (and its shutdown) never runs again.
class SpinJob
  include Bobbin::Job
  bobbin_options retries: 0

  # Spins for good: `after` seconds after it started, or (a String) once the file `after` exists; it waits with
  # fiber-aware sleeps until then.
  def perform(key, after = 0)
    StartEntry.create!(key: key)
    if after.is_a?(String)
      sleep(0.01) until File.exist?(after)
    else
      sleep(after)
    end
    loop { nil }
  end
end

# Records what it finds in fiber storage and fiber-locals as it starts, then leaves its own key in both.
class LeftoverJob
  include Bobbin::Job

  class << self
    attr_reader :found

    def reset = @found = Queue.new
  end
  reset

  def perform(key)
    self.class.found << [ key, Fiber[:leftover], Thread.current[:leftover], ActiveSupport::IsolatedExecutionState[:leftover], ActiveRecord::Base.current_role ]
    Fiber[:leftover] = key
    Thread.current[:leftover] = key
    ActiveSupport::IsolatedExecutionState[:leftover] = key
    ActiveRecord::Base.connecting_to(role: :reading) # a replica for the rest of the job, as an app can ask (no block)
  end
end

# Holds a connection across a wait, as a transaction around an HTTP call does.
class TransactionSleepJob
  include Bobbin::Job
  bobbin_options retries: 0

  def perform(key, seconds)
    LedgerEntry.transaction do
      LedgerEntry.create!(key: key, pid: Process.pid)
      sleep(seconds)
    end
  end
end

# Enqueues a job inside a transaction on Bobbin's database, then sleeps `seconds` in it: a connection of Bobbin's own
# pool (a queue database of its own, connects_to) held as long.
class QueueTransactionSleepJob
  include Bobbin::Job
  bobbin_options retries: 0

  def perform(key, seconds)
    Bobbin::Record.transaction do
      LedgerJob.enqueue(key)
      sleep(seconds)
    end
  end
end

# The same, on a fiber pool's thread lane.
class LaneTransactionSleepJob < TransactionSleepJob
  bobbin_options runs_on: :thread
end

# Starts an Async task that never ends, and returns while it runs (a client's background task left behind).
class ChildTaskJob
  include Bobbin::Job
  bobbin_options retries: 0

  def perform(transient = false) = Async(transient: transient) { sleep }
end

# Starts a task that ends after `seconds` (recording `key`, or raising `error`) and returns at once: a stream fanned out
# with `Async { }`.
class FannedOutJob
  include Bobbin::Job
  bobbin_options retries: 0

  def perform(seconds, key, error = nil)
    Async do
      sleep(seconds)
      raise ArgumentError, error if error

      LedgerEntry.create!(key: key)
    end
  end
end

# Records its start, then sleeps: nothing written at its end (a database that stopped answering does not hold it).
class StartThenSleepJob
  include Bobbin::Job
  bobbin_options retries: 0

  def perform(seconds, key)
    StartEntry.create!(key: key)
    sleep(seconds)
  end
end

# Writes its row on a pooled connection (one statement, no transaction), then sleeps, holding its slot.
class UpsertThenSleepJob
  include Bobbin::Job
  bobbin_options retries: 0

  def perform(key, seconds)
    LedgerEntry.upsert({ key: key, pid: Process.pid }, unique_by: :key)
    sleep(seconds)
  end
end
