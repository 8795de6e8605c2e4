# frozen_string_literal: true

require "test_helper"

# Bobbin's tables hold UTC times. An app on `config.active_record.default_timezone = :local`, on a host far from UTC,
# had Active Record write and read them as local times: live workers were judged dead and their jobs run again, a
# retried job was set to run 13 hours late, and two hosts in different zones each enqueued every recurring tick (a
# trial). Every Bobbin record reads and writes UTC whatever the app's zone.
class LocalTimeZoneTest < Bobbin::TestCase
  setup do
    @zone = ENV.fetch("TZ", nil)
    @default = ActiveRecord.default_timezone
    ENV["TZ"] = "Pacific/Auckland" # UTC+12 or +13: any mix-up shows as half a day
    ActiveRecord.default_timezone = :local
    Bobbin::Record.connection_pool.disconnect! # connections made now set their session up for :local
  end

  teardown do
    @store&.close
    ENV["TZ"] = @zone
    ActiveRecord.default_timezone = @default
    Bobbin::Record.connection_pool.disconnect!
  end

  test "heartbeats, retries and recurring ticks keep UTC when the app's Active Record times are local" do
    refute_equal 0, Time.now.utc_offset, "the test runs far from UTC"
    process = Bobbin::ProcessRecord.register(kind: "test", name: "local-zone")
    @store = Bobbin::Store.open(Bobbin::Store::QueueSelection.new([ "*" ]))
    @store.heartbeat(process.id, process.metadata) # as a worker beats: the database's own clock, in UTC
    assert_in_delta Time.now, Bobbin::ProcessRecord.find(process.id).last_heartbeat_at, 60
    assert_empty Bobbin::ProcessRecord.silent.map(&:id) & [ process.id ], "a process that just beat is not silent"
    assert_includes Bobbin::ProcessRecord.live.map(&:id), process.id

    id = SleepJob.enqueue(0)
    assert_in_delta Time.now, Bobbin::JobRecord.find(id).run_at, 60, "run_at, as the enqueue wrote it, read back"
    assert_equal [ id ], @store.claim(process.id, 1).map(&:id)
    @store.finish(process.id, [ Bobbin::Store::Outcome.new(id, "failed", Bobbin::Store.timestamp(Time.now), nil, "RuntimeError", "boom", nil, nil, nil, 1) ])
    assert Bobbin::Operator.retry(id, by: "ops")
    assert_in_delta Time.now, Bobbin::JobRecord.find(id).run_at, 60, "a retried job runs now, not half a day off"
    assert_equal [ id ], @store.claim(process.id, 1).map(&:id), "and is claimable at once"

    tick = Time.utc(2026, 11, 29, 13, 31)
    row = Bobbin::Client::Enqueuer.row(SleepJob, [ 1 ])
    assert Bobbin::RecurringRun.claim("every_minute", tick, row), "the first scheduler takes the tick"
    ENV["TZ"] = "America/New_York" # another host, another zone
    refute Bobbin::RecurringRun.claim("every_minute", tick, row), "a scheduler in another zone finds the same tick taken"
    assert_equal tick, Bobbin::RecurringRun.find_by!(task_key: "every_minute").run_at
  end
end
