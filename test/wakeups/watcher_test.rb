# frozen_string_literal: true

require "test_helper"

# SQLite's watcher reads PRAGMA data_version every 5 ms while the file changes; a quiet database is read 20 times a
# second, not 200 (an idle worker spent ~2 % of a core on it; a trial). The other-process pickup test shows a job
# enqueued after a quiet spell still starts without a poll.
class WatcherTest < Bobbin::TestCase
  test "the watcher looks every 5 ms after a change, backing off to every 50 ms over a quiet second" do
    watcher = Bobbin::Wakeups::Watcher.new(Bobbin::Record.connection_db_config)
    waits = [ 0, 0.05, 0.5, 1, 60 ].map { |quiet| watcher.send(:wait, quiet).round(4) }
    assert_equal [ 0.005, 0.005, 0.025, 0.05, 0.05 ], waits
    slow = Bobbin::Wakeups::Watcher.new(Bobbin::Record.connection_db_config, interval: 0.2)
    assert_equal [ 0.2 ], [ 0, 60 ].map { |quiet| slow.send(:wait, quiet) }.uniq, "a longer interval given stays as it is"
  end
end
