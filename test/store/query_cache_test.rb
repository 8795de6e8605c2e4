# frozen_string_literal: true

require "test_helper"

class QueryCacheTest < Bobbin::TestCase
  test "with Active Record's query cache on, identical enqueues are separate jobs and later reads see them" do
    ActiveRecord::Base.cache do
      before = Bobbin::JobRecord.count
      ids = [ SleepJob.enqueue(0), SleepJob.enqueue(0) ]
      bulk = [ Bobbin.enqueue_all([ [ SleepJob, [ 0 ] ] ]), Bobbin.enqueue_all([ [ SleepJob, [ 0 ] ] ]) ].flatten
      assert_equal 2, ids.uniq.size, "two enqueues, two ids"
      assert_equal 2, bulk.uniq.size, "two enqueue_all calls, two ids"
      assert_equal before + 4, Bobbin::JobRecord.count, "a read cached before the enqueues is not served stale"
    end
    drain(fibers: 5)
    assert_equal 4, Bobbin.counts["succeeded"], "all four ran"
  end
end
