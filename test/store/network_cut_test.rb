# frozen_string_literal: true

require "test_helper"
require_relative "../wakeups/silent_proxy"

# A database host that vanishes (it crashed, or a failover moved the database to another address) answers
# nothing: no reset, no error. libpq's defaults would leave a worker's claim on such a session waiting ~15
# minutes for its lost packet. The worker's own sessions give up within seconds and the worker carries on as in
# any outage. Played here with a network namespace whose only link to the database is a veth pair that the test
# takes down: packets are then dropped without a word, as on a real cut.
class NetworkCutTest < Bobbin::TestCase
  NAMESPACE = /^bobbin-cut-(\d+)/

  def ip(*args) = system("ip", *args, out: File::NULL, err: File::NULL)

  setup do
    skip_unless_postgres
    skip("needs root to make a network namespace") unless Process.uid.zero?
    @namespace = namespace_of(Process.pid)
    @link = link_of(Process.pid)
    # A /30 of 10.213.0.0/16 of this run's own, so it never shares a route with another run's link.
    subnet = (Process.pid % 16_384) * 4
    host_ip, worker_ip = [ 1, 2 ].map { |host| "10.213.#{subnet / 256}.#{subnet % 256 + host}" }
    skip("this machine cannot make network namespaces") unless ip("netns", "add", @namespace)
    remove_left_behind
    assert ip("link", "add", @link, "type", "veth", "peer", "name", "#{@link}n", "netns", @namespace)
    assert ip("addr", "add", "#{host_ip}/30", "dev", @link) && ip("link", "set", @link, "up")
    inside = [ "netns", "exec", @namespace, "ip" ]
    assert ip(*inside, "addr", "add", "#{worker_ip}/30", "dev", "#{@link}n") && ip(*inside, "link", "set", "#{@link}n", "up")
    @forwarder = SilentProxy.new(Bobbin::Record.connection_db_config.configuration_hash, bind: host_ip) # never cut: a forwarder
  end

  teardown do
    @forwarder&.close
    ip("link", "del", @link) if @link
    ip("netns", "del", @namespace) if @namespace
    FileUtils.rm_f(@log) if @log && passed?
  end

  def namespace_of(pid) = "bobbin-cut-#{pid}"
  def link_of(pid) = "bcut#{pid % 100_000}"

  # A run killed before its teardown (a CI job stopped mid-test) leaves its namespace and link, and its link's route
  # would take this run's replies: the worker's first connection then waits for ever. Ends those whose run is gone.
  def remove_left_behind
    IO.popen([ "ip", "netns", "list" ], err: File::NULL, &:read).scan(NAMESPACE).flatten.map(&:to_i).each do |pid|
      next if pid == Process.pid || alive?(pid)

      ip("link", "del", link_of(pid))
      ip("netns", "del", namespace_of(pid))
    end
  end

  test "PostgreSQL: a worker whose database host vanishes notices within seconds, and runs jobs again once it is reachable", long: true do
    url = @forwarder.url("bobbin-cut")
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
