# frozen_string_literal: true

require "test_helper"

# One process per host keeps house: the supervisor, or a worker that runs without one. Both start with it.
class MaintenanceTest < Bobbin::TestCase
  # A process row silent for an hour, holding one running job; returns the job's id.
  def ghost_with_a_job(key)
    ghost = Bobbin::ProcessRecord.register(kind: "worker", name: "ghost")
    ghost.update_columns(last_heartbeat_at: Time.now.utc - 3600)
    id = LedgerJob.enqueue(key)
    Bobbin::JobRecord.where(id: id).update_all(state: "running", claimed_by: ghost.id, attempts: 1)
    id
  end

  [ [ "work", "--fibers", "2" ], [ "start", "--fibers", "2" ] ].each do |command|
    # More expired jobs than a round once deleted (10,000, one round every heartbeat_interval, 10 s here): a host that
    # finishes more than a thousand jobs a second must not pile them up. They are all gone before the second round.
    test "bobbin #{command.first} recovers a dead process's jobs and sweeps every expired one as it starts" do
      id = ghost_with_a_job("rescued")
      expired = expired_jobs(10 * Bobbin::Retention::BATCH + 1)
      pids = []
      ensure_killed(pids) do
        pids << spawn_bobbin(*command, "--polling-interval", "0.05")
        wait_for("the dead process's job to run") { LedgerEntry.exists?(key: "rescued") }
        wait_for("the expired jobs to be deleted", timeout: 8) { !Bobbin::JobRecord.where(id: expired).exists? }
        Process.kill(:TERM, pids.first)
        assert wait_exit(pids.first, timeout: 30)&.success?
      end
      assert_equal [ "succeeded", "Bobbin::ProcessDied" ], Bobbin::JobRecord.where(id: id).pick(:state, :last_error_class)
    end
  end

  test "among workers without a supervisor, the oldest on the host keeps house; supervised ones never do" do
    first = Bobbin::ProcessRecord.register(kind: "worker", name: "a")
    second = Bobbin::ProcessRecord.register(kind: "worker", name: "b")
    supervised = Bobbin::ProcessRecord.register(kind: "worker", name: "c", supervisor_id: first.id)
    assert Bobbin::Maintenance.elected?(first.id)
    refute Bobbin::Maintenance.elected?(second.id)
    refute Bobbin::Maintenance.elected?(supervised.id)
    first.update_columns(last_heartbeat_at: Time.now.utc - 3600)
    assert Bobbin::Maintenance.elected?(second.id), "a silent one holds no post: the next one takes over"
    first.delete
    assert Bobbin::Maintenance.elected?(second.id)
  end
end
