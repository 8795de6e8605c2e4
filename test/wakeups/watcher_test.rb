# frozen_string_literal: true

require "test_helper"

# SQLite's watcher reads PRAGMA data_version every 5 ms while the file changes; a quiet database is read 20 times a
# second, not 200 (an idle worker spent ~2 % of a core on it; a trial). The other-process pickup test shows a job
# enqueued after a quiet spell still starts without a poll.
class WatcherTest < Bobbin::TestCase
  test "the watcher looks every 5 ms after a change, backing off to every 50 ms over a quiet second" do
    watcher = Bobbin::Wakeups::Watcher.new(Bobbin::Record.connection_db_config)
    waits = [ 0, 0.05, 0.5, 1, 60 ].map { |quiet| watcher.send(:wait, quiet).round(4) }
    assert_equal [ 0.005, 0.005, 0.025, 0.05, 0.05 ], waits
    slow = Bobbin::Wakeups::Watcher.new(Bobbin::Record.connection_db_config, interval: 0.2)
    assert_equal [ 0.2 ], [ 0, 60 ].map { |quiet| slow.send(:wait, quiet) }.uniq, "a longer interval given stays as it is"
  end
end

# The watcher's look, between its read of PRAGMA data_version and its read of the new jobs, on a database in rollback
# journal mode (`pragmas: { journal_mode: delete }`), where a reader waits behind another connection's exclusive lock
# and, past its busy timeout, fails. Another process commits the resume of queue "hook" and a job of queue "work" in one
# transaction; the watcher hears the resume first (from its read of the paused queues, in between) and the probe
# hooked there acts at that moment, on the watcher's own thread, before the watcher reads the new jobs.
class WatcherLookTest < Bobbin::TestCase
  # Hears what the watcher announces; at the first resume of "hook", runs `on_resume` (on the watcher's thread).
  class Probe
    def initialize(&on_resume) = (@lock = Mutex.new; @queues = []; @on_resume = on_resume)

    def notice(queues, _at, resumed: false)
      hook, @on_resume = @on_resume, nil if resumed && queues&.include?("hook")
      hook&.call
      @lock.synchronize { @queues.concat(queues || [ "*" ]) }
    end

    def heard?(queue) = @lock.synchronize { @queues.include?(queue) }
  end

  HELPER = <<~'RUBY'
    Bobbin::Record.establish_connection(adapter: "sqlite3", database: ARGV.first, timeout: 20_000, pragmas: { journal_mode: "delete" })
    require "./test/support/jobs"
    lock = SQLite3::Database.new(ARGV.first)
    lock.busy_handler_timeout = 20_000
    $stdout.sync = true
    while (line = $stdin.gets)
      case line.chomp
      when "resume and enqueue" then Bobbin::Record.transaction { Bobbin.resume("hook"); Bobbin.enqueue_all([ [ SleepJob, [ 0 ], { queue: "work" } ] ]) }
      when "resume" then Bobbin.resume("hook")
      when /\Aenqueue (\w+)/ then Bobbin.enqueue_all([ [ SleepJob, [ 0 ], { queue: $1 } ] ])
      when "lock" then lock.execute("BEGIN EXCLUSIVE")
      when "unlock" then lock.execute("ROLLBACK")
      end
      puts "done"
    end
  RUBY

  # A rollback-journal database of its own, with queue "hook" paused and a process that writes to it as told; yields
  # a lambda telling that process what to do (it returns once done).
  def with_other_process
    skip("SQLite only") if postgres?
    Dir.mktmpdir("bobbin-watcher") do |dir|
      path = File.join(dir, "jobs.sqlite3")
      Bobbin::Record.establish_connection(adapter: "sqlite3", database: path, timeout: 100, pragmas: { journal_mode: "delete" })
      Bobbin.migrate!
      assert_equal "delete", Bobbin::Record.connection.select_value("PRAGMA journal_mode")
      Bobbin.pause("hook")
      IO.popen([ *ruby, "-Ilib", "-rbobbin", "-e", HELPER, path ], "r+", chdir: ROOT) do |helper|
        yield ->(command) { helper.puts(command); assert_equal "done", helper.gets&.chomp, "the other process did #{command}" }
      ensure
        helper.close_write
      end
    ensure
      Bobbin::Wakeups.unsubscribe(@probe) if @probe
      Bobbin::Record.remove_connection
    end
  end

  def watch(probe)
    Bobbin::Wakeups.subscribe(@probe = probe)
    wait_for("the watcher to read the paused queues") { Bobbin::Wakeups.paused?("hook") }
  end

  test "SQLite: a look that fails behind another process's lock is made again, and the job it was for is announced" do
    with_other_process do |other|
      watch(Probe.new { other.call("lock") }) # the watcher's read of the new jobs waits behind it, then fails
      other.call("resume and enqueue")
      wait_for("the watcher to hear the resume") { @probe.heard?("hook") }
      sleep(1) # ten times the watcher's busy timeout: its read gave up meanwhile
      other.call("unlock") # nothing commits after this
      assert wait_for("the job of queue work to be announced (nothing else commits)", timeout: 20) { @probe.heard?("work") }
    end
  end

  # The watcher could not start (its first reads failed behind another process's lock, past its busy timeout) and
  # stopped for good: a job enqueued by another process later waited for a poll, in every later enqueue too.
  test "SQLite: a watcher that could not read the database tries again, and announces what other processes enqueue" do
    with_other_process do |other|
      bobbin_log do |log|
        other.call("lock")
        Bobbin::Wakeups.subscribe(@probe = Probe.new)
        wait_for("the watcher to fail behind the lock") { log.call.include?("cannot watch the SQLite database") }
        other.call("unlock")
      end
      other.call("enqueue work")
      assert wait_for("the workers to be woken for it (a job of queue work, or any queue)", timeout: 20) { @probe.heard?("work") || @probe.heard?("*") }
      other.call("enqueue later")
      assert wait_for("the next job, of queue later, to be announced", timeout: 20) { @probe.heard?("later") }
    end
  end

  # A commit that lands after the watcher read data_version and before it read the new jobs is in what it reads then
  # (and one that lands after that read changes the version from the one the look keeps, so the next look reads it).
  test "SQLite: a job committed between the watcher's read of the version and its read of the new jobs is announced" do
    with_other_process do |other|
      watch(Probe.new { other.call("enqueue work") })
      other.call("resume") # heard in the watcher's look, which reads the new jobs after the probe's enqueue committed
      wait_for("the watcher to hear the resume") { @probe.heard?("hook") }
      assert wait_for("a job of queue work to be announced", timeout: 20) { @probe.heard?("work") }
    end
  end
end
