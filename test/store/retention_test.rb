# frozen_string_literal: true

require "test_helper"

class RetentionTest < Bobbin::TestCase
  test "succeeded and discarded jobs older than the retention are deleted; failed and recent ones stay" do
    ids = Bobbin.enqueue_all(Array.new(5) { |i| [ SleepJob, [ i ] ] })
    old = Time.now.utc - 2 * 86_400
    Bobbin::JobRecord.where(id: ids[0]).update_all(state: "succeeded", finished_at: old)
    Bobbin::JobRecord.where(id: ids[1]).update_all(state: "discarded", finished_at: old)
    Bobbin::JobRecord.where(id: ids[2]).update_all(state: "failed", finished_at: old)
    Bobbin::JobRecord.where(id: ids[3]).update_all(state: "succeeded", finished_at: Time.now.utc)
    assert_equal 2, Bobbin::Retention.sweep(retention: 86_400)
    assert_equal ids[2..], Bobbin::JobRecord.order(:id).pluck(:id)
    assert_equal 0, Bobbin::Retention.sweep(retention: nil), "nil keeps everything"
  end
end
