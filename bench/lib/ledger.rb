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

  # The receiving side, in the harness: collects reports per key prefix (one prefix per cell).
  class Server
    attr_reader :path

    def initialize(path)
      File.delete(path) if File.exist?(path)
      @path = path
      @socket = Socket.new(:UNIX, :DGRAM)
      @socket.setsockopt(Socket::SOL_SOCKET, Socket::SO_RCVBUF, 8 * 1024 * 1024)
      @socket.bind(Socket.sockaddr_un(path))
      @lock = Mutex.new
      @runs = Hash.new { |h, k| h[k] = [] }
      @thread = Thread.new { loop { receive(@socket.recv(256)) } }
    end

    # Runs of `prefix` so far: { "prefix:i" => [[start, finish], ...] }.
    def runs(prefix) = @lock.synchronize { @runs.select { |key, _| key.start_with?("#{prefix}:") }.transform_values(&:dup) }

    # Distinct keys of `prefix` seen so far.
    def distinct(prefix) = @lock.synchronize { @runs.count { |key, _| key.start_with?("#{prefix}:") } }

    def close
      @thread.kill
      @socket.close
      File.delete(@path) if File.exist?(@path)
    end

    private
      def receive(message)
        key, started, finished = message.split(" ")
        @lock.synchronize { @runs[key] << [ started.to_f, finished.to_f ] }
      end
  end
end
