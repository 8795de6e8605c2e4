# frozen_string_literal: true

require_relative "../cli/cli_helper"
require "logger"
require "stringio"

# Through PgBouncer in transaction mode a LISTEN does not hear other sessions' NOTIFY (each transaction may run on
# another server connection). Bobbin notices it, says so, and leaves idle workers to poll. A real PgBouncer
# (Debian's package; bin/setup installs it) in front of the test database.
class PgBouncerTest < Bobbin::TestCase
  include CLIHelper

  PGBOUNCER = "/usr/sbin/pgbouncer"

  setup do
    skip_unless_postgres
    skip("needs #{PGBOUNCER} and root to run it as postgres (bin/setup installs it)") unless File.executable?(PGBOUNCER) && Process.uid.zero?
    start_pgbouncer
  end

  teardown do
    if @pgbouncer
      Process.kill(:TERM, @pgbouncer)
      Process.wait(@pgbouncer)
    end
    FileUtils.rm_rf(@dir) if @dir
  end

  test "the round trip that bobbin doctor checks fails through the pooler and works directly" do
    assert Bobbin::Wakeups::Listener.round_trip?(Bobbin::Record.connection_db_config), "directly to PostgreSQL"
    assert_not Bobbin::Wakeups::Listener.round_trip?(bounced), "through PgBouncer in transaction mode"
  end

  test "a listener behind the pooler turns notifications off for its process with one log line" do
    log = StringIO.new
    listener = Bobbin::Wakeups::Listener.new(bounced, logger: Logger.new(log)).start
    wait_for("the listener to give up", timeout: 20) { log.string.include?("did not come back") }
    assert_match(/PgBouncer in transaction mode\?\); notifications are off for this process/, log.string)
    assert_not listener.healthy?
    assert_equal 1, log.string.lines.size, "one line: #{log.string}"
    # It left no LISTEN on the pooler's server connections: a NOTIFY to a listening one that no client is linked to
    # makes PgBouncer log a warning (before, one per enqueue for as long as the server connection lived).
    3.times { Bobbin::Record.connection.execute("NOTIFY #{Bobbin::Wakeups::Listener::CHANNEL}, 'q'") }
    sleep 0.5 # PgBouncer reads and logs what a server connection sends as it arrives
    refute_match(/when not linked/, File.read(File.join(@dir, "pgbouncer.log")))
  ensure
    listener&.stop
  end

  # Sessions of a transaction-mode pooler share server connections and what is prepared on them. Named by number per
  # process, another worker's "bobbin_store_0" (its claim, for other queues) ran with this one's parameters, or its
  # PREPARE failed as already there and the worker crashed, again at each restart (a trial).
  test "through the pooler with prepared statements on, two workers' claims each claim their own queue's jobs" do
    ids = %w[a b].to_h { |queue| [ queue, Bobbin.enqueue_all(Array.new(3) { |i| [ SleepJob, [ 0, "#{queue}#{i}" ], { queue: queue } ] }) ] }
    stores = %w[a b].to_h { |queue| [ queue, pooled_store(queue) ] }
    claimed = %w[a b a b].map { |queue| [ queue, stores[queue].claim(1, 1).map(&:id) ] }
    assert_equal [ [ "a", [ ids["a"][0] ] ], [ "b", [ ids["b"][0] ] ], [ "a", [ ids["a"][1] ] ], [ "b", [ ids["b"][1] ] ] ], claimed

    log = bobbin_log do # a statement gone from the server connection: the worker goes on unprepared, and says why once
      Bobbin::Store::OwnConnections.open(bounced_with_prepared).raw_connection.exec("DEALLOCATE ALL")
      assert_equal [ ids["a"][2] ], stores["a"].claim(1, 1).map(&:id)
      assert_equal [ ids["b"][2] ], stores["b"].claim(1, 1).map(&:id)
    end
    assert_match(/a pooler in transaction mode\? This worker's own statements go unprepared from now on; set prepared_statements: false/, log)
  ensure
    stores&.each_value(&:close)
  end

  test "bobbin doctor through the pooler reports that notifications do not arrive" do
    status, out, err = run_bobbin("doctor", env: { "DATABASE_URL" => bounced_url })
    assert_not status.success?, "doctor fails (stdout: #{out})"
    assert_match(/NOTIFY did not reach a LISTEN.*PgBouncer in transaction mode/, out + err)
  end

  private
    def bounced_url = "postgres://root@127.0.0.1:#{@port}/#{database}?prepared_statements=false"

    def bounced = ActiveRecord::DatabaseConfigurations::UrlConfig.new("test", "pgbouncer", bounced_url)

    def bounced_with_prepared = ActiveRecord::DatabaseConfigurations::UrlConfig.new("test", "pgbouncer", bounced_url.sub("?prepared_statements=false", ""))

    def pooled_store(queue)
      Bobbin::Store::PostgreSQL.new(Bobbin::Store::OwnConnections.open(bounced_with_prepared), Bobbin::Store::QueueSelection.new([ queue ]))
    end

    def database = Bobbin::Record.connection_db_config.configuration_hash.fetch(:database)

    # PgBouncer on a free port in transaction mode, as the postgres user (it refuses root), reaching the test
    # database over PostgreSQL's socket as postgres (peer authentication); clients are trusted on loopback.
    def start_pgbouncer
      config = Bobbin::Record.connection_db_config.configuration_hash
      @dir = Dir.mktmpdir("bobbin-pgbouncer")
      File.chmod(0o755, @dir)
      @port = closed_port
      ini = File.join(@dir, "pgbouncer.ini")
      File.write(ini, <<~INI)
        [databases]
        #{database} = host=#{config[:host] || '/var/run/postgresql'} port=#{config[:port] || 5432} dbname=#{database} user=postgres

        [pgbouncer]
        listen_addr = 127.0.0.1
        listen_port = #{@port}
        unix_socket_dir =
        auth_type = any
        pool_mode = transaction
        default_pool_size = 4
        ignore_startup_parameters = extra_float_digits
      INI
      File.chmod(0o644, ini)
      @pgbouncer = Process.spawn(PGBOUNCER, "-u", "postgres", ini, out: File::NULL, err: File.join(@dir, "pgbouncer.log"))
      wait_for("PgBouncer to accept connections", timeout: 20) { TCPSocket.new("127.0.0.1", @port).close || true rescue false } # rubocop:disable Style/RescueModifier
    end
end
