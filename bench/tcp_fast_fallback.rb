# frozen_string_literal: true

# Connects by host name from fibers, with and without Ruby 3.4's Happy Eyeballs (Socket.tcp_fast_fallback): CONNECTS
# fibers each open TCPSocket.new("localhost", port) to a local server while a fiber sleeping 5 ms at a time measures
# how late the loop lets it run. Prints one JSON line per setting. Usage: ruby bench/tcp_fast_fallback.rb [CONNECTS]
require "bundler/setup"
require "async"
require "json"
require "socket"

CONNECTS = Integer(ARGV[0] || 300)

server = TCPServer.new("127.0.0.1", 0)
port = server.addr[1]
Thread.new { loop { server.accept.close } }

def monotonic = Process.clock_gettime(Process::CLOCK_MONOTONIC)

def measure(port)
  worst = 0.0
  started = monotonic
  Async do |task|
    sleeper = task.async do
      last = monotonic
      loop do
        sleep(0.005)
        worst = [ worst, monotonic - last - 0.005 ].max
        last = monotonic
      end
    end
    Array.new(CONNECTS) { task.async { TCPSocket.new("localhost", port).close } }.each(&:wait)
    sleeper.stop
  end
  { span_s: (monotonic - started).round(3), worst_lateness_ms: (worst * 1000).round(1) }
end

abort("Ruby #{RUBY_VERSION} has no Socket.tcp_fast_fallback (Ruby >= 3.4)") unless Socket.respond_to?(:tcp_fast_fallback=)
[ true, false ].each do |setting|
  Socket.tcp_fast_fallback = setting
  puts JSON.generate({ tcp_fast_fallback: setting, connects: CONNECTS, **measure(port) })
end
