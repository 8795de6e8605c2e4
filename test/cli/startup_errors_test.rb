# frozen_string_literal: true

require_relative "cli_helper"
require "uri"
require "bobbin/config/boot"

# Every way `bobbin` can fail before work starts gives one line naming the problem and the fix, and exit 78.
class StartupErrorsTest < Bobbin::TestCase
  include CLIHelper

  def sqlite_url(path) = "sqlite3:#{path}"

  # Runs a command with mounts of its own (a user namespace: no root needed where the kernel allows them).
  MOUNT_NAMESPACE = [ "unshare", "--user", "--map-root-user", "--mount" ].freeze

  def postgres_url(**parts)
    uri = URI(TestDatabase.url)
    parts.each { |part, value| uri.public_send("#{part}=", value) }
    uri.to_s
  end

  def postgres_port = URI(TestDatabase.url).then { |uri| uri.port || uri.query.to_s[/(?:\A|&)port=(\d+)/, 1]&.to_i || 5432 }

  test "a -r file that does not exist" do
    once_per_run
    %w[work start].each do |command|
      assert_config_exit(run_bobbin(command, "--threads", "1", "-r", "no/such_jobs.rb"),
                         %r{\Abobbin: -r no/such_jobs\.rb: no such file \(#{ROOT}/no/such_jobs\.rb\)})
    end
  end

  test "an unknown command is named, with the usage on stderr, and exit 64; help asked for is on stdout, exit 0" do
    once_per_run
    status, out, err = run_bobbin("strat")
    assert_equal [ 64, "" ], [ status.exitstatus, out ]
    assert_match(/\Abobbin: unknown command "strat"\nUsage: bobbin COMMAND/, err)
    %w[--help -h help].each do |help|
      status, out, err = run_bobbin(help)
      assert_equal [ 0, "" ], [ status.exitstatus, err ], help
      assert_match(/\AUsage: bobbin COMMAND/, out)
    end
  end

  test "a -c file that does not exist is named before the database is tried" do
    once_per_run
    %w[start doctor].each do |command|
      assert_config_exit(run_bobbin(command, "-c", "config/no_such_bobbin.yml", env: { "DATABASE_URL" => "" }),
                         %r{\Abobbin: config file config/no_such_bobbin\.yml not found})
    end
  end

  test "an IO_EVENT_SELECTOR this io-event lacks, for a fiber pool; thread pools do not mind", long: true do
    once_per_run
    %w[work start].each do |command|
      assert_config_exit(run_bobbin(command, "--fibers", "2", env: { "IO_EVENT_SELECTOR" => "Nope" }),
                         /\Abobbin: IO_EVENT_SELECTOR=Nope is not a selector of this io-event \(it has (URing, )?EPoll, Select; unset it/)
    end
    status, _, err = run_bobbin("doctor", "--fibers", "2", env: { "IO_EVENT_SELECTOR" => "Nope" })
    assert_equal 1, status.exitstatus, err

    status, _, err = run_bobbin("work", "--threads", "1", "--drain", env: { "IO_EVENT_SELECTOR" => "Nope" })
    assert_equal 0, status.exitstatus, err
    pid = spawn_bobbin("start", "--threads", "1", env: { "IO_EVENT_SELECTOR" => "Nope" })
    ensure_killed(pid) do
      wait_for("a thread pool's supervisor to start its worker", timeout: 60) { Bobbin::ProcessRecord.where(kind: "worker").exists? }
    end
  end

  # `bobbin start` checked this only in each worker it forked: every worker crashed as it started, and the supervisor
  # restarted them for ever while `doctor` called the configuration fine (a trial).
  test "more fibers than this machine's vm.max_map_count can give stacks: start and work refuse at once, doctor says why" do
    once_per_run
    fibers = File.read("/proc/sys/vm/max_map_count").to_i.to_s
    %w[work start].each do |command|
      assert_config_exit(run_bobbin(command, "--fibers", fibers), /\Abobbin: fibers: #{fibers} needs about \d+ more memory mappings but vm.max_map_count is/)
    end
    assert_not Bobbin::ProcessRecord.exists?, "no worker started"
    status, out, err = run_bobbin("doctor", "--fibers", fibers)
    assert_equal 1, status.exitstatus, err
    assert_match(/✗ fibers: #{fibers} needs about \d+ more memory mappings/, out)
    status, out, err = run_bobbin("doctor", "--fibers", "2")
    refute_match(/memory mappings/, out + err)
  end

  test "an empty DATABASE_URL" do
    once_per_run
    assert_config_exit(run_bobbin("counts", env: { "DATABASE_URL" => "" }), /no database: DATABASE_URL is unset or empty; set it/)
    assert_config_exit(run_bobbin("start", "--threads", "1", env: { "DATABASE_URL" => " " }), /DATABASE_URL is unset or empty/)
  end

  test "a database URL of another database is named, without its password" do
    once_per_run
    status, out, err = result = run_bobbin("work", "--threads", "1", env: { "DATABASE_URL" => "mysql2://app:secret@127.0.0.1/app" })
    assert_config_exit(result, /\Abobbin: Bobbin runs on PostgreSQL or SQLite, not mysql2 \(give a postgres:\/\/… or sqlite3:path URL\)$/)
    refute_match(/secret/, out + err, status.inspect)
  end

  # URI's error repeats the whole URL: a password with a bare % or a space went to stderr in a backtrace (a trial).
  test "a database URL URI cannot parse is one line that does not show its password, from DATABASE_URL or -d", long: true do
    once_per_run
    [ "s3cret%PW", "a^b", "s3cret PW", "s3cret-no-colon", "s3cret-one-slash", "s3cret-three-slashes" ].each do |password|
      # The last three lack the ":" after the scheme, or have a "/" too few or too many: Active Record's error repeated
      # the URL, or a server was asked for the database "app:s3cret…@127.0.0.1:5432/app" (its log keeps the password).
      url = { "s3cret-no-colon" => "postgres//app:#{password}@127.0.0.1:5432/app",
              "s3cret-one-slash" => "postgres:/app:#{password}@127.0.0.1:5432/app",
              "s3cret-three-slashes" => "postgres:///app:#{password}@127.0.0.1:5432/app" }.fetch(password, "postgres://app:#{password}@127.0.0.1:5432/app")
      from_env = run_bobbin("counts", env: { "DATABASE_URL" => url })
      # (Active Record reads DATABASE_URL as it loads, and URI's refusal comes then; the other, as Bobbin connects.)
      assert_config_exit(from_env, /\Abobbin: (DATABASE_URL|the database URL) is not a URL Active Record can read: write it postgres:\/\/.* percent-encode/)
      from_flag = run_bobbin("counts", "-d", url, env: { "DATABASE_URL" => nil })
      assert_config_exit(from_flag, /\Abobbin: the (database|-d) URL is not a URL Active Record can read/)
      [ from_env, from_flag ].each { |(_, out, err)| refute_match(/s3cret|a\^b/, out + err) }
    end
  end

  test "a -r file that calls Bobbin.connect needs no DATABASE_URL; one that does not is told to" do
    with_tmpdir do |dir|
      ran = File.join(dir, "ran")
      File.write(File.join(dir, "jobs.rb"), <<~RUBY)
        Bobbin.connect("sqlite3:#{dir}/jobs.sqlite3")
        Bobbin.migrate!
        class SelfConnectedJob
          include Bobbin::Job
          def perform(path) = File.write(path, "ran in \#{Process.pid}")
        end
        SelfConnectedJob.enqueue(#{ran.inspect}) if Bobbin.counts.values.sum.zero?
      RUBY
      status, _, err = run_bobbin("work", "--threads", "1", "--drain", "-r", File.join(dir, "jobs.rb"), env: { "DATABASE_URL" => "" })
      assert status.success?, err
      assert_match(/\Aran in \d+\z/, File.read(ran))

      File.write(File.join(dir, "defines_only.rb"), "class DefinedOnlyJob; include Bobbin::Job; end\n")
      assert_config_exit(run_bobbin("work", "--threads", "1", "-r", File.join(dir, "defines_only.rb"), env: { "DATABASE_URL" => "" }),
                         /no database: DATABASE_URL is unset or empty and .*defines_only\.rb did not call Bobbin\.connect; set it/)
    end
  end

  test "a plain Ruby app whose Gemfile lacks the database's driver is told to add it", long: true do
    with_tmpdir do |dir|
      File.write(File.join(dir, "Gemfile"), %(source "https://rubygems.org"\ngem "bobbin", path: #{ROOT.inspect}\n))
      File.write(File.join(dir, "jobs.rb"), %(Bobbin.connect(ENV.fetch("JOBS_URL"))\n))
      bundle = ->(*command, env: {}) do # [status, stdout, stderr], as run_bobbin
        out, err, status = Bundler.with_unbundled_env do
          Open3.capture3({ "BUNDLE_GEMFILE" => File.join(dir, "Gemfile"), "BUNDLE_PATH" => File.join(ROOT, "vendor/bundle") }.merge(env),
                         "bundle", *command, chdir: dir)
        end
        [ status, out, err ]
      end
      status, _, err = bundle.call("install", "--local")
      assert status.success?, err

      { "sqlite3:#{dir}/jobs.sqlite3" => "sqlite3", "postgres://127.0.0.1/app" => "pg" }.each do |url, driver|
        scheme = url[/\A[^:]*/]
        assert_config_exit(bundle.call("exec", "bobbin", "work", "--threads", "1", env: { "DATABASE_URL" => url }),
                           /\Abobbin: a #{scheme}: URL needs the #{driver} gem, which is not in this bundle: add it to the Gemfile \(bundle add #{driver}\)$/)
        status, _, err = bundle.call("exec", "ruby", "-rbobbin", "jobs.rb", env: { "JOBS_URL" => url })
        assert_match(/needs the #{driver} gem.*\(Bobbin::ConfigurationError\)/, err, status.inspect)
      end
      refute File.exist?(File.join(dir, "jobs.sqlite3")), "nothing was created"
    end
  end

  test "a PostgreSQL database that does not exist" do
    skip_unless_postgres
    url = postgres_url(path: "/bobbin_no_such_database_#{Process.pid}")
    assert_config_exit(run_bobbin("work", env: { "DATABASE_URL" => url }),
                       /the database "bobbin_no_such_database_\d+" does not exist: create it \(createdb/)
  end

  # Active Record's message named only the host ("There is an issue connecting with your hostname: 127.0.0.1.").
  test "Bobbin.connect (plain Ruby) to a PostgreSQL server that refuses says what the driver said, in Active Record's error class" do
    skip_unless_postgres
    port = closed_port
    error = assert_raises(ActiveRecord::ConnectionNotEstablished) { Bobbin.connect("postgres://app:s3cret@127.0.0.1:#{port}/app") }
    assert_match(/\AThere is an issue connecting with your hostname: 127\.0\.0\.1\. \(PG::ConnectionBad: connection to server at "127\.0\.0\.1", port #{port} failed: Connection refused\)\z/,
                 error.message)
    refute_match(/s3cret/, error.message)
  ensure
    Bobbin.connect(TestDatabase.url_with_pool(name: TestDatabase.application_name))
  end

  test "Bobbin.connect (plain Ruby) to a PostgreSQL database that does not exist says so, without Rails' advice" do
    skip_unless_postgres
    error = assert_raises(Bobbin::ConfigurationError) { Bobbin.connect(postgres_url(path: "/bobbin_no_such_database_#{Process.pid}")) }
    assert_match(/\Athe database "bobbin_no_such_database_\d+" does not exist: create it \(createdb .*\(DATABASE_URL\)\z/, error.message)
    assert_kind_of ActiveRecord::NoDatabaseError, error.cause
  ensure
    Bobbin.connect(TestDatabase.url_with_pool(name: TestDatabase.application_name))
  end

  # DATABASE_URL="sqlite3:$DB_PATH" with DB_PATH unset: URI::InvalidComponentError went out of Bobbin.connect raw.
  test "Bobbin.connect (plain Ruby) to a SQLite URL without a path says it cannot read the URL" do
    once_per_run
    error = assert_raises(Bobbin::ConfigurationError) { Bobbin.connect("sqlite3:") }
    assert_match(/\Athe database URL is not a URL Active Record can read: write it postgres:.* or sqlite3:path/, error.message)
    assert_nil error.cause
  ensure
    Bobbin.connect(TestDatabase.url_with_pool(name: TestDatabase.application_name))
  end

  # `sqlite3:$JOBS_DB` with the variable unset: URI's error went out with a backtrace and exit 1 from the CLI, whose
  # check of the SQLite path came before Bobbin.connect.
  test "a SQLite URL without a path from the command line is one line saying it cannot read the URL, from -d or DATABASE_URL" do
    once_per_run
    assert_config_exit(run_bobbin("start", "--threads", "1", "-d", "sqlite3:", env: { "DATABASE_URL" => nil }),
                       /\Abobbin: the -d URL is not a URL Active Record can read: write it postgres:.* or sqlite3:path/)
    assert_config_exit(run_bobbin("counts", env: { "DATABASE_URL" => "sqlite3:" }),
                       /\Abobbin: DATABASE_URL is not a URL Active Record can read: write it postgres:.* or sqlite3:path/)
  end

  test "a queue database of Bobbin's own that does not exist is named, not the app's (PostgreSQL)" do
    skip_unless_postgres
    Bobbin::Record.establish_connection(postgres_url(path: "/bobbin_no_such_queue_#{Process.pid}")) # as config.bobbin.connects_to does
    error = assert_raises(Bobbin::ConfigurationError) { Bobbin::Boot.database_step { Bobbin::Boot.check_tables } }
    assert_match(/\Athe database "bobbin_no_such_queue_\d+" does not exist: create it \(createdb bobbin_no_such_queue_\d+,/, error.message)
  ensure
    Bobbin::Record.remove_connection
  end

  test "a queue database of Bobbin's own that SQLite cannot open is named, not the app's" do
    once_per_run
    with_tmpdir do |dir| # a directory where the file should be: SQLite cannot open it, even for root
      Bobbin::Record.establish_connection(sqlite_url(dir))
      error = assert_raises(Bobbin::ConfigurationError) { Bobbin::Boot.database_step { Bobbin::Boot.check_tables } }
      assert_match(/\Acannot write the SQLite database #{dir} \(unable to open database file\)/, error.message)
    ensure
      Bobbin::Record.remove_connection
    end
  end

  # Active Record drops a SQLite URL's host: sqlite3://db/jobs.sqlite3 opened /jobs.sqlite3, at the filesystem's root.
  test "a SQLite URL with a host part (sqlite3://db/jobs.sqlite3) is refused with the spelling that works, from the CLI and Bobbin.connect", long: true do
    once_per_run
    with_tmpdir do |dir|
      # The host dropped, this URL would name #{dir}/jobs.sqlite3: a file the test can look for.
      url = "sqlite3://db#{dir}/jobs.sqlite3"
      message = %r{the SQLite URL #{url} has a host part \(db\), which Active Record ignores: write sqlite3:db#{dir}/jobs\.sqlite3 for a path relative to the working directory, or sqlite3:///absolute/path/jobs\.sqlite3}
      assert_config_exit(run_bobbin("counts", env: { "DATABASE_URL" => url }), /\Abobbin: #{message}$/)
      assert_config_exit(run_bobbin("migrate", "-d", "sqlite3://./jobs.sqlite3"), %r{\Abobbin: the SQLite URL sqlite3://\./jobs\.sqlite3 has a host part \(\.\).* write sqlite3:\./jobs\.sqlite3 })
      _, err, status = Open3.capture3(*ruby, "-I", File.join(ROOT, "lib"), "-rbobbin", "-e", "Bobbin.connect(ARGV[0])", url, chdir: dir)
      refute status.success?
      assert_match(/#{message} \(Bobbin::ConfigurationError\)/, err)
      refute File.exist?(File.join(dir, "jobs.sqlite3")), "nothing was created"
      refute File.exist?(File.join(ROOT, "jobs.sqlite3"))
      status, = run_bobbin("migrate", env: { "DATABASE_URL" => "sqlite3://localhost#{dir}/jobs.sqlite3" })
      assert status.success?, "sqlite3://localhost/absolute/path is an absolute path"
      assert File.exist?(File.join(dir, "jobs.sqlite3"))
    end
  end

  # The first process to open a SQLite file makes its -shm and -wal files; on a full disk SQLite says only "disk I/O
  # error", and `bobbin work` said "database error before starting: disk I/O error: (ActiveRecord::StatementInvalid);
  # check DATABASE_URL" (a trial: a 3 MB tmpfs filled up), where a running process's write said the disk was full.
  test "a SQLite file on a full disk is said to be on a full disk, not a bad DATABASE_URL" do
    once_per_run
    skip("this machine cannot mount a filesystem of its own") unless system(*MOUNT_NAMESPACE, "true", [ :out, :err ] => File::NULL)
    with_tmpdir do |dir|
      made = File.join(dir, "jobs.sqlite3")
      assert run_bobbin("migrate", env: { "DATABASE_URL" => sqlite_url(made) }).first.success?
      full = File.join(dir, "full")
      Dir.mkdir(full)
      path = File.join(full, "jobs.sqlite3")
      # A 1 MB filesystem of the command's own over `full`: the file copied in, the rest filled.
      fill = "mount -t tmpfs -o size=1m tmpfs #{full} && cp #{made} #{path} && (cat /dev/zero > #{full}/filler 2>/dev/null; true) && exec \"$@\""
      result = run_bobbin("work", "--threads", "1", env: { "DATABASE_URL" => sqlite_url(path) }, prefix: [ *MOUNT_NAMESPACE, "sh", "-c", fill, "sh" ])
      assert_config_exit(result, %r{\Abobbin: the disk holding the database #{path} is full \(disk I/O error\): free space on it$})
    end
  end

  # A process stopped or frozen mid-write (SIGSTOP, a debugger) keeps SQLite's write lock: a process starting then waited
  # out its busy timeout and crashed with a backtrace, exit 1 (a stressed run of the suite).
  test "a SQLite database another process keeps locked past the busy timeout: one line saying so, exit 69" do
    once_per_run
    with_tmpdir do |dir|
      path = File.join(dir, "jobs.sqlite3")
      assert run_bobbin("migrate", env: { "DATABASE_URL" => sqlite_url(path) }).first.success?
      holder = SQLite3::Database.new(path)
      holder.execute("BEGIN IMMEDIATE")
      %w[start work].each do |command|
        assert_config_exit(run_bobbin(command, "--threads", "1", env: { "DATABASE_URL" => "#{sqlite_url(path)}?timeout=200" }),
                           %r{\Abobbin: the SQLite database #{path} stayed locked past its busy timeout \(database is locked\): another process holds its write lock}, exitstatus: 69)
      end
    ensure
      holder&.close
    end
  end

  test "a SQLite path in a directory that does not exist is not created" do
    once_per_run
    with_tmpdir do |dir|
      path = File.join(dir, "missing", "jobs.sqlite3")
      assert_config_exit(run_bobbin("migrate", env: { "DATABASE_URL" => sqlite_url(path) }),
                         %r{SQLite database #{path} is in a directory that does not exist \(#{dir}/missing\): create it})
      refute File.exist?(File.dirname(path))
    end
  end

  test "missing tables say to run bobbin migrate (SQLite); a missing file is not created, except by migrate", long: true do
    once_per_run
    with_tmpdir do |dir|
      path = File.join(dir, "empty.sqlite3")
      url = sqlite_url(path)
      %w[start work doctor counts].each do |command|
        assert_config_exit(run_bobbin(command, "-d", url),
                           %r{the SQLite database #{path} does not exist \(check the path in the -d URL\): to create it, run `bobbin migrate`})
      end
      refute File.exist?(path), "a typo in a URL makes no new database"
      SQLite3::Database.new(path).close
      %w[start work doctor counts].each do |command|
        assert_config_exit(run_bobbin(command, env: { "DATABASE_URL" => url }),
                           /Bobbin's tables are missing \(bobbin_jobs, bobbin_processes, bobbin_pauses\) in the SQLite file #{path}: run `bobbin migrate`/)
      end
      File.delete(path)
      status, output = run_bobbin("migrate", env: { "DATABASE_URL" => url })
      assert_equal [ 0, "created Bobbin's tables (schema version #{Bobbin::Schema::VERSION})\n" ], [ status.exitstatus, output ]
      status, output = run_bobbin("migrate", env: { "DATABASE_URL" => url })
      assert_equal [ 0, "Bobbin's tables are at schema version #{Bobbin::Schema::VERSION} already\n" ], [ status.exitstatus, output ]
      SQLite3::Database.new(path) { |db| db.execute("INSERT INTO bobbin_schema (version) VALUES (#{Bobbin::Schema::VERSION + 1})") }
      status, output = run_bobbin("migrate", env: { "DATABASE_URL" => url })
      assert_equal [ 0, "Bobbin's tables are at schema version #{Bobbin::Schema::VERSION + 1}, newer than this Bobbin's " \
                        "(#{Bobbin::Schema::VERSION}: rolled back?): nothing done\n" ], [ status.exitstatus, output ]
      assert_equal 0, run_bobbin("counts", env: { "DATABASE_URL" => url })[0].exitstatus
    end
  end

  test "a -r file that does not parse, or raises as it loads, is one line naming the file and the line" do
    with_tmpdir do |dir|
      File.write(File.join(dir, "unparsed.rb"), "class Foo\n  def x(\nend\n")
      File.write(File.join(dir, "raising.rb"), "# jobs\nX = ENV.fetch(\"BOBBIN_TEST_NOT_SET\")\n")
      assert_config_exit(run_bobbin("work", "--threads", "1", "-r", File.join(dir, "unparsed.rb")),
                         %r{-r \S+/unparsed\.rb: \S+/unparsed\.rb:3: unexpected 'end'.* \(SyntaxError\)})
      assert_config_exit(run_bobbin("start", "--threads", "1", "-r", File.join(dir, "raising")),
                         %r{-r \S+/raising raised as it loaded: KeyError: key not found: "BOBBIN_TEST_NOT_SET" \(\S+/raising\.rb:2\)})
    end
  end

  test "tables from an older Bobbin say to run bobbin migrate, before any worker is forked" do
    require "sqlite3"
    with_tmpdir do |dir|
      path = File.join(dir, "old.sqlite3")
      assert_equal 0, run_bobbin("migrate", env: { "DATABASE_URL" => sqlite_url(path) })[0].exitstatus
      db = SQLite3::Database.new(path)
      db.execute("DROP TABLE bobbin_schema")
      assert_config_exit(run_bobbin("start", "--threads", "1", env: { "DATABASE_URL" => sqlite_url(path) }),
                         /tables are at schema version 1 but this Bobbin needs \d+: run `bobbin migrate`/)
      assert_equal 0, db.get_first_value("SELECT count(*) FROM bobbin_processes"), "no supervisor or worker registered"
      status, output = run_bobbin("migrate", env: { "DATABASE_URL" => sqlite_url(path) })
      assert_equal [ 0, "upgraded Bobbin's tables from schema version 1 to #{Bobbin::Schema::VERSION}\n" ], [ status.exitstatus, output ]
    ensure
      db&.close
    end
  end

  test "missing tables say to run bobbin migrate (PostgreSQL)" do
    skip_unless_postgres
    schema = "bobbin_cli_empty_#{Process.pid}"
    ActiveRecord::Base.connection.execute("DROP SCHEMA IF EXISTS #{schema} CASCADE") # named after this pid: one there is a killed run's
    ActiveRecord::Base.connection.execute("CREATE SCHEMA #{schema}")
    url = TestDatabase.url_with_pool + "&schema_search_path=#{schema}"
    assert_config_exit(run_bobbin("start", "--threads", "1", env: { "DATABASE_URL" => url }), /tables are missing .*run `bobbin migrate`/)
  ensure
    ActiveRecord::Base.connection.execute("DROP SCHEMA IF EXISTS #{schema} CASCADE") if schema
  end

  test "SQLite in a read-only directory", long: true do
    once_per_run
    setpriv = "/usr/bin/setpriv"
    prefix = Process.uid.zero? ? [ setpriv, "--reuid=65534", "--regid=65534", "--clear-groups" ] : []
    skip "running as root without #{setpriv} to drop privileges" if prefix.any? && !File.executable?(setpriv)
    with_tmpdir do |dir|
      assert_equal 0, run_bobbin("migrate", env: { "DATABASE_URL" => sqlite_url("#{dir}/jobs.sqlite3") })[0].exitstatus
      Dir.glob("#{dir}/jobs.sqlite3-*").each { |file| File.delete(file) }
      File.chmod(0o666, "#{dir}/jobs.sqlite3")
      File.chmod(0o555, dir)
      env = { "HOME" => Dir.tmpdir }
      assert_config_exit(run_bobbin("start", "--threads", "1", env: env.merge("DATABASE_URL" => sqlite_url("#{dir}/jobs.sqlite3")), prefix: prefix),
                         %r{cannot write the SQLite database #{dir}/jobs\.sqlite3 .*write access to the file and to its directory})
      assert_config_exit(run_bobbin("migrate", env: env.merge("DATABASE_URL" => sqlite_url("#{dir}/new.sqlite3")), prefix: prefix),
                         %r{cannot write the SQLite database #{dir}/new\.sqlite3})
      # A script's Bobbin.connect: SQLite's own "attempt to write a readonly database: SELECT sqlite_version(*)" went out
      # as ActiveRecord::StatementInvalid (a trial).
      script = "begin; Bobbin.connect(ARGV[0]); rescue Bobbin::ConfigurationError => e; puts(e.message); end"
      said, = Open3.capture2e(env, *prefix, *ruby, "-I", File.join(ROOT, "lib"), "-r", "bobbin", "-e", script, sqlite_url("#{dir}/jobs.sqlite3"), chdir: dir)
      assert_match(%r{\Acannot write the SQLite database #{dir}/jobs\.sqlite3 .*write access to the file and to its directory}, said)

      File.chmod(0o777, dir) # the file read-only, its directory not: it opens, reads, and its first write is refused
      File.chmod(0o444, "#{dir}/jobs.sqlite3")
      %w[start work].each do |command|
        assert_config_exit(run_bobbin(command, "--threads", "1", env: env.merge("DATABASE_URL" => sqlite_url("#{dir}/jobs.sqlite3")), prefix: prefix),
                           %r{cannot write the SQLite database #{dir}/jobs\.sqlite3 \(attempt to write a readonly database\)})
      end
    ensure
      File.chmod(0o755, dir)
    end
  end

  # Runs the block with a PostgreSQL role of the test's own (`attributes` as CREATE ROLE takes them) and a URL that
  # connects as it; the role is dropped after.
  def with_role(name, attributes)
    role = "#{name}_#{Process.pid}"
    ActiveRecord::Base.connection.execute("DROP ROLE IF EXISTS #{role}") # named after this pid: one there is a killed run's
    ActiveRecord::Base.connection.execute("CREATE ROLE #{role} #{attributes} PASSWORD 'secret'")
    yield role, "postgres://#{role}:secret@127.0.0.1:#{postgres_port}#{URI(TestDatabase.url).path}"
  ensure
    ActiveRecord::Base.connection.execute("DROP ROLE IF EXISTS #{role}") if role
  end

  # SSL settings that cannot work with the server (sslmode=verify-full without the CA's certificate, a server without SSL,
  # an sslmode libpq does not know) are mended by no restart either: exit 78 naming the settings, not 69 and "is the
  # server running?".
  test "PostgreSQL: SSL settings that cannot work with the server get one line naming them, exit 78" do
    skip_unless_postgres
    url = "postgres://127.0.0.1:#{postgres_port}#{URI(TestDatabase.url).path}"
    { "sslmode=verify-full&sslrootcert=/nonexistent/root.crt" => /root certificate file "\/nonexistent\/root.crt" does not exist|server does not support SSL/,
      "sslmode=bogus" => /invalid sslmode value/ }.each do |settings, said|
      assert_config_exit(run_bobbin("start", "--threads", "1", env: { "DATABASE_URL" => "#{url}?#{settings}" }),
                         /the connection's SSL settings do not work with this server: .*(#{said}).*; check sslmode, sslrootcert, sslcert and sslkey in DATABASE_URL/)
    end
  end

  test "PostgreSQL refusing the connection for too many clients" do
    skip_unless_postgres
    with_role("bobbin_cli_full", "LOGIN CONNECTION LIMIT 0") do |role, url|
      assert_config_exit(run_bobbin("start", "--threads", "1", env: { "DATABASE_URL" => url }),
                         /refused the connection, it has too many already \(.*too many connections for role "#{role}"\): raise max_connections/, exitstatus: 69)
    end
  end

  # A role that may not log in, or a URL without the password the server asks for, is mended by no restart: exit 78 (systemd's
  # RestartPreventExitStatus), not 69 and "is the server running?", which had the process manager restart it for ever.
  test "PostgreSQL turning the role away for good: one that may not log in, or no password given" do
    skip_unless_postgres
    with_role("bobbin_cli_nologin", "NOLOGIN") do |role, url|
      assert_config_exit(run_bobbin("start", "--threads", "1", env: { "DATABASE_URL" => url }),
                         /turned the connection away: .*role "#{role}" is not permitted to log in; check the user name and password in DATABASE_URL/)

      ActiveRecord::Base.connection.execute("ALTER ROLE #{role} LOGIN")
      without_password = url.sub(":secret@", "@")
      status, _, err = result = run_bobbin("start", "--threads", "1", env: { "DATABASE_URL" => without_password, "PGPASSFILE" => "/nonexistent/.pgpass" })
      skip "this server lets #{role} in without a password (pg_hba.conf trusts 127.0.0.1)" unless err.include?("no password supplied")
      assert_config_exit(result, /turned the connection away: .*no password supplied; check the user name and password/)
      refute_match(/is the server running/, err, status.inspect)
    end
  end

  test "doctor with the database down" do
    url = "postgres://127.0.0.1:#{closed_port}/bobbin"
    assert_config_exit(run_bobbin("doctor", "--threads", "1", env: { "DATABASE_URL" => url }),
                       /cannot connect to the database: .*Connection refused; is the server running, and is DATABASE_URL right\?/, exitstatus: 69)
    assert_config_exit(run_bobbin("doctor", "--threads", "1", "-d", url),
                       /cannot connect to the database: .*Connection refused; is the server running, and is the -d URL right\?/, exitstatus: 69)
  end

  test "errors about a -d URL name it, not DATABASE_URL" do
    assert_config_exit(run_bobbin("work", "--threads", "1", "-d", "sqlite3:tmp/no-such-dir-#{Process.pid}/jobs.sqlite3"),
                       /the SQLite database .*jobs\.sqlite3 is in a directory that does not exist .*: create it or fix the path in the -d URL/)
    skip_unless_postgres
    url = postgres_url(path: "/bobbin_no_such_database_#{Process.pid}")
    assert_config_exit(run_bobbin("work", "--threads", "1", "-d", url), /the database "bobbin_no_such_database_\d+" does not exist: .*\(the -d URL\)$/)
  end
end
