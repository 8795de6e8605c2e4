# frozen_string_literal: true

require "test_helper"
require "sqlite3" # the driver whose refusal the last test raises, loaded on the PostgreSQL run too

class OutageLogTest < Bobbin::TestCase
  setup do
    @out = StringIO.new
    @log = Bobbin::OutageLog.new("bobbin supervisor: heartbeat", logger: Logger.new(@out, formatter: ->(*, message) { "#{message}\n" }), repeat: 0.2)
  end

  def lines = @out.string.lines(chomp: true)

  test "a failure that repeats is logged when it starts, reminded every `repeat` seconds, and its end once" do
    @log.succeeded
    assert_empty lines, "nothing to say while the task works"

    reported = []
    Bobbin.config.on_thread_error = ->(failure, context) { reported << [ failure, context ] }
    error = ActiveRecord::ConnectionNotEstablished.new("connection to server failed: No such file\n\tIs the server running?")
    5.times { @log.failed(error) }
    assert_equal [ [ error, { task: "bobbin supervisor: heartbeat", severity: :warning } ] ], reported, "on_thread_error hears of the outage once, at its start"
    assert_equal [ "bobbin supervisor: heartbeat failed: connection to server failed: No such file; retrying" ], lines,
                 "one line, the first of libpq's message"

    sleep(0.25)
    @log.failed("database still unavailable")
    @log.failed("database still unavailable")
    assert_match(/\Abobbin supervisor: heartbeat still failing after 0s: database still unavailable; retrying\z/, lines.last)
    assert_equal 2, lines.size

    @log.succeeded
    @log.succeeded
    assert_equal [ "bobbin supervisor: heartbeat works again after 0s" ], lines.drop(2)

    @log.failed("again")
    assert_equal "bobbin supervisor: heartbeat failed: again; retrying", lines.last, "a new outage is logged from its start"

    # The outcome writer says more than the error (how many outcomes it keeps): the error is still what is reported.
    @log.succeeded
    @log.failed("database unavailable during finish (3 outcomes kept)", cause: error)
    assert_equal [ error, error ], reported.map(&:first)
    assert_equal "bobbin supervisor: heartbeat failed: database unavailable during finish (3 outcomes kept); retrying", lines.last

    Bobbin.config.on_thread_error = false # reports nothing, in a Rails app too
    @log.succeeded
    @log.failed(error)
    assert_equal 2, reported.size
    error = assert_raises(Bobbin::ConfigurationError) { Bobbin.config.on_thread_error = "Sentry" }
    assert_match(/on_thread_error: a callable \(call\(error, context\)\), nil \(Rails.error in a Rails app\) or false, got "Sentry"/, error.message)
  end

  # Active Record's own message for a refused connection names no cause; the driver's does (a trial's supervisor said
  # only "There is an issue connecting with your hostname: 127.0.0.1." for minutes).
  test "an Active Record error's line carries what the driver said under it" do
    error = begin
      begin
        SQLite3::Database.new("/nonexistent-dir-#{Process.pid}/x.sqlite3") # the driver's own refusal
      rescue SQLite3::Exception
        raise ActiveRecord::ConnectionNotEstablished, "There is an issue connecting with your hostname: 127.0.0.1." # as Active Record words it
      end
    rescue ActiveRecord::ConnectionNotEstablished => raised
      raised
    end
    @log.failed(error)
    assert_match(/heartbeat failed: .* \(#{Regexp.escape(error.cause.class.name)}: .+\); retrying\z/, lines.last)
  end

  test "an error that waiting will not cure is logged with the first line of Bobbin's or the app's code, not a gem's" do
    Bobbin.config.logger = Logger.new(@out, formatter: ->(*, message) { "#{message}\n" })
    Bobbin.config.on_thread_error = false
    line = __LINE__ + 1
    error = assert_raises(ActiveRecord::StatementInvalid) { Bobbin::Record.connection.select_value("SELECT x FROM bobbin_no_such_table") }
    assert Bobbin::LibraryFrames.library?(error.backtrace.first), "Active Record's frames come first: #{error.backtrace.first}"
    Bobbin::OutageLog.error("bobbin worker 1: heartbeat", error, "trying again in 1s")
    assert_match(/\Abobbin worker 1: heartbeat failed: .*bobbin_no_such_table.* \(#{Regexp.escape(__FILE__)}:#{line}:in .*\); trying again in 1s\z/, lines.last)

    refused = assert_raises(Bobbin::EnqueueError) { Bobbin.enqueue_all([ [ String, [] ] ]) }
    assert refused.backtrace.first.start_with?("#{Bobbin::LibraryFrames::LIB}/bobbin/"), "raised in Bobbin's own code"
    assert_equal refused.backtrace.first, Bobbin::LibraryFrames.first_own(refused.backtrace, bobbin: true)
    assert_match(/\A#{Regexp.escape(__FILE__)}:\d+:in /, Bobbin::LibraryFrames.first_own(refused.backtrace), "the app's line, past Bobbin's")
  end
end
