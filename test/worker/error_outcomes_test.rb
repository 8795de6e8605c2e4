# frozen_string_literal: true

require "test_helper"

# Whatever a job raises is recorded on its row, and the worker goes on: the error's text may hold NULs (PostgreSQL
# refuses them in text) or bytes that are not UTF-8, its class may be anonymous, its message method may raise. And
# should the database refuse an outcome anyway, that job alone is recorded as failed and the others are written.
class ErrorOutcomesTest < Bobbin::TestCase
  # Raises the error `kind` names.
  class OddErrorJob
    include Bobbin::Job
    bobbin_options retries: 0

    Anonymous = Class.new(StandardError)
    Unreadable = Class.new(StandardError) { def message = raise(NoMethodError, "undefined method 'name' for nil") }

    def perform(kind)
      case kind
      when "nul" then raise "a NUL \0 in the middle"
      when "invalid" then raise "a byte \xff that is not UTF-8"
      when "binary" then raise ArgumentError, "binary \xC3\xA9 and \xff".b
      when "latin1" then raise "caf\xE9".dup.force_encoding(Encoding::ISO_8859_1)
      when "backtrace" then raise RuntimeError, "odd backtrace", [ "job.rb:1:in \0", "\xff" ]
      when "anonymous" then raise Class.new(StandardError), "from an anonymous class"
      when "unreadable" then raise Unreadable
      when "huge" then raise "x" * 1_000_000
      when "refused" then raise "please refuse me"
      when "deep" then raise RuntimeError, "deep in gems", DEEP
      when "recursion" then raise RuntimeError, "deep in the app", RECURSION
      end
    end
  end

  KINDS = %w[nul invalid binary latin1 backtrace anonymous unreadable huge].freeze

  # An error raised 70 frames deep inside a gem, called from the app's job, called from Ruby and a gem again.
  GEM = "#{Gem.path.first}/gems/http-5.0/lib/http.rb".freeze
  WORKER = "#{Bobbin::LibraryFrames::LIB}/bobbin/worker.rb:9:in 'run'".freeze
  DEEP = Array.new(70) { |i| "#{GEM}:#{i}:in 'deep'" } + [ "app/jobs/sync_job.rb:7:in 'call_api'", "app/jobs/sync_job.rb:3:in 'perform'" ] +
         Array.new(5) { |i| "#{RbConfig::CONFIG['rubylibdir']}/monitor.rb:#{i}:in 'synchronize'" } + [ WORKER ]
  # The app's own recursion, 120 deep under its job's perform.
  RECURSION = Array.new(60) { |i| "#{GEM}:#{i}:in 'deep'" } + Array.new(120) { |i| "app/models/tree.rb:#{i}:in 'walk'" } +
              [ "app/jobs/tree_job.rb:3:in 'perform'", WORKER ]

  def row(id) = Bobbin::JobRecord.find(id)

  %w[fibers threads].each do |mode|
    test "errors with NULs, invalid bytes, no class name or an unreadable message are recorded; a #{mode} worker goes on" do
      ids = KINDS.to_h { |kind| [ kind, OddErrorJob.enqueue(kind) ] }
      after = LedgerJob.enqueue("after")
      drain_within(mode.to_sym => 2)

      assert_equal [ "failed" ], Bobbin::JobRecord.where(id: ids.values).distinct.pluck(:state), "every odd job failed, none stayed running"
      assert_equal "succeeded", row(after).state, "the job after them ran"
      assert_equal "a NUL \uFFFD in the middle", row(ids["nul"]).last_error_message
      assert_equal "a byte \uFFFD that is not UTF-8", row(ids["invalid"]).last_error_message
      assert_equal [ "ArgumentError", "binary é and \uFFFD" ], row(ids["binary"]).then { |job| [ job.last_error_class, job.last_error_message ] }
      assert_equal "café", row(ids["latin1"]).last_error_message
      assert_equal "job.rb:1:in \uFFFD\n\uFFFD", row(ids["backtrace"]).last_error_backtrace
      assert_match(/\A#<Class:0x\h+>\z/, row(ids["anonymous"]).last_error_class)
      assert_equal "from an anonymous class", row(ids["anonymous"]).last_error_message
      assert_equal [ "ErrorOutcomesTest::OddErrorJob::Unreadable", "(the error's message could not be read: NoMethodError)" ],
                   row(ids["unreadable"]).then { |job| [ job.last_error_class, job.last_error_message ] }
      assert_equal 10_000, row(ids["huge"]).last_error_message.size
    end
  end

  # Mission Control's "Clean" view (a backtrace cleaner) showed nothing of an error raised deep inside gems: the row kept
  # only its first 50 frames, all of the gem's (a trial).
  test "a deep backtrace keeps its first 50 frames and then the app's own, leaving out the gems' and Ruby's" do
    ids = %w[deep recursion].map { |kind| OddErrorJob.enqueue(kind) }
    drain_within(threads: 1)
    assert_equal DEEP.first(50) + [ "… 20 frames left out" ] + DEEP[70, 2] + [ "… 6 frames left out" ], row(ids[0]).last_error_backtrace.lines(chomp: true)
    # Of more than 50 of the app's own, the first 25 and the last 25: the job's perform is among them, each gap marked.
    assert_equal RECURSION.first(50) + [ "… 10 frames left out" ] + RECURSION[60, 25] + [ "… 71 frames left out" ] + RECURSION[156, 25] + [ "… 1 frame left out" ],
                 row(ids[1]).last_error_backtrace.lines(chomp: true)
  end

  # Raises an error whose backtrace or class name cannot be read; retried once, at once.
  class UnreadableErrorJob
    include Bobbin::Job
    bobbin_options retries: 1, backoff: 0.0

    NoBacktrace = Class.new(StandardError) { def backtrace = raise(NoMethodError, "undefined method 'frames' for nil") }
    OddFrames = Class.new(StandardError) { def backtrace = [ "job.rb:1:in 'perform'", nil, 42 ] * 20 }
    Nameless = Class.new(StandardError) { def self.name = raise(NoMethodError, "undefined method 'label' for nil") }

    def perform(kind) = raise({ "backtrace" => NoBacktrace, "frames" => OddFrames, "name" => Nameless }.fetch(kind), "unreadable #{kind}")
  end

  # Such an error failed the recording of the job's end: the job failed for good at its first attempt, whatever its
  # retries, recorded as Bobbin's own NoMethodError or TypeError rather than the job's error.
  test "an error whose backtrace or class name cannot be read is recorded as the job's own, and retried" do
    ids = %w[backtrace frames name].to_h { |kind| [ kind, UnreadableErrorJob.enqueue(kind) ] }
    log = bobbin_log { drain_within(threads: 2) }

    assert_equal [ "failed", 2, "ErrorOutcomesTest::UnreadableErrorJob::NoBacktrace", "unreadable backtrace",
                   "(the error's backtrace could not be read: NoMethodError)" ],
                 row(ids["backtrace"]).then { |job| [ job.state, job.attempts, job.last_error_class, job.last_error_message, job.last_error_backtrace ] }
    assert_equal [ "failed", 2, "ErrorOutcomesTest::UnreadableErrorJob::OddFrames", "unreadable frames" ],
                 row(ids["frames"]).then { |job| [ job.state, job.attempts, job.last_error_class, job.last_error_message ] }
    assert_equal "job.rb:1:in 'perform'\n\n42", row(ids["frames"]).last_error_backtrace.lines.first(3).join.chomp
    assert_equal [ "failed", 2, "ErrorOutcomesTest::UnreadableErrorJob::Nameless", "unreadable name" ],
                 row(ids["name"]).then { |job| [ job.state, job.attempts, job.last_error_class, job.last_error_message ] }
    ids.each { |kind, id| assert_match(/UnreadableErrorJob #{id} failed attempt 1\/2 \(\S+: unreadable #{kind}\); retrying/, log) }
    assert_no_match(/could not record how/, log)
  end

  test "an outcome the database refuses fails that job alone, as Bobbin::OutcomeNotWritten; the batch beside it is written" do
    refuse_error_messages_containing("refuse me")
    refused = OddErrorJob.enqueue("refused")
    others = Array.new(5) { |i| LedgerJob.enqueue("beside-#{i}") }
    retried = FlakyJob.enqueue("retried", 1)
    log = bobbin_log { drain_within(fibers: 10) }

    job = row(refused)
    assert_equal [ "failed", "Bobbin::OutcomeNotWritten" ], [ job.state, job.last_error_class ]
    assert_match(/\Athe job ended failed but its outcome could not be written: /, job.last_error_message)
    assert_match(/could not write the outcome of job #{refused} .*; recording it as failed/, log)
    assert_equal [ "succeeded" ], Bobbin::JobRecord.where(id: others + [ retried ]).distinct.pluck(:state)
  end

  private
    # Makes the database itself refuse any job row whose last error message contains `text`.
    def refuse_error_messages_containing(text)
      connection = ActiveRecord::Base.connection
      if postgres?
        connection.execute("ALTER TABLE bobbin_jobs ADD CONSTRAINT test_refused CHECK (last_error_message NOT LIKE '%#{text}%')")
        @undo = "ALTER TABLE bobbin_jobs DROP CONSTRAINT test_refused"
      else
        connection.execute(<<~SQL)
          CREATE TRIGGER test_refused BEFORE UPDATE ON bobbin_jobs WHEN NEW.last_error_message LIKE '%#{text}%'
          BEGIN SELECT RAISE(ABORT, 'refused by the test'); END
        SQL
        @undo = "DROP TRIGGER test_refused"
      end
    end

    teardown { ActiveRecord::Base.connection.execute(@undo) if @undo }
end
