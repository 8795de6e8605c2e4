# frozen_string_literal: true

require "pg"
require "tmpdir"

# A PostgreSQL server of the test's own beside the test database's, for a database on another server (a queue database
# whose URL names another host): initdb in a temporary directory, listening on a Unix socket there only (no TCP port),
# with the given server settings (`max_connections: 12`). Yields the URL of a database on it, then stops the server
# and removes it. Skips where the tests do not run on PostgreSQL or this machine lacks the server's programs.
module SecondServer
  def with_second_server(settings = {})
    skip_unless_postgres
    bin = Dir["/usr/lib/postgresql/*/bin"].max_by { |dir| dir[/\d+/].to_i } or skip("needs the PostgreSQL server's programs (initdb, pg_ctl)")
    dir = Dir.mktmpdir("bobbin-pg")
    as_server = Process.uid.zero? ? [ "runuser", "-u", "postgres", "--" ] : [] # initdb refuses to run as root
    FileUtils.chown("postgres", nil, dir) if Process.uid.zero?
    options = { listen_addresses: "''", unix_socket_directories: dir, fsync: "off" }.merge(settings).map { |name, value| "-c #{name}=#{value}" }
    assert system(*as_server, "#{bin}/initdb", "-D", "#{dir}/data", "-A", "trust", "-U", "postgres", out: File::NULL, err: File::NULL), "initdb"
    assert system(*as_server, "#{bin}/pg_ctl", "-D", "#{dir}/data", "-o", options.join(" "), "-l", "#{dir}/log", "-w", "start",
                  out: File::NULL, err: File::NULL), "the second server started"
    admin = PG.connect(host: dir, user: "postgres", dbname: "postgres")
    admin.exec("CREATE DATABASE bobbin_second")
    admin.close
    yield "postgres:///bobbin_second?host=#{dir}&user=postgres"
  ensure
    if dir
      system(*as_server, "#{bin}/pg_ctl", "-D", "#{dir}/data", "-m", "immediate", "stop", out: File::NULL, err: File::NULL) if File.exist?("#{dir}/data/postmaster.pid")
      FileUtils.rm_rf(dir)
    end
  end
end
