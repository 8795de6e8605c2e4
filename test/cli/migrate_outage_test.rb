# frozen_string_literal: true

require_relative "cli_helper"
require_relative "../rails/rails_app_processes"

# README (Containers and process managers): exit 69 is a database that is down or refuses for now, 78 a configuration
# no restart mends. `bobbin migrate` exited 78 when the database was down in a Rails app (it connects at the first
# query, inside the migrate) or went away as the migrate ran (a server restarting at a deploy): the deploy step was told
# that no retry would mend it.
class MigrateOutageTest < Bobbin::TestCase
  include CLIHelper
  include RailsAppProcesses

  test "bobbin migrate in a Rails app whose database is down exits 69, as counts does" do
    once_per_run
    down = { "BOBBIN_RAILS_APP_DATABASE_URL" => "postgres://127.0.0.1:#{closed_port}/bobbin" }
    status, output = bobbin_in_rails_app("migrate", env: "test", variables: down)
    assert_equal 69, status.exitstatus, output
    assert_match(/^bobbin: migrate failed: cannot connect to the database: .*Connection refused; is the server running/, output)
    refute_match(/\.rb:\d+:in /, output, "no backtrace")
    status, output = bobbin_in_rails_app("counts", env: "test", variables: down)
    assert_equal 69, status.exitstatus, output
  end

  test "bobbin migrate whose connection the server ends as it waits its turn exits 69, saying the connection was lost" do
    skip_unless_postgres
    sessions_killed!
    name = "bobbin-migrate-#{Process.pid}"
    holder = PG.connect(TestDatabase.url) # a session of its own, outside the test's pool
    holder.exec("SELECT pg_advisory_lock(#{Bobbin::Schema::LOCK})") # another migrate's turn: this one waits
    migrate = Thread.new { run_bobbin("migrate", "-d", "#{TestDatabase.url_with_pool}&application_name=#{name}") }
    # Waiting its turn: its session has asked for the lock. Seen as it connected, a session ended there was opened again
    # by Active Record's own retry (the project's CI, on a slow host: the migrate then waited its turn for good).
    count = "SELECT count(*) FROM pg_stat_activity WHERE application_name = '#{name}' AND query LIKE '%pg_try_advisory_lock%'"
    wait_for("the migrate waiting its turn") { ActiveRecord::Base.connection.select_value(count).positive? }
    ActiveRecord::Base.connection.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '#{name}'")

    status, _, err = migrate.value
    assert_equal 69, status.exitstatus, err
    assert_equal 1, err.lines.size, err
    assert_match(/\Abobbin: migrate failed: lost the connection to the database: .*terminating connection due to administrator command; run it again once the server is back/, err)
  ensure
    holder&.close
  end
end
