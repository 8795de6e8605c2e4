# frozen_string_literal: true

require "test_helper"

# Two hosts that share a hostname and number their processes alike: containers with host networking (Docker's
# `--network host`, Kubernetes' `hostNetwork: true`) take the host's name, and each starts its processes from pid 1.
# A supervisor that sees its worker exit recovers that worker's jobs, and only its: never those of another host's
# worker that happens to have the same pid.
class PidNamespaceTest < Bobbin::TestCase
  # Runs the command as pid 1 of a new pid namespace, on this host's name (as a container with host networking).
  NAMESPACE = [ "unshare", "--pid", "--fork", "--mount-proc" ].freeze

  setup do
    skip("this machine cannot make pid namespaces") unless system(*NAMESPACE, "true", [ :out, :err ] => File::NULL)
  end

  test "a supervisor whose worker exits recovers that worker's jobs, not those of another host's worker with the same pid", long: true do
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("start", "--fibers", "1", "--polling-interval", "0.05", prefix: NAMESPACE)
      other_job = SleepJob.enqueue(60, "other host")
      other = wait_for("the other host's job running") { Bobbin::JobRecord.where(id: other_job, state: "running").pick(:claimed_by) }

      ours = this_host_worker(pids, other)
      assert_equal Bobbin::ProcessRecord.where(id: other).pick(:pid, :hostname), [ ours.last, Socket.gethostname ],
                   "the two workers share a hostname and a pid (the premise)"

      poison = PoisonJob.enqueue("poison") # only this host's worker has room
      wait_for("this host's worker to die and its job to be recovered") { Bobbin::JobRecord.where(id: poison).pick(:crashes).positive? }

      assert_equal [ poison ], Bobbin::JobRecord.where(last_error_class: "Bobbin::ProcessDied").pluck(:id),
                   "only the job of the worker that exited is recovered"
      assert Bobbin::ProcessRecord.exists?(other), "the other host's worker is still registered"
      assert_equal [ "running", other ], Bobbin::JobRecord.where(id: other_job).pick(:state, :claimed_by), "its job still runs there, once"
      assert_nil Bobbin::ProcessRecord.find_by(id: ours.first), "the worker that exited is gone"
    end
  end

  test "a supervisor that is pid 1 (a container without tini) waits for the processes its jobs leave behind: no zombies", long: true do
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("start", "--fibers", "2", "--polling-interval", "0.05", prefix: NAMESPACE)
      keys = Array.new(5) { |index| "background #{index}" }
      keys.each { |key| BackgroundChildJob.enqueue(key) }
      wait_for("the jobs to run") { LedgerEntry.where(key: keys).count == keys.size }
      supervisor = wait_for("the supervisor, pid 1 of the namespace") { children(pids.first).first }

      states = -> { children(supervisor).to_h { |pid| [ pid, File.read("/proc/#{pid}/stat")[/\) (\S)/, 1] ] } }
      wait_for("the jobs' leftover processes (a 0.1 s sleep each) waited for: only the worker left", timeout: 15, seen: states) do
        children(supervisor).one?
      end
      assert_equal 1, Bobbin::ProcessRecord.where(kind: "worker").count, "the worker, never taken for exited, runs on"
      assert_equal 0, Bobbin::JobRecord.where(last_error_class: "Bobbin::ProcessDied").count
    end
  end

  private
    # Starts this host's supervisor until its worker has the other host's worker's pid; returns that worker's [id, pid].
    # Threads take pids of the namespace too, and a loaded machine may start one more before the worker forks (a
    # stressed run: pid 6 against 5): a supervisor whose worker came out otherwise is stopped, and one started again.
    def this_host_worker(pids, other)
      wanted = Bobbin::ProcessRecord.where(id: other).pick(:pid)
      ours = nil
      5.times do
        pids << spawn_bobbin("start", "--fibers", "1", "--polling-interval", "0.05", prefix: NAMESPACE)
        ours = wait_for("this host's worker") { Bobbin::ProcessRecord.where(kind: "worker").where.not(id: other).pick(:id, :pid) }
        return ours if ours.last == wanted

        Process.kill(:TERM, -pids.last)
        assert wait_exit(pids.pop)&.success?, "this host's supervisor stopped"
      end
      ours
    end

    def children(pid)
      File.read("/proc/#{pid}/task/#{pid}/children").split.map(&:to_i)
    rescue Errno::ENOENT, Errno::ESRCH
      []
    end
end
