# frozen_string_literal: true

require "test_helper"

# A worker without a supervisor keeps its host's house while it is the oldest there, and its housekeeping's outage log
# (Maintenance.outage) was kept for the life of the process, under the worker's id: a process that runs embedded
# workers one after another (Worker#run_until_empty in a loop, a worker restarted by the app) kept one more for each.
class OutageLogsTest < Bobbin::TestCase
  test "a worker that kept house leaves no outage log behind when it stops" do
    before = outage_logs
    ids = Array.new(3) do |index|
      SleepJob.enqueue(0, "run #{index}")
      worker = Bobbin::Worker.new(queues: [ "*" ], fibers: 2, polling_interval: 0.05)
      worker.run_until_empty
      worker.process_id
    end

    assert_equal 3, Bobbin::JobRecord.where(state: "succeeded").count
    assert_equal before, outage_logs, "outage logs of workers #{ids.join(', ')} that stopped are still kept"
  end

  private
    def outage_logs = Bobbin::Maintenance.instance_variable_get(:@outages).to_h.keys
end
