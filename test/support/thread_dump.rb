# frozen_string_literal: true

# Loaded with `-r` into a process a test may need to look inside: once the file named by BOBBIN_THREAD_DUMP exists,
# every thread's backtrace goes to stderr. Unlike a signal (Puma's SIGPWR dump) this works while the main thread
# is still inside a trap handler, where Ruby holds later traps back.
if (path = ENV["BOBBIN_THREAD_DUMP"])
  Thread.new do
    sleep(0.2) until File.exist?(path)
    Thread.list.each { |thread| warn("#{thread.inspect}\n  #{(thread.backtrace || []).join("\n  ")}") }
  end
end
