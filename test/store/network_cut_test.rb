# frozen_string_literal: true

require "test_helper"
require "socket"

# A database host that vanishes (it crashed, or a failover moved the database to another address) answers
# nothing: no reset, no error. libpq's defaults would leave a worker's claim on such a session waiting ~15
# minutes for its lost packet. The worker's own sessions give up within seconds and the worker carries on as in
# any outage. Played here with a network namespace whose only link to the database is a veth pair that the test
# takes down: packets are then dropped without a word, as on a real cut.
class NetworkCutTest < Bobbin::TestCase
  HOST_IP = "10.213.0.1"
  WORKER_IP = "10.213.0.2"

  # Forwards TCP connections on HOST_IP to the test database (its socket or host), a thread per direction.
  class Forwarder
    attr_reader :port

    def initialize(config)
      @upstream = config[:host].nil? || config[:host].start_with?("/") ? [ UNIXSocket, File.join(config[:host] || "/var/run/postgresql", ".s.PGSQL.#{config[:port] || 5432}") ] : [ TCPSocket, config[:host], config[:port] || 5432 ]
      @server = TCPServer.new(HOST_IP, 0)
      @port = @server.addr[1]
      @threads = [ Thread.new { loop { pair(@server.accept) } } ]
    end

    def close
      @threads.each(&:kill)
      @server.close
    end

    private
      def pair(client)
        server = @upstream.first.new(*@upstream.drop(1))
        [ [ client, server ], [ server, client ] ].each { |from, to| @threads << Thread.new { pump(from, to) } }
      end

      def pump(from, to)
        while (data = from.readpartial(65_536))
          to.write(data)
        end
      rescue IOError, SystemCallError
        [ from, to ].each { |socket| socket.close unless socket.closed? }
      end
  end

  def ip(*args) = system("ip", *args, out: File::NULL, err: File::NULL)

  setup do
    skip_unless_postgres
    skip("needs root to make a network namespace") unless Process.uid.zero?
    @namespace = "bobbin-cut-#{Process.pid}"
    @link = "bcut#{Process.pid % 100_000}"
    skip("this machine cannot make network namespaces") unless ip("netns", "add", @namespace)
    assert ip("link", "add", @link, "type", "veth", "peer", "name", "#{@link}n", "netns", @namespace)
    assert ip("addr", "add", "#{HOST_IP}/30", "dev", @link) && ip("link", "set", @link, "up")
    inside = [ "netns", "exec", @namespace, "ip" ]
    assert ip(*inside, "addr", "add", "#{WORKER_IP}/30", "dev", "#{@link}n") && ip(*inside, "link", "set", "#{@link}n", "up")
    @forwarder = Forwarder.new(Bobbin::Record.connection_db_config.configuration_hash)
  end

  teardown do
    @forwarder&.close
    ip("link", "del", @link) if @link
    ip("netns", "del", @namespace) if @namespace
    FileUtils.rm_f(@log) if @log && passed?
  end

  test "PostgreSQL: a worker whose database host vanishes notices within seconds, and runs jobs again once it is reachable" do
    config = Bobbin::Record.connection_db_config.configuration_hash
    user = [ config[:username] || Bobbin::Record.connection.select_value("SELECT current_user"), config[:password] ].compact
                                                                  .map { |part| URI.encode_www_form_component(part.to_s) }.join(":")
    url = "postgres://#{user}@#{HOST_IP}:#{@forwarder.port}/#{config[:database]}?sslmode=disable&pool=25&application_name=bobbin-cut"
    log = @log = "tmp/network-cut-#{Process.pid}.log"
    pids = []
    ensure_killed(pids) do
      pids << spawn_bobbin("work", "--fibers", "5", "--polling-interval", "0.5", log: log, env: { "DATABASE_URL" => url },
                                                                                 prefix: [ "ip", "netns", "exec", @namespace ])
      Bobbin.enqueue_all([ [ LedgerUpsertJob, [ "before" ] ] ])
      wait_for("the job before the cut", timeout: 30) { LedgerEntry.exists?(key: "before") }
      cut_at = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      assert ip("link", "set", @link, "down"), "the database host is gone"
      Bobbin.enqueue_all([ [ LedgerUpsertJob, [ "during" ] ] ])
      # The claim sent after the cut is never acknowledged: without tcp_user_timeout it would wait ~15 minutes.
      wait_for("the worker to give up its claiming session", timeout: 45) { File.read(log).include?("database unavailable during claim") }
      noticed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - cut_at
      assert ip("link", "set", @link, "up"), "the database host is back"
      wait_for("the job enqueued during the cut", timeout: 60) { LedgerEntry.exists?(key: "during") }
      assert_nil Process.wait(pids.first, Process::WNOHANG), "the worker kept running"
      Process.kill(:TERM, pids.first)
      assert wait_exit(pids.first, timeout: 30)&.success?, "the worker stopped cleanly:\n#{File.read(log)}"
      assert_operator noticed, :<, 45
    end
  end
end
