# frozen_string_literal: true

# Loaded by worker processes the tests start (`bobbin work --require`): the test job classes.
require_relative "jobs"

# A forked worker that boots slowly (BOBBIN_TEST_SLOW_FORK seconds after fork, before anything of Bobbin's runs in it),
# marking the moment in BOBBIN_TEST_FORK_MARK: a signal can then be sent to it before its worker traps any.
if (seconds = ENV["BOBBIN_TEST_SLOW_FORK"])
  ActiveSupport::ForkTracker.after_fork do
    FileUtils.touch(ENV.fetch("BOBBIN_TEST_FORK_MARK"))
    sleep(Float(seconds))
  end
end

# A `bobbin` command that boots slowly (BOBBIN_TEST_SLOW_BOOT seconds, as a Rails app's boot takes), marking in
# BOBBIN_TEST_BOOT_MARK the moment it starts: a signal can then be sent to it before its supervisor or worker traps any.
if (boot_seconds = ENV["BOBBIN_TEST_SLOW_BOOT"])
  FileUtils.touch(ENV.fetch("BOBBIN_TEST_BOOT_MARK"))
  sleep(Float(boot_seconds))
end

# An after-fork hook of the app's that raises in the first worker forked (BOBBIN_TEST_FORK_RAISE names a file it
# creates then): the next fork finds the file and goes on.
if (raise_mark = ENV["BOBBIN_TEST_FORK_RAISE"])
  ActiveSupport::ForkTracker.after_fork do
    next if File.exist?(raise_mark)

    FileUtils.touch(raise_mark)
    raise "the app's after-fork hook failed"
  end
end
