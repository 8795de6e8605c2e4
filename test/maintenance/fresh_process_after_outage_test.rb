# frozen_string_literal: true

require "test_helper"

# A process restarted while the database was away exits 69 until it is back (as README's systemd unit restarts it),
# then starts as it returns: before the live workers, which try to beat once each heartbeat_interval, have beaten
# again. Judging their silence at its start, it pruned them and ran their running jobs a second time beside the first.
class FreshProcessAfterOutageTest < Bobbin::TestCase
  # The local cluster serving the test database, as [version, name], when this machine can restart it.
  def cluster!
    skip_unless_postgres
    port = TestDatabase.url[/port=(\d+)/, 1] || "5432"
    line = `pg_lsclusters -h 2>/dev/null`.lines.map(&:split).find { |fields| fields[2] == port }
    line && Process.uid.zero? ? line.first(2) : skip("needs a local PostgreSQL cluster this user can restart")
  end

  def beat_of(id) = query { Bobbin::ProcessRecord.where(id: id).pick(:last_heartbeat_at) }

  test "a process started as an outage ends does not prune the live workers that have not beaten again yet", long: true do
    cluster = cluster!
    interval = 10
    live = start_config({ "threads" => 2 }, heartbeat_interval: interval, process_alive_threshold: 2 * interval + 1)
    fresh = start_config({ "threads" => 2 }, heartbeat_interval: 1, process_alive_threshold: 3)
    logs = [ "tmp/fresh-after-outage-live-#{Process.pid}.log", "tmp/fresh-after-outage-fresh-#{Process.pid}.log" ]
    gate = GatedJob.gate("outage")
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("work", "-c", live.path, log: logs.first)
      id = GatedJob.enqueue(gate, "long")
      wait_for("the job to run") { GatedJob.started(gate) == 1 }
      worker = Bobbin::JobRecord.find(id).claimed_by

      # Stopped just after a beat, started again just after the worker's third try (the worker is silent for longer than
      # its threshold then), so its next try comes an interval later: the process started meanwhile judges first.
      before = beat_of(worker)
      wait_for("a beat of the worker", timeout: 3 * interval, interval: 0.05) { beat_of(worker) != before }
      beaten = Bobbin.monotonic
      beat = beat_of(worker)
      assert pg_ctlcluster(*cluster, "stop", "-m", "fast"), "PostgreSQL stopped"
      sleep(beaten + 3 * interval + 1.5 - Bobbin.monotonic)
      assert pg_ctlcluster(*cluster, "start"), "PostgreSQL started again"
      pids << spawn_bobbin("work", "-c", fresh.path, log: logs.last)

      wait_for("the worker to beat again", timeout: 4 * interval) { beat_of(worker)&.>(beat) } # (registered again, when it was pruned)
      wait_for("the new process to keep house") { File.read(logs.last).include?("started") }
      assert_equal [ "running", worker, 1, 0 ], query { Bobbin::JobRecord.where(id: id).pick(:state, :claimed_by, :attempts, :crashes) },
                   "still the live worker's run, not recovered and run again:\n#{File.read(logs.last)}"
      assert_no_match(/stopped heartbeating/, File.read(logs.last))

      GatedJob.open_gate(gate)
      wait_for("the job's outcome") { query { Bobbin::JobRecord.where(id: id).pick(:state) } == "succeeded" }
      assert_equal [ "long" ], LedgerEntry.pluck(:key), "it ran once"
    end
  ensure
    pg_ctlcluster(*cluster, "start") if cluster
    [ live, fresh ].each { |config| File.delete(config.path) if config && File.exist?(config.path) }
    FileUtils.rm_f(logs) if logs && !ENV["BOBBIN_KEEP_LOGS"]
  end
end
