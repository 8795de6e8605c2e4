# frozen_string_literal: true

require "test_helper"

# The stall line names the time a job is blamed for, and the loop's time on the clock when the process waited longer:
# on a busy 2-core host a 2 s stall read "held the event loop 1593ms", every other fiber frozen for the whole 2 s (a trial).
class StallLogTest < Bobbin::TestCase
  test "a stall's line says how long the loop was held on the clock when it waited for a CPU too, and not otherwise" do
    output = StringIO.new
    log = Bobbin::Worker::StallLog.new(7, logger: Logger.new(output))
    stall = ->(id, blamed, wall) do
      Bobbin::Worker::StallDetector::Stall.new(id: id, class_name: "DigestJob", queue: "default", duration_ms: blamed, location: "app/jobs/digest_job.rb:4",
                                               backtrace: [], at: Time.now.utc.iso8601(3), wall_ms: wall)
    end
    log << stall.(1, 1593.2, 2010.4)
    sleep(1.05) # one line a second
    log << stall.(2, 1200.0, 1250.0)
    lines = output.string.lines
    assert_match(%r{DigestJob 1 held the event loop 1593ms at app/jobs/digest_job\.rb:4 \(2010ms on the clock, the rest waiting for a CPU or another thread\)$}, lines[0])
    assert_match(%r{DigestJob 2 held the event loop 1200ms at app/jobs/digest_job\.rb:4$}, lines[1])
  end
end
