# frozen_string_literal: true

require "test_helper"

# Rails' automatic role switching runs every GET inside `connected_to(role: :reading, prevent_writes: true)`. Bobbin's
# tables have no reading role (a queue database), or one that is a replica a job's state must not be read from: a
# `perform_later` in a GET raised ConnectionNotDefined, or sent its INSERT to the replica (a trial). Bobbin reads and
# writes its tables on the writing role whatever role the app switched to.
class ReplicaRolesTest < Bobbin::TestCase
  test "enqueues and reads work inside the app's reading role, enqueues where it prevents writes too" do
    ids = ActiveRecord::Base.connected_to(role: :reading) do
      [ SleepJob.enqueue(1), *Bobbin.enqueue_all([ [ SleepJob, [ 2 ] ], [ SleepJob, [ 3 ] ] ]) ]
    end
    assert_equal 3, Bobbin::JobRecord.where(id: ids).count
    ActiveRecord::Base.connected_to(role: :reading, prevent_writes: true) do
      ids << SleepJob.enqueue(4)
      assert_equal 4, Bobbin.counts["ready"]
    end
    assert_equal %w[ready ready ready ready], Bobbin::JobRecord.where(id: ids).order(:id).pluck(:state)
  end

  # A sharded app (a tenant per shard) switches shards around its work: jobs live in one place, where workers claim them.
  test "enqueues and reads inside the app's shard switch go to Bobbin's own tables" do
    id = ActiveRecord::Base.connected_to(shard: :tenant_two) { SleepJob.enqueue(1).tap { assert_equal 1, Bobbin.counts["ready"] } }
    assert Bobbin::JobRecord.exists?(id)
  end

  test "an enqueue inside the app's transaction still joins it" do
    id = nil
    ActiveRecord::Base.transaction do
      id = SleepJob.enqueue(1)
      raise ActiveRecord::Rollback
    end
    refute Bobbin::JobRecord.exists?(id), "rolled back with the app's transaction"
  end
end
