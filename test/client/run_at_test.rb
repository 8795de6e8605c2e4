# frozen_string_literal: true

require "test_helper"
require "date"

# enqueue_at takes a point in time and nothing else; enqueue_in takes a delay in seconds.
class RunAtTest < Bobbin::TestCase
  def stored_run_at(id) = Bobbin::JobRecord.find(id).run_at

  test "enqueue_at refuses strings, numbers, dates and nil, naming the job and the value and suggesting enqueue_in" do
    [ "tomorrow", "in 5 minutes", "garbage", 60, 1.5, nil, Date.today, :soon ].each do |value|
      error = assert_refused(/SleepJob/) { SleepJob.enqueue_at(value, 0) }
      assert_includes error.message, value.inspect
      assert_match(/Time, DateTime or ActiveSupport::TimeWithZone/, error.message)
      assert_match(/Time\.now \+ 60.*SleepJob\.enqueue_in\(60/, error.message)
    end
  end

  test "a number given to enqueue_at points at enqueue_in" do
    error = assert_refused(/enqueue_in/) { SleepJob.enqueue_at(60, 0) }
    assert_match(/got 60 \(Integer\)/, error.message)
  end

  test "years outside 1970..9999 are refused on both databases" do
    [ Time.utc(10_000, 1, 1), Time.utc(1969, 12, 31, 23, 59, 59), Time.now + 1e20 ].each do |time|
      assert_refused(/outside the years 1970\.\.9999/) { SleepJob.enqueue_at(time, 0) }
    end
    assert_refused(/outside the years/) { SleepJob.enqueue_in(10_000 * 366 * 86_400, 0) }
  end

  test "Time, DateTime and ActiveSupport::TimeWithZone are stored to the microsecond" do
    time = Time.utc(2999, 5, 6, 7, 8, 9.123456r)
    [ time, time.to_datetime, time.in_time_zone("Asia/Tokyo"), Time.utc(9999, 12, 31, 23, 59, 59), Time.utc(1970) ].each do |value|
      id = SleepJob.enqueue_at(value, 0)
      assert_equal value.to_time.utc, stored_run_at(id), "#{value.class} #{value}"
    end
    assert_equal 4, Bobbin.counts["scheduled"], "all but 1970"
  end

  # Time#utc converts its receiver in place: enqueue_at raised FrozenError (nothing stored) for a frozen Time, and moved
  # the caller's own Time (and the Time a TimeWithZone keeps for to_time) to UTC, so a page then showing it said 07:00 UTC
  # for the 12:00 +05:00 it was given (a review).
  test "enqueue_at leaves the caller's time as it was: a frozen Time is stored, a Time or TimeWithZone keeps its zone" do
    frozen = Time.new(2999, 5, 6, 12, 0, 0, "+05:00").freeze
    id = SleepJob.enqueue_at(frozen, 0)
    assert_equal Time.utc(2999, 5, 6, 7), stored_run_at(id)

    local = Time.new(2999, 5, 6, 12, 0, 0, "+05:00")
    zoned = Time.utc(2999, 5, 6, 7).in_time_zone("Asia/Tokyo")
    zoned.to_time # as a page that shows it has already done
    Bobbin.enqueue_all([ [ SleepJob, [ 0 ], { run_at: local } ], [ SleepJob, [ 0 ], { run_at: zoned } ] ])
    assert_equal [ 5 * 3600, 9 * 3600 ], [ local.utc_offset, zoned.to_time.utc_offset ]
    assert_equal [ Time.utc(2999, 5, 6, 7) ] * 3, Bobbin::JobRecord.order(:id).pluck(:run_at)
  end

  test "enqueue_in stores a job that runs that many seconds after the call" do
    before = Time.now
    id = SleepJob.enqueue_in(3600, 0, "later")
    after = Time.now
    assert_operator stored_run_at(id), :>=, (before + 3600).utc.floor(6)
    assert_operator stored_run_at(id), :<=, after + 3600
    assert_equal 1, Bobbin.counts["scheduled"]
  end

  test "enqueue_in(0) runs now, and Rationals and Durations are seconds too" do
    SleepJob.enqueue_in(0, 0, "now")
    SleepJob.enqueue_in(3600r, 0)
    SleepJob.enqueue_in(ActiveSupport::Duration.build(3600), 0)
    drain(fibers: 2)
    assert_equal [ "now" ], LedgerEntry.pluck(:key)
    assert_equal 2, Bobbin.counts["scheduled"]
  end

  test "enqueue_in refuses negative, non-finite and non-numeric delays, naming the job" do
    [ -1, -0.5, Float::INFINITY, Float::NAN, "60", nil, Complex(1, 1), Time.now ].each do |value|
      error = assert_refused(/SleepJob\.enqueue_in: seconds must be a finite number ≥ 0/) { SleepJob.enqueue_in(value, 0) }
      assert_includes error.message, value.inspect
    end
  end

  test "enqueue_all's run_at: option is checked the same way, and one bad row writes nothing" do
    good = [ SleepJob, [ 0 ], { run_at: Time.now + 60 } ]
    [ "tomorrow", 60, nil, Time.utc(10_000) ].each do |value|
      error = assert_refused(/SleepJob/) { Bobbin.enqueue_all([ good, [ SleepJob, [ 0 ], { run_at: value } ] ]) }
      assert_match(/row 2/, error.message)
    end
    assert_equal 1, Bobbin.enqueue_all([ good ]).size
  end

  test "the row builder the Active Job adapter uses checks run_at too (nil there means now)" do
    build = ->(run_at) { Bobbin::Client::Enqueuer.build(class_name: "X", arguments: "[]", queue: "q", priority: 0, run_at: run_at, max_attempts: 1) }
    assert_nil build.(nil)[:run_at]
    assert_raises(Bobbin::EnqueueError) { build.("tomorrow") }
    assert_raises(Bobbin::EnqueueError) { build.(Time.utc(10_000)) }
  end
end
