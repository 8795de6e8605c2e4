# frozen_string_literal: true

module Bobbin
  # What a fiber pool's event loop needs from the rest of the process, checked at worker boot and by `bobbin doctor`:
  # no client library loaded that blocks the loop (each with its fiber-aware alternative), and a Ruby whose fiber
  # scheduler can hand offload-safe C calls to threads.
  module FiberSafety
    # Gems whose calls block a fiber pool's event loop (C clients that wait without yielding), and what to use
    # instead. Jobs that must keep one can run on the thread lane (`runs_on: :thread`).
    BLOCKING = {
      "mysql2" => "trilogy", "typhoeus" => "async-http or Net::HTTP", "ethon" => "async-http or Net::HTTP",
      "curb" => "async-http or Net::HTTP", "patron" => "async-http or Net::HTTP", "grpc" => "a thread pool (runs_on: :thread)",
      "hiredis-client" => "redis-client's Ruby driver", "hiredis" => "redis-client's Ruby driver", "memcached" => "dalli",
      "pg_ruby" => "pg"
    }.freeze

    module_function

    # The loaded gems from BLOCKING: name => alternative.
    def blocking_gems = BLOCKING.slice(*Gem.loaded_specs.keys)

    # True when this Ruby passes offload-safe C calls (zlib, ...) to the fiber scheduler's blocking_operation_wait
    # (Ruby >= 3.4).
    def offload? = Gem::Version.new(RUBY_VERSION) >= Gem::Version.new("3.4")

    # Turns off Ruby 3.4's Happy Eyeballs in TCPSocket.new (Socket.tcp_fast_fallback) for this process, which runs a
    # fiber pool: that connect waits for its resolver thread and its sockets in C, without yielding to the fiber
    # scheduler, so every connect by host name (Net::HTTP, http.rb, Faraday's default adapter) held the event loop.
    # Without it the connect resolves and waits through the scheduler. Returns true when it changed the setting.
    # (300 connects to "localhost" from fibers: 3.8 s with it, 0.10 s without; a trial's 1,000 HTTP jobs of 1 s by
    # host name took 3.2 s each, 2.3 s of loop lag, and no stall was reported: each hold is short.)
    def connect_through_scheduler!
      return false unless ::Socket.respond_to?(:tcp_fast_fallback=) && ::Socket.tcp_fast_fallback

      ::Socket.tcp_fast_fallback = false
      true
    end

    # One line per concern for a fiber pool in this process (empty when there is none).
    def warnings
      lines = blocking_gems.map do |gem, instead|
        "#{gem} is loaded: its calls block a fiber pool's event loop (use #{instead}, or give the jobs that need it runs_on: :thread)"
      end
      lines << "Ruby #{RUBY_VERSION} keeps offload-safe C calls (zlib, ...) on the event loop: Ruby >= 3.4 hands them to threads" unless offload?
      lines
    end
  end
end
