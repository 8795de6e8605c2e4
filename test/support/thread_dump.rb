# frozen_string_literal: true

# Loaded with `-r` into a process a test may need to look inside: once the file named by BOBBIN_THREAD_DUMP exists,
# every thread's backtrace goes to stderr. Unlike a signal (Puma's SIGPWR dump) this works while the main thread
# is still inside a trap handler, where Ruby holds later traps back. Its stdout is unbuffered too: a hung process is
# killed in the end, and what it printed (Puma's log, the plugin's lines) must not die with it in a buffer.
if (path = ENV["BOBBIN_THREAD_DUMP"])
  $stdout.sync = true
  Thread.new do
    sleep(0.2) until File.exist?(path)
    Thread.list.each { |thread| warn("#{thread.inspect}\n  #{(thread.backtrace || []).join("\n  ")}") }
  end
end
