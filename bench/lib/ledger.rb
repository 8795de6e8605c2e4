# frozen_string_literal: true

require "socket"

# Every benchmark job, in every system, reports "key start finish" (wall-clock seconds) over a Unix datagram
# socket when it ends. Unix datagrams are reliable and atomic on Linux, cost a few microseconds, and need no
# database or Redis round trip that would tilt the comparison. The harness counts keys: missing and duplicate
# runs are found, never inferred.
module Ledger
  PATH_ENV = "BENCH_LEDGER"

  # The sending side, used inside jobs.
  module Client
    module_function

    # Reports that job `key` ran from `started` to now.
    def record(key, started)
      socket.send("#{key} #{started} #{Process.clock_gettime(Process::CLOCK_REALTIME)}", 0)
    end

    def socket
      @socket = nil if @pid != Process.pid
      @pid = Process.pid
      @socket ||= Socket.new(:UNIX, :DGRAM).tap { |s| s.connect(Socket.sockaddr_un(ENV.fetch(PATH_ENV))) }
    end
  end

  # The receiving side, in the harness: collects reports per key prefix (one prefix per cell). Reports are
  # filed under their prefix as they arrive, so the harness's polling costs the same in the last round as in
  # the first (scanning every key ever seen made late rounds starve the receiving thread and slowed every
  # system alike), and a finished cell's keys are dropped.
  class Server
    attr_reader :path

    def initialize(path)
      File.delete(path) if File.exist?(path)
      @path = path
      @socket = Socket.new(:UNIX, :DGRAM)
      @socket.setsockopt(Socket::SOL_SOCKET, Socket::SO_RCVBUF, 8 * 1024 * 1024)
      @socket.bind(Socket.sockaddr_un(path))
      @lock = Mutex.new
      @runs = Hash.new { |by_prefix, prefix| by_prefix[prefix] = Hash.new { |by_key, key| by_key[key] = [] } }
      @thread = Thread.new { loop { receive(@socket.recv(256)) } }
    end

    # Runs of `prefix` so far: { "prefix:i" => [[start, finish], ...] }.
    def runs(prefix) = @lock.synchronize { @runs.fetch(prefix, {}).transform_values(&:dup) }

    # Distinct keys of `prefix` seen so far.
    def distinct(prefix) = @lock.synchronize { @runs.fetch(prefix, {}).size }

    # Drops what was collected for `prefix`.
    def forget(prefix) = @lock.synchronize { @runs.delete(prefix) }

    def close
      @thread.kill
      @socket.close
      File.delete(@path) if File.exist?(@path)
    end

    private
      def receive(message)
        key, started, finished = message.split(" ")
        @lock.synchronize { @runs[key[/\A[^:]*/]][key] << [ started.to_f, finished.to_f ] }
      end
  end
end
