# frozen_string_literal: true

require_relative "cli_helper"

# What each command takes: -d URL and -r FILE wherever it uses the database, --help on stdout, and an option or
# operand it does not have refused rather than ignored.
class CommandLineTest < Bobbin::TestCase
  include CLIHelper

  DATABASE_COMMANDS = [ %w[migrate], %w[counts], %w[recurring], %w[pause mail], %w[resume mail] ].freeze

  # Runs `bobbin ARGS` without DATABASE_URL, so only what the command line says can reach the database.
  def run_without_url(*args) = run_bobbin(*args, env: { "DATABASE_URL" => "" })

  test "migrate, counts, recurring, pause and resume reach the database given by -d URL, or by a -r file that connects", long: true do
    with_tmpdir do |dir|
      connects = File.join(dir, "connects.rb")
      File.write(connects, "Bobbin.connect(#{TestDatabase.url_with_pool.inspect})\n")
      [ [ "-d", TestDatabase.url_with_pool ], [ "-r", connects ] ].each do |given|
        DATABASE_COMMANDS.each do |command|
          status, out, err = run_without_url(*command, *given)
          assert_equal 0, status.exitstatus, "bobbin #{command.join(' ')} #{given.first}: #{err}"
          assert_equal command.first == "pause", Bobbin::QueuePause.exists?(queue: "mail"), "after #{command.join(' ')}" if command.last == "mail"
          assert_includes JSON.parse(out), "ready" if command == %w[counts]
          assert_equal "no recurring tasks (a supervisor records them when it starts)\n", out if command == %w[recurring]
        end
      end
    end
  end

  test "each command's --help goes to stdout with exit 0, and lists -d and -r where the command uses the database", long: true do
    once_per_run
    DATABASE_COMMANDS.map(&:first).push("work", "start", "queues").each do |command|
      status, out, err = run_without_url(command, "--help")
      assert_equal [ 0, "" ], [ status.exitstatus, err ], command
      assert_match(/\AUsage: bobbin #{command}/, out)
      assert_match(/-d, --database URL .*-r, --require FILE|-r, --require FILE .*-d, --database URL/m, out, command)
    end
  end

  test "the help shows retry's and discard's two forms, every column bobbin queues prints, and doctor's exit statuses", long: true do
    once_per_run
    assert_match(/\AUsage: bobbin doctor \[options\]\nExit 0 when the configuration fits; 1 when a check fails .* 78 when the checks cannot run/,
                 run_without_url("doctor", "--help")[1])
    %w[retry discard].each do |command|
      status, out, = run_without_url(command, "--help")
      assert_equal 0, status.exitstatus
      assert_match(/\AUsage: bobbin #{command} ID\.\.\. \[options\]\n   or: bobbin #{command} --failed\|--all \[filters\] \[options\]\n/, out)
    end
    assert_match(/^  queues   list queues: due, scheduled, blocked, running, failed, latency, paused$/, run_without_url("--help")[1])
  end

  test "--drain is work's alone: start and doctor refuse it instead of running on", long: true do
    once_per_run
    assert_match(/--drain/, run_without_url("work", "--help")[1])
    refute_match(/--drain/, run_without_url("start", "--help")[1])
    %w[start doctor].each { |command| assert_config_exit(run_without_url(command, "--threads", "1", "--drain"), /\Abobbin: invalid option: --drain$/) }
  end

  # Processes judge each other by heartbeat_interval and process_alive_threshold: a `bobbin work` that ignored the
  # file beat at the default 10 s beside a supervisor that, by the file, judged it dead after 4 and ran its jobs again.
  test "work reads the config file start reads: its settings, and its one pool when no flag gives one", long: true do
    with_tmpdir do |dir|
      config = ->(name, hash) { File.join(dir, name).tap { |path| File.write(path, hash.to_yaml) } }
      pool = config.call("pool.yml", { "heartbeat_interval" => 0.5, "workers" => [ { "queues" => [ "ticks" ], "threads" => 2 } ] })
      TickJob.enqueue("from the file's pool")
      Bobbin::Client::Enqueuer.enqueue(SettingJob, [ "heartbeat_interval" ], queue: "ticks")
      status, out, err = run_bobbin("work", "--drain", "-c", pool, "-r", File.join(ROOT, "test/support/worker_boot.rb"))
      assert_equal 0, status.exitstatus, err
      assert_match(/started: threads-2, queues ticks/, out + err)
      assert_equal 1, LedgerEntry.where("key LIKE 'tick from the file''s pool%'").count
      assert LedgerEntry.exists?(key: "heartbeat_interval=0.5"), "the file's settings are the worker's"

      bad = config.call("bad.yml", { "heartbeat_interval" => -1, "workers" => [ { "threads" => 1 } ] })
      assert_config_exit(run_bobbin("work", "--threads", "1", "--drain", "-c", bad), /heartbeat_interval/)
      two = config.call("two.yml", { "workers" => [ { "threads" => 1 }, { "fibers" => 2 } ] })
      assert_config_exit(run_bobbin("work", "--drain", "-c", two), /bobbin work runs one pool and the configuration has 2: give --fibers N or --threads N/)
      assert_equal 0, run_bobbin("work", "--threads", "1", "--drain", "-c", two).first.exitstatus, "the flags' pool"
    end
  end

  test "pause and resume say what they changed; a blank queue name is a usage error", long: true do
    assert_equal 1, Bobbin.pause("mail")
    assert_equal 0, Bobbin.pause("mail"), "paused already"
    assert_raises(ArgumentError) { Bobbin.pause(" ") }
    assert_equal [ 0, "paused mail (it already was)\n" ], run_bobbin("pause", "mail").then { |status, out, _| [ status.exitstatus, out ] }
    assert_equal [ 0, "resumed mail\n" ], run_bobbin("resume", "mail").then { |status, out, _| [ status.exitstatus, out ] }
    assert_equal [ 0, "was not paused: mail\n" ], run_bobbin("resume", "mail").then { |status, out, _| [ status.exitstatus, out ] }
    assert_config_exit(run_bobbin("pause", "\e[2Jclr"), /\Abobbin: pause: no job can be in a queue named "\\e\[2Jclr": /, exitstatus: 64)
    assert_not Bobbin::QueuePause.exists?(queue: "\e[2Jclr")
    status, _, err = run_bobbin("pause", "")
    assert_equal [ 64, "bobbin: pause: QUEUE must be a queue's name, got \"\"\n" ], [ status.exitstatus, err ]
    assert_not Bobbin::QueuePause.exists?(queue: "")
  end

  test "a missing or extra operand is a usage error (exit 64) that shows the command's usage", long: true do
    once_per_run
    { %w[pause] => /\Abobbin: pause: QUEUE missing \(usage: bobbin pause QUEUE \[options\]\)$/,
      %w[resume a b] => /\Abobbin: resume: unexpected "b" \(usage: bobbin resume QUEUE \[options\]\)$/,
      %w[counts mail] => /\Abobbin: counts: unexpected "mail" \(usage: bobbin counts \[options\]\)$/,
      %w[counts --queue mail] => /\Abobbin: invalid option: --queue$/ }.each do |args, pattern|
      status, out, err = run_without_url(*args)
      assert_equal [ 64, "" ], [ status.exitstatus, out ], args.join(" ")
      assert_match pattern, err
    end
  end

  # `bobbin start config/jobs.yml` (-c forgotten) ran config/bobbin.yml's pools, or the default pool, as if all were well.
  test "start, work and doctor refuse an operand (exit 64) instead of ignoring it" do
    once_per_run
    { %w[start config/jobs.yml] => "bobbin start [options]", %w[work --threads 1 production] => "bobbin work [options]" }.each do |args, usage|
      status, out, err = run_without_url(*args)
      assert_equal [ 64, "", "bobbin: #{args.first}: unexpected #{args.last.inspect} (usage: #{usage})\n" ], [ status.exitstatus, out, err ], args.join(" ")
    end
    status, out, err = run_bobbin("doctor", "config/jobs.yml", "--threads", "1")
    assert_equal [ 64, "", "bobbin: doctor: unexpected \"config/jobs.yml\" (usage: bobbin doctor [options])\n" ], [ status.exitstatus, out, err ]
  end
end
