# frozen_string_literal: true

require "test_helper"

# Offload runs a fiber's offload-safe C call on a pool thread; the fiber must outlive the call.
class OffloadTest < Bobbin::TestCase
  test "a fiber stopped while its call runs on an offload thread unwinds only once the call is done, then stops" do
    offload = Bobbin::Worker::Offload.new(1)
    events = Thread::Queue.new
    stopped = nil
    Sync do |parent|
      task = parent.async do
        offload.call(-> { sleep(0.3).then { events << :call_done } })
        events << :went_on
      ensure
        events << :unwound
      end
      sleep(0.05)
      task.stop
      task.wait
      stopped = task.stopped?
    end
    assert_equal [ :call_done, :unwound ], [ events.pop, events.pop ], "the fiber waited for its call"
    assert stopped, "and then stopped as told"
    assert_empty events, "it did not go on after the call"
  ensure
    offload&.close
  end

  test "a call's error is raised in its fiber" do
    offload = Bobbin::Worker::Offload.new(1)
    error = Sync { offload.call(-> { raise IOError, "from the C call" }) rescue $! }
    assert_equal [ IOError, "from the C call" ], [ error.class, error.message ]
  ensure
    offload&.close
  end
end
