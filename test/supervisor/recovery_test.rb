# frozen_string_literal: true

require "test_helper"

class RecoveryTest < Bobbin::TestCase
  def dead_process_with_jobs(attempts:, jobs: 3)
    process = Bobbin::ProcessRecord.register(kind: "worker", name: "ghost")
    process.update_columns(last_heartbeat_at: Time.now.utc - 3600)
    ids = Bobbin.enqueue_all(Array.new(jobs) { |i| [ SleepJob, [ 0, "k#{i}" ] ] })
    Bobbin::JobRecord.where(id: ids).update_all(state: "running", claimed_by: process.id, attempts: attempts)
    [ process, ids ]
  end

  def jobs(ids) = Bobbin::JobRecord.where(id: ids).order(:id)

  test "a process silent past the threshold is pruned and its jobs return to ready, with the reason recorded" do
    process, ids = dead_process_with_jobs(attempts: 1)
    alive = Bobbin::ProcessRecord.register(kind: "worker", name: "alive")
    assert_equal 3, Bobbin::Recovery.prune(threshold: 60)
    assert_equal [ alive.id ], Bobbin::ProcessRecord.pluck(:id)
    jobs = Bobbin::JobRecord.where(id: ids)
    assert_equal [ "ready" ], jobs.distinct.pluck(:state)
    assert_equal [ "Bobbin::ProcessDied" ], jobs.distinct.pluck(:last_error_class)
    assert_match(/process #{process.id} \(pid #{process.pid} on .*\) stopped heartbeating while this job was running/, jobs.first.last_error_message)
    assert_equal 0, Bobbin::Recovery.prune(threshold: 60), "a second pass finds nothing"
  end

  test "a job alone in flight when its process died, having used its runs and its crash retries, is failed" do
    _, ids = dead_process_with_jobs(attempts: 1 + Bobbin.config.crash_retries, jobs: 1)
    Bobbin::Recovery.prune(threshold: 60)
    assert_equal [ [ "failed", 1 ] ], jobs(ids).pluck(:state, :crashes)
  end

  # retries: up to INT32.max - 1 is accepted (max_attempts INT32.max); PostgreSQL's `max_attempts + crash_retries` overflowed
  # its integer and every prune raised, so no dead process's jobs came back.
  test "a job that may run as often as max_attempts allows, alone in flight at a crash, is recovered" do
    _, ids = dead_process_with_jobs(attempts: 1, jobs: 1)
    other, other_ids = dead_process_with_jobs(attempts: 1, jobs: 2)
    Bobbin::JobRecord.where(id: ids).update_all(max_attempts: Bobbin::Client::Fields::INT32.max)
    assert_equal 3, Bobbin::Recovery.prune(threshold: 60)
    assert_equal [ [ "ready", 1, 1 ] ], jobs(ids).pluck(:state, :attempts, :crashes)
    assert_equal [ "ready" ] * 2, jobs(other_ids).pluck(:state)
    assert_not Bobbin::ProcessRecord.exists?(other.id)
  end

  test "several jobs in flight at a crash: none is blamed, all get their attempt back and count the crash" do
    _, ids = dead_process_with_jobs(attempts: 1 + Bobbin.config.crash_retries)
    Bobbin::Recovery.prune(threshold: 60)
    assert_equal [ [ "ready", Bobbin.config.crash_retries, 1 ] ] * 3, jobs(ids).pluck(:state, :attempts, :crashes)
  end

  test "a crash with a suspect in flight is blamed on the suspect alone" do
    _, ids = dead_process_with_jobs(attempts: 1 + Bobbin.config.crash_retries)
    Bobbin::JobRecord.where(id: ids.first).update_all(crashes: Bobbin::Recovery::SUSPECT)
    Bobbin::Recovery.prune(threshold: 60)
    assert_equal [ [ "failed", 3, 3 ], [ "ready", 2, 0 ], [ "ready", 2, 0 ] ], jobs(ids).pluck(:state, :attempts, :crashes)
  end

  # The recover event and the log named the jobs blamed as read before the UPDATE: a suspect its only silent worker
  # finished in between was named as charged with the crash, though its row was left as it finished (a review).
  test "the recover event and log name as blamed only the jobs the crash was charged to, not one finished in between" do
    process, ids = dead_process_with_jobs(attempts: 1)
    Bobbin::JobRecord.where(id: ids.first).update_all(crashes: Bobbin::Recovery::SUSPECT)
    other = Bobbin::Record.connection_db_config.new_connection
    finished = false
    finish = lambda do |*, payload| # the suspect's worker, only silent, records its outcome after the blame was read
      next if finished || !payload[:sql].match?(/\ASELECT "bobbin_jobs"."id", "bobbin_jobs"."crashes" FROM/)
      finished = true
      other.execute("UPDATE bobbin_jobs SET state = 'succeeded', finished_at = CURRENT_TIMESTAMP WHERE id = #{ids.first}")
    end
    events = []
    log = bobbin_log do
      ActiveSupport::Notifications.subscribed(->(event) { events << event.payload.slice(:ready, :failed, :blamed) }, "recover.bobbin") do
        ActiveSupport::Notifications.subscribed(finish, "sql.active_record") { assert_equal 2, Bobbin::Recovery.prune(threshold: 60) }
      end
    end
    assert finished, "the blame was read"
    assert_equal [ { ready: 2, failed: 0, blamed: [] } ], events
    assert_match(/process #{process.id} \(pid #{process.pid} on .*\) stopped heartbeating; 2 jobs returned to ready, 0 failed\n/, log)
    assert_equal %w[succeeded ready ready], jobs(ids).pluck(:state)
  ensure
    other&.disconnect!
  end

  test "right after this process could not reach the database, silent processes are not pruned" do
    process, ids = dead_process_with_jobs(attempts: 1)
    Bobbin::Recovery.unreachable!
    assert_equal 0, Bobbin::Recovery.prune(threshold: 60), "every live process was silent through the outage too"
    assert Bobbin::ProcessRecord.exists?(process.id)
    assert_equal [ "running" ], jobs(ids).pluck(:state).uniq
    process.update_columns(metadata: JSON.generate(alive_threshold: 0.3))
    sleep(0.4)
    assert_equal 3, Bobbin::Recovery.prune(threshold: 60), "once reachable for the silent process's whole threshold, its silence counts"
  end

  # A frozen database server (or a black-holed network) answers nothing and raises nothing: a housekeeping query hung
  # through a 100 s freeze and returned once it ended, before any other process could beat, and pruned a live worker
  # (a trial). A process that has not beaten for two heartbeat intervals does not judge anyone by their silence.
  test "after a stretch in which this process could not beat, silent processes are not pruned at once" do
    Bobbin.config.set(heartbeat_interval: 0.2, process_alive_threshold: 1)
    process, ids = dead_process_with_jobs(attempts: 1)
    Bobbin::Recovery.beat!
    sleep(0.6) # no beat for more than two heartbeat intervals: its statements hung
    assert_equal 0, Bobbin::Recovery.prune(threshold: 60), "every live process may have been stuck as long"
    assert_equal [ "running" ], jobs(ids).pluck(:state).uniq
    process.update_columns(metadata: JSON.generate(alive_threshold: 0.3))
    3.times do # beating again, on time, for the silent process's whole threshold
      Bobbin::Recovery.beat!
      sleep(0.15)
    end
    assert_equal 3, Bobbin::Recovery.prune(threshold: 60), "then its silence counts"

    process, ids = dead_process_with_jobs(attempts: 1)
    process.update_columns(metadata: JSON.generate(alive_threshold: 0.3))
    sleep(0.6)
    Bobbin::Recovery.beat! # a beat after the gap (the supervisor beats before it keeps house)
    assert_equal 0, Bobbin::Recovery.prune(threshold: 60), "the gap is noticed at the beat after it too"
  end

  test "each process is judged by the threshold it runs with, a row that does not say by this process's" do
    Bobbin.config.set(heartbeat_interval: 40, process_alive_threshold: 120)
    patient = Bobbin::ProcessRecord.register(kind: "worker", name: "beats every 40 s")
    Bobbin.config.set(heartbeat_interval: 10, process_alive_threshold: 45) # not the built-in 60
    old = Bobbin::ProcessRecord.register(kind: "worker", name: "an older Bobbin").tap { |record| record.update_columns(metadata: "{}") }
    assert_equal [ 120, 45 ], [ patient, old ].map { |record| record.reload.alive_threshold }
    ids = Bobbin.enqueue_all([ [ SleepJob, [ 0, "patient" ] ], [ SleepJob, [ 0, "old" ] ] ])
    Bobbin::JobRecord.where(id: ids[0]).update_all(state: "running", claimed_by: patient.id, attempts: 1)
    Bobbin::JobRecord.where(id: ids[1]).update_all(state: "running", claimed_by: old.id, attempts: 1)
    [ patient, old ].each { |record| record.update_columns(last_heartbeat_at: Time.now.utc - 50) }
    refute Bobbin::ProcessRecord.find(patient.id).then { |record| Bobbin::Operator::ProcessView.new(record, 1, Time.now.utc).stale? }
    assert_equal 1, Bobbin::Recovery.prune(threshold: 45), "50 s of silence is past this process's 45 s, not past 120 s"
    assert_equal [ [ "running", patient.id ], [ "ready", old.id ] ], Bobbin::JobRecord.where(id: ids).order(:id).pluck(:state, :claimed_by)
    refute Bobbin::Operator.release(ids[0], by: "test"), "its process is alive by its own threshold"
    patient.update_columns(last_heartbeat_at: Time.now.utc - 130)
    assert_equal 1, Bobbin::Recovery.prune(threshold: 45)
    assert_equal [ "ready" ], Bobbin::JobRecord.where(id: ids).distinct.pluck(:state)
  end

  # A host's whole Bobbin killed at once (kill -9 of its process group, an OOM kill of its container) leaves rows that
  # beat a moment ago: the next process of that host to keep house sees their pids gone and recovers them at once.
  test "a process of this host's pid space whose pid is gone is recovered at once, however recent its heartbeat" do
    dead = dead_pid
    living = Process.spawn("sleep", "30")
    rows = { dead: dead, living: living, elsewhere: dead, older: dead }.to_h do |name, pid|
      process, ids = dead_process_with_jobs(attempts: 1, jobs: 1)
      process.update_columns(pid: pid, last_heartbeat_at: Bobbin::ProcessRecord.now)
      [ name, [ process, ids.first ] ]
    end
    assert_equal Bobbin::ProcessRecord.pid_space, rows[:dead].first.reload.pid_space, "its row says where its pid means something"
    rows[:elsewhere].first.update_columns(metadata: JSON.generate(alive_threshold: 60, pid_space: "another-boot/pid:[1]")) # another container
    rows[:older].first.update_columns(metadata: JSON.generate(alive_threshold: 60)) # a Bobbin before pid spaces
    log = bobbin_log { assert_equal 1, Bobbin::Recovery.prune(threshold: 600) }
    assert_match(/process #{rows[:dead].first.id} \(pid #{dead} on #{Regexp.escape(Socket.gethostname)}\) is gone \(no such process\); 1 job returned to ready/, log)
    states = rows.transform_values { |(_, id)| Bobbin::JobRecord.find(id).state }
    assert_equal({ dead: "ready", living: "running", elsewhere: "running", older: "running" }, states)
    assert_equal [ rows[:living], rows[:elsewhere], rows[:older] ].map { |(process, _)| process.id }.sort, Bobbin::ProcessRecord.order(:id).pluck(:id)
  ensure
    Process.kill(:KILL, living) && Process.wait(living) if living
  end

  test "an async-mode process's pools are recovered as one process: a job alone in its pool beside others in flight is not blamed" do
    supervisor = Bobbin::ProcessRecord.register(kind: "supervisor", name: "supervisor")
    pid = dead_pid
    pools = [ 3, 1 ].map do |jobs|
      process, ids = dead_process_with_jobs(attempts: 1, jobs: jobs)
      process.update_columns(pid: pid, supervisor_id: supervisor.id)
      ids
    end
    supervisor.update_columns(pid: pid)
    log = bobbin_log { assert_equal 4, Bobbin::Recovery.prune(threshold: 600) }
    assert_equal [ [ "ready", 0, 1 ] ] * 4, jobs(pools.flatten).pluck(:state, :attempts, :crashes), "all four given their attempt back"
    refute_match(/counts against/, log)
    assert_equal 1, log.scan(/is gone \(no such process\); 4 jobs returned to ready/).size, log
  end

  test "running jobs whose process row is gone are recovered too" do
    process, ids = dead_process_with_jobs(attempts: 1)
    process.delete
    assert_equal 3, Bobbin::Recovery.prune(threshold: 60)
    assert_equal [ "ready" ], Bobbin::JobRecord.where(id: ids).distinct.pluck(:state)
  end

  test "running jobs that name no process are recovered too" do
    _, ids = dead_process_with_jobs(attempts: 1, jobs: 2)
    Bobbin::JobRecord.where(id: ids).update_all(claimed_by: nil)
    Bobbin::ProcessRecord.register(kind: "worker", name: "alive") # `NOT IN` an empty list is true even for NULL
    log = bobbin_log { assert_equal 2, Bobbin::Recovery.prune(threshold: 60) }
    assert_equal [ [ "ready", 0 ] ] * 2, jobs(ids).pluck(:state, :attempts)
    assert_match(/its row names no process that claimed it; 2 jobs returned to ready/, log)
  end

  test "recovered jobs run again" do
    dead_process_with_jobs(attempts: 1)
    Bobbin::Recovery.prune(threshold: 60)
    drain(fibers: 5)
    assert_equal %w[k0 k1 k2], LedgerEntry.order(:key).pluck(:key)
  end
end
