# frozen_string_literal: true

require "test_helper"

class RecurringTaskTest < Bobbin::TestCase
  def task(**options) = Bobbin::Recurring::Task.parse("t", { schedule: "every second", class: "TickJob" }.merge(options), "recurring.yml: test.t")

  test "a task takes cron or natural schedules, a class with arguments or a command" do
    assert_equal [ "TickJob", [ "x" ] ], task(args: "x").then { |t| [ t.class_name, t.arguments ] }
    assert_equal "0 3 * * * UTC", task(schedule: "every day at 3am").cron.to_cron_s
    assert_equal "Session.delete_all", Bobbin::Recurring::Task.parse("p", { schedule: "*/5 * * * *", command: "Session.delete_all" }, "w").command
  end

  test "bad tasks are refused naming the file, task and key" do
    error = assert_raises(Bobbin::ConfigurationError) { task(schedule: "whenever") }
    assert_match(/recurring.yml: test.t.schedule: "whenever" is not a schedule fugit understands/, error.message)
    [ nil, "", "  " ].each do |blank| # fugit reads "" as every minute
      error = assert_raises(Bobbin::ConfigurationError) { task(schedule: blank) }
      assert_match(/recurring.yml: test.t.schedule: missing/, error.message)
    end
    error = assert_raises(Bobbin::ConfigurationError) { Bobbin::Recurring::Task.parse("t", { class: "TickJob" }, "recurring.yml: test.t") }
    assert_match(/recurring.yml: test.t.schedule: missing/, error.message)
    error = assert_raises(Bobbin::ConfigurationError) { task(command: "x") }
    assert_match(/exactly one of class: .* or command:/, error.message)
    [ nil, "", " " ].each do |blank| # `class:` left empty passed, and failed at every tick; a blank command ran nothing
      error = assert_raises(Bobbin::ConfigurationError) { task(class: blank) }
      assert_match(/recurring.yml: test.t.class: blank \(give a job class\)/, error.message)
      error = assert_raises(Bobbin::ConfigurationError) { Bobbin::Recurring::Task.parse("t", { schedule: "every second", command: blank }, "recurring.yml: test.t") }
      assert_match(/recurring.yml: test.t.command: blank \(give Ruby code\)/, error.message)
    end
    # Passed at boot, these were refused at every tick: the task never ran.
    [ "", "a, b", " mail", "x" * 256 ].each do |queue|
      error = assert_raises(Bobbin::ConfigurationError, queue) { task(queue: queue) }
      assert_match(/\Arecurring.yml: test.t.queue: queue must be a non-empty String/, error.message)
    end
    [ 2**31, -2**31 - 1, "5" ].each do |priority|
      error = assert_raises(Bobbin::ConfigurationError, priority.inspect) { task(priority: priority) }
      assert_match(/\Arecurring.yml: test.t.priority: must be a whole number from -2147483648 to 2147483647/, error.message)
    end
    assert_equal [ "mail", 2**31 - 1 ], task(queue: :mail, priority: 2**31 - 1).then { |t| [ t.queue, t.priority ] }
    error = assert_raises(Bobbin::ConfigurationError) { task(every: 2) }
    assert_match(/unknown key "every"/, error.message)
  end

  # fugit reads these as something else (every minute; minutes 0, 7, …, 56 then 0; daily), and they passed at boot.
  test "an interval cron cannot keep is refused, saying what fugit read it as; one it can is kept", long: true do
    { "every 90 seconds" => "* * * * *", "every 7 minutes" => "0,7,14,21,28,35,42,49,56 * * * *", "every 36 hours" => "0 0 * * *",
      "every 7 days" => "0 0 1,8,15,22,29 * *", "every 2 days" => "0 0 #{(1..31).step(2).to_a.join(',')} * *" }.each do |schedule, read|
      error = assert_raises(Bobbin::ConfigurationError) { task(schedule: schedule) }
      assert_equal "recurring.yml: test.t.schedule: #{schedule.inspect} cannot be kept by cron (fugit reads it as \"#{read}\"); use an interval that divides " \
                   "the next unit evenly (every 30 seconds, every 20 minutes, every 6 hours) or a cron expression", error.message
    end
    { "every 30 seconds" => 30, "every 20 minutes" => 1200, "every 6 hours" => 21_600, "every 24 hours" => 86_400, "every 1 day" => 86_400 }.each do |schedule, seconds|
      ticks = task(schedule: schedule).ticks(Time.utc(2026, 1, 1), Time.utc(2026, 1, 4))
      assert_equal [ seconds ], ticks.each_cons(2).map { |a, b| b - a }.uniq, schedule
    end
  end

  test "ticks lists each tick after since up to now; latest_tick is the last one due" do
    t = task(schedule: "*/2 * * * * *")
    since = Time.utc(2026, 1, 1, 0, 0, 1)
    assert_equal [ 2, 4, 6 ], t.ticks(since, since + 5.5).map(&:sec)
    assert_equal 6, t.latest_tick(since + 5.5).sec
    assert_equal 8, t.next_time(since + 6).sec
  end

  # Schedulers on hosts in different zones must agree on every tick: each tick is stored once by its time.
  test "a schedule that names no zone is in UTC, whatever the process's zone; one that names a zone is in that zone" do
    zone = ENV["TZ"]
    ENV["TZ"] = "America/Los_Angeles"
    noon = Time.utc(2026, 11, 26, 12)
    assert_equal Time.utc(2026, 11, 27, 3), task(schedule: "0 3 * * *").next_time(noon)
    assert_equal Time.utc(2026, 11, 27, 3), task(schedule: "every day at 3am").next_time(noon)
    assert_equal [ Time.utc(2026, 11, 27, 3) ], task(schedule: "0 3 * * *").ticks(noon, noon + 86_400)
    assert_equal Time.utc(2026, 11, 26, 3), task(schedule: "0 3 * * *").latest_tick(noon)
    assert_equal Time.utc(2026, 11, 27, 8), task(schedule: "0 3 * * * America/New_York").next_time(noon)
  ensure
    ENV["TZ"] = zone
  end

  # Solid Queue reads such a schedule in the Rails app's config.time_zone: a recurring.yml ported from it, in an app of
  # Tokyo, ran every task nine hours late (a trial). The Railtie sets the zone from that setting.
  test "recurring_time_zone: a schedule that names no zone is in it (a tz or Rails name); one that names a zone keeps its own" do
    noon = Time.utc(2026, 11, 26, 12)
    Bobbin.config.recurring_time_zone = "Tokyo"
    assert_equal "Asia/Tokyo", Bobbin.config.recurring_time_zone
    assert_equal Time.utc(2026, 11, 26, 18), task(schedule: "every day at 3am").next_time(noon), "03:00 in Tokyo"
    assert_equal Time.utc(2026, 11, 26, 18), Bobbin::Recurring::Task.timing("t", "0 3 * * *").next_time(noon), "a stored task's next run"
    assert_equal Time.utc(2026, 11, 27, 8), task(schedule: "0 3 * * * America/New_York").next_time(noon)
    Bobbin.config.recurring_time_zone = "Europe/Paris"
    assert_equal Time.utc(2026, 11, 27, 2), task(schedule: "0 3 * * *").next_time(noon)
    Bobbin.config.recurring_time_zone = "Etc/UTC"
    assert_equal "UTC", Bobbin.config.recurring_time_zone
    [ "Mars/Olympus", "", nil, 9 ].each do |zone|
      error = assert_raises(Bobbin::ConfigurationError) { Bobbin.config.recurring_time_zone = zone }
      assert_match(/recurring_time_zone: a time zone \("Europe\/Paris", "Tokyo", "UTC"\), got #{Regexp.escape(zone.inspect)}/, error.message)
    end
    assert_equal "UTC", Bobbin.config.recurring_time_zone, "unchanged by a refused value"
  end

  # fugit's ticks are instants: the night New York's clocks go back, 01:30 comes twice (EDT, then EST).
  test "in a zone with daylight saving time, a wall time its clocks repeat ticks once; one they skip does not tick" do
    nightly = task(schedule: "30 1 * * * America/New_York")
    assert_equal [ Time.utc(2026, 11, 1, 5, 30), Time.utc(2026, 11, 2, 6, 30) ], nightly.ticks(Time.utc(2026, 10, 31, 12), Time.utc(2026, 11, 2, 12))
    assert_equal Time.utc(2026, 11, 2, 6, 30), nightly.next_time(Time.utc(2026, 11, 1, 5, 30))
    assert_equal Time.utc(2026, 11, 1, 5, 30), nightly.latest_tick(Time.utc(2026, 11, 1, 7))
    hourly = task(schedule: "0 * * * * America/New_York").ticks(Time.utc(2026, 11, 1, 4, 30), Time.utc(2026, 11, 1, 8))
    assert_equal [ 5, 6, 7, 8 ].map { |hour| Time.utc(2026, 11, 1, hour) }, hourly, "a schedule of every hour ticks on through the repeated one"
    assert_equal 12, task(schedule: "*/10 * * * * America/New_York").ticks(Time.utc(2026, 11, 1, 5), Time.utc(2026, 11, 1, 7)).size
    assert_equal [ 5, 7, 8 ].map { |hour| Time.utc(2026, 11, 1, hour) }, task(schedule: "0 1-3 * * * America/New_York").ticks(Time.utc(2026, 11, 1, 4), Time.utc(2026, 11, 1, 8)),
                 "named hours: 01:00 once (EDT), 02:00 and 03:00 EST"
    stored = Bobbin::RecurringTask.new(key: "t", schedule: "30 1 * * * America/New_York") # what the dashboard, CLI and Mission Control show
    assert_equal Time.utc(2026, 11, 2, 6, 30), stored.next_run_at(Time.utc(2026, 11, 1, 5, 40)), "not 01:30 EST, the repeat that does not tick"
    assert_equal Time.utc(2026, 11, 1, 5, 30), stored.next_run_at(Time.utc(2026, 11, 1, 5))
    spring = task(schedule: "30 2 * * * America/New_York").ticks(Time.utc(2026, 3, 7, 12), Time.utc(2026, 3, 9, 12))
    assert_equal [ Time.utc(2026, 3, 9, 6, 30) ], spring, "no 02:30 on the night the clocks skip it"
  end

  # Lord Howe Island's clocks go back 30 minutes, Troll's 2 hours: each ticked twice (a review).
  test "a wall time repeated by clocks that go back by other than an hour ticks once" do
    lord_howe = task(schedule: "45 1 * * * Australia/Lord_Howe").ticks(Time.utc(2026, 4, 4, 12), Time.utc(2026, 4, 5, 16))
    assert_equal [ Time.utc(2026, 4, 4, 14, 45), Time.utc(2026, 4, 5, 15, 15) ], lord_howe, "01:45 +11 that night, then 01:45 +10:30 the next"
    [ Time.utc(2026, 4, 4, 15, 15), Time.utc(2026, 4, 4, 16), Time.utc(2026, 4, 5, 10) ].each do |now|
      assert_equal Time.utc(2026, 4, 4, 14, 45), task(schedule: "45 1 * * * Australia/Lord_Howe").latest_tick(now), "the latest tick at #{now}: 01:45 +11"
    end
    troll = task(schedule: "30 1 * * * Antarctica/Troll").ticks(Time.utc(2026, 10, 24, 12), Time.utc(2026, 10, 26, 12))
    assert_equal [ Time.utc(2026, 10, 24, 23, 30), Time.utc(2026, 10, 26, 1, 30) ], troll, "01:30 +02 that night, then 01:30 +00 the next"
  end

  # The hour a process's own zone repeats: times fugit handed back in that zone ("01:10 EDT") it could not read again.
  test "in a process whose zone repeats an hour, every instant of it has a latest and a next tick" do
    zone = ENV["TZ"]
    ENV["TZ"] = "America/New_York"
    every5 = task(schedule: "*/5 * * * *")
    (Time.utc(2026, 11, 1, 4, 50).to_i..Time.utc(2026, 11, 1, 7, 10).to_i).step(60) do |seconds|
      now = Time.at(seconds).utc
      assert_equal Time.at(seconds - (seconds % 300)).utc, every5.latest_tick(now), "latest tick at #{now}"
      assert_equal Time.at(seconds - (seconds % 300) + 300).utc, every5.next_time(now), "next tick after #{now}"
    end
    assert_equal Time.utc(2026, 11, 1, 5, 30), task(schedule: "30 1 * * * America/New_York").latest_tick(Time.utc(2026, 11, 1, 5, 40))
  ensure
    ENV["TZ"] = zone
  end

  test "config/recurring.yml: the environment's section becomes tasks; another environment's is ignored" do
    Dir.mktmpdir do |dir|
      path = File.join(dir, "recurring.yml")
      File.write(path, <<~YAML)
        production:
          nightly: { class: TickJob, args: [ n ], schedule: every day at 3am, queue: reports, priority: 5 }
        development:
          purge: { command: "1 + 1", schedule: every minute }
      YAML
      tasks = Bobbin::Recurring.load_file(path, env: "production")
      assert_equal [ [ "nightly", "reports", 5 ] ], tasks.map { |t| [ t.key, t.queue, t.priority ] }
      assert_equal tasks.first, Bobbin.config.recurring_tasks["nightly"]
    end
  end

  # Solid Queue reads a recurring.yml without environment sections as the tasks of every environment
  # (SolidQueue::Configuration#config_from); such a file, ported as the README says it ports, scheduled nothing.
  test "config/recurring.yml: a file of tasks without sections is read for every environment, as Solid Queue reads it" do
    Dir.mktmpdir do |dir|
      path = File.join(dir, "recurring.yml")
      File.write(path, <<~YAML)
        nightly: { class: TickJob, args: [ 42, { status: done } ], schedule: every day at 3am, queue: reports }
        purge:
          command: "1 + 1"
          schedule: every minute
      YAML
      %w[production development].each do |env|
        tasks = Bobbin::Recurring.load_file(path, env: env)
        assert_equal [ [ "nightly", "TickJob", "reports" ], [ "purge", nil, nil ] ], tasks.map { |t| [ t.key, t.class_name, t.queue ] }, env
      end
      error = assert_raises(Bobbin::ConfigurationError) do
        File.write(path, "nightly: { class: TickJob, schedule: whenever }\n")
        Bobbin::Recurring.load_file(path, env: "production")
      end
      assert_match(/recurring.yml: nightly.schedule: "whenever" is not a schedule/, error.message)

      File.write(path, "production:\n  nightly: { class: TickJob, schedule: every day at 3am }\n") # sections: as before
      assert_empty Bobbin::Recurring.load_file(path, env: "development")
    end
  end

  # A task written as a string (`nightly: "every day at 3am"`), left empty or as a list stopped `bobbin start` and
  # `bobbin doctor` with a NoMethodError and its backtrace, not the line that names the task.
  test "config/recurring.yml: a task that is not a mapping, or has a key that is not a name, is refused naming it" do
    Dir.mktmpdir do |dir|
      path = File.join(dir, "recurring.yml")
      { "\"every day at 3am\"" => /production.nightly: a recurring task must be a mapping of schedule, class/,
        "" => /production.nightly: a recurring task must be a mapping of schedule, class/,
        "[ TickJob ]" => /production.nightly: a recurring task must be a mapping of schedule, class/,
        "{ class: TickJob, schedule: every minute, 1: x }" => /production.nightly: unknown key "1"/,
        "{ class: TickJob, schedule: every minute }\n  nightly: { class: TickJob, schedule: every hour }" => /"nightly" is given twice in one mapping \(lines 2 and 3\)/ }.each do |task, message|
        File.write(path, "production:\n  nightly: #{task}\n")
        error = assert_raises(Bobbin::ConfigurationError, task) { Bobbin::Recurring.load_file(path, env: "production") }
        assert_match message, error.message
        assert_includes error.message, path
      end
    end
  end
end
