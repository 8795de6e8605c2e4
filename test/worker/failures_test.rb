# frozen_string_literal: true

require "test_helper"

class FailuresTest < Bobbin::TestCase
  test "a failing job is retried until it succeeds, counting attempts" do
    id = FlakyJob.enqueue("k", 2)
    drain(fibers: 5)
    job = Bobbin::JobRecord.find(id)
    assert_equal [ "succeeded", 3 ], [ job.state, job.attempts ]
    assert_equal "ArgumentError", job.last_error_class, "the last error stays as history after a later success"
    assert_nil job.current_error, "but it is not the job's state"
  end

  test "a job that keeps failing ends failed with its error and backtrace after its retries" do
    id = FlakyJob.enqueue("k", 99)
    drain(threads: 2)
    job = Bobbin::JobRecord.find(id)
    assert_equal [ "failed", 4, "ArgumentError", "flaky k" ], [ job.state, job.attempts, job.last_error_class, job.last_error_message ]
    assert_match(/jobs\.rb:\d+/, job.last_error_backtrace)
  end

  test "a failure's log lines show control characters in its message escaped; the row keeps the message as raised" do
    key = "\e[2J\e]0;pwned\a"
    id = FlakyJob.enqueue(key, 99)
    log = bobbin_log { drain(fibers: 2) }
    lines = log.lines.grep(/FlakyJob #{id} failed/)
    assert_equal 4, lines.size, log
    assert lines.none? { |line| line.match?(/[\e\a]/) }, "raw escapes: #{lines.inspect}"
    assert_includes lines.last, "ArgumentError: flaky \\e[2J\\e]0;pwned\\a"
    assert_equal "flaky #{key}", Bobbin::JobRecord.find(id).last_error_message
  end

  test "retries back off exponentially with jitter" do
    job_class = Class.new(FlakyJob) { bobbin_options backoff: 10 }
    Object.const_set(:SlowRetryJob, job_class)
    ids = Array.new(20) { |i| SlowRetryJob.enqueue("k#{i}", 5) }
    delays = retry_delays(ids, attempt: 1)
    assert_equal [ [ "ready", 1 ] ], Bobbin::JobRecord.where(id: ids).distinct.pluck(:state, :attempts)
    assert_equal 20, Bobbin.counts["scheduled"]
    assert delays.all? { |delay| delay.between?(7.5, 12.5) }, "first retry after backoff × 2^0 ± 25%: #{delays}"
    assert_operator delays.max - delays.min, :>, 0.5, "jitter spreads retries that failed together: #{delays}"

    Bobbin::JobRecord.where(id: ids).update_all(run_at: Time.now.utc)
    delays = retry_delays(ids, attempt: 2)
    assert delays.all? { |delay| delay.between?(15, 25) }, "second retry after backoff × 2^1 ± 25%: #{delays}"
  ensure
    Object.send(:remove_const, :SlowRetryJob)
  end

  # The jitter was Kernel#rand's: a job that seeded it (srand) gave the jobs failing after it one jitter (a review).
  test "jobs that seed Ruby's random numbers as they fail still come back spread by the jitter" do
    Object.const_set(:SlowRetryJob, Class.new(FlakyJob) { bobbin_options backoff: 100 })
    SlowRetryJob.define_method(:perform) { |key, _failures| srand(42) && raise(ArgumentError, "seeded #{key}") }
    ids = Array.new(5) { |i| SlowRetryJob.enqueue("s#{i}", 5) }
    delays = retry_delays(ids, attempt: 1)
    assert_operator delays.max - delays.min, :>, 1, "jitter spreads retries that failed together: #{delays}"
  ensure
    Object.send(:remove_const, :SlowRetryJob)
  end

  test "a backoff of 0.0 retries at once however many attempts came before (0.0 × 2**1024 was NaN)" do
    job_class = Class.new(FlakyJob) { bobbin_options retries: 1_100, backoff: 0.0 }
    Object.const_set(:EagerRetryJob, job_class)
    id = EagerRetryJob.enqueue("eager", 10_000)
    Bobbin::JobRecord.where(id: id).update_all(attempts: 1_030)
    drain_within(threads: 1) # attempt 1,031 fails, and its retry is due at once: the drain runs it, and so on
    assert_equal [ "failed", 1_101, "flaky eager" ], Bobbin::JobRecord.where(id: id).pick(:state, :attempts, :last_error_message),
                 "every retry used, each failing with the job's own error"
  ensure
    Object.send(:remove_const, :EagerRetryJob)
  end

  # An around_perform hook that raises before it runs the job (a rate limit, a circuit breaker) retried the job 2 s later,
  # the default's backoff, not its class's: a job of backoff 3600 used its retries within a minute.
  test "a job that fails in an around_perform hook, before its perform, retries after its own class's backoff" do
    Object.const_set(:HourlyRetryJob, Class.new(FlakyJob) { bobbin_options backoff: 3600 })
    Bobbin.around_perform { |job, run| job.class_name == "HourlyRetryJob" ? raise(ArgumentError, "rate limited") : run.call }
    id = HourlyRetryJob.enqueue("limited", 5)
    drain(threads: 1)
    state, attempts, message, run_at = Bobbin::JobRecord.where(id: id).pick(:state, :attempts, :last_error_message, :run_at)
    assert_equal [ "ready", 1, "rate limited" ], [ state, attempts, message ]
    assert_operator run_at, :>, Time.now.utc + 2_700, "first retry after the class's backoff (3600 s ± 25 %)"
  ensure
    Object.send(:remove_const, :HourlyRetryJob)
  end

  # Drains `ids`, which fail their `attempt`, and returns the delays their retries were given, as logged (to 0.1 s),
  # after checking that each is the one their run_at was set to.
  def retry_delays(ids, attempt:)
    started = Time.now.utc
    log = bobbin_log { drain(fibers: 20) }
    finished = Time.now.utc
    delays = log.scan(/SlowRetryJob (\d+) failed attempt #{attempt}\/\d+ .*; retrying in ([\d.]+)s/).to_h { |id, delay| [ id.to_i, delay.to_f ] }
    assert_equal ids.sort, delays.keys.sort
    Bobbin::JobRecord.where(id: ids).pluck(:id, :run_at).each do |id, run_at|
      assert_includes (started + delays[id] - 0.1)..(finished + delays[id] + 0.1), run_at, "job #{id} runs again after its delay"
    end
    delays.values
  end

  # A fiber pool looks a claimed job's class up before it runs it (does it ask for a thread?); a class whose file does
  # not load (a `require` of a gem not installed, a syntax error, a file deleted in development, a class body that
  # raises) must not stop it.
  test "a job class whose file fails to load is retried with the load error; the worker keeps running" do
    Dir.mktmpdir do |dir|
      { "MissingGemJob" => "require 'bobbin_no_such_gem'\n", "BrokenSyntaxJob" => "class BrokenSyntaxJob\n  def perform(\nend\n",
        "UnsetEnvJob" => "class UnsetEnvJob\n  include Bobbin::Job\n  KEY = ENV.fetch('BOBBIN_NO_SUCH_VARIABLE')\nend\n" }.each do |name, source|
        File.write(File.join(dir, "#{name}.rb"), source)
        Object.autoload(name.to_sym, File.join(dir, "#{name}.rb"))
        Bobbin::Client::Enqueuer.insert([ Bobbin::Client::Enqueuer.build(class_name: name, arguments: "[]", queue: "default",
                                                                         priority: 0, run_at: nil, max_attempts: 5) ])
      end
      LedgerJob.enqueue("after")
      drain(fibers: 5)
      jobs = Bobbin::JobRecord.where(class_name: %w[MissingGemJob BrokenSyntaxJob UnsetEnvJob]).order(:class_name).to_a
      assert_equal [ [ "ready", "Bobbin::UnknownJobClass", 1 ] ] * 2 + [ [ "ready", "KeyError", 1 ] ],
                   jobs.map { |job| [ job.state, job.last_error_class, job.attempts ] }
      # Where, and what the parser said (Prism's first line, "syntax errors found", was all a developer saw).
      assert_match(/job class BrokenSyntaxJob could not be loaded \(SyntaxError: \S+BrokenSyntaxJob\.rb:3: .*unexpected .end/, jobs[0].last_error_message)
      assert_match(/job class MissingGemJob could not be loaded \(LoadError: cannot load such file -- bobbin_no_such_gem\)/, jobs[1].last_error_message)
      assert LedgerEntry.exists?(key: "after")
    end
  ensure
    %i[MissingGemJob BrokenSyntaxJob UnsetEnvJob].each { |name| Object.send(:remove_const, name) if Object.const_defined?(name, false) }
  end

  # A rolling deploy: old workers met jobs of classes only the new code has, and failed them for good (an Active Job
  # job at once, a plain one within a minute) seconds before the new workers came up (a trial).
  test "an unknown class is tried 25 times whatever the job's own retries, at most 5 minutes apart, then fails" do
    insert = lambda do |name, active_job_id: nil, attempts: 0|
      arguments = active_job_id ? { job_class: name, job_id: active_job_id, arguments: [] }.to_json : "[]"
      id = Bobbin::Client::Enqueuer.insert([ Bobbin::Client::Enqueuer.build(class_name: name, arguments: arguments, queue: "default", priority: 0,
                                                                           run_at: nil, max_attempts: 1, active_job_id: active_job_id) ]).first
      Bobbin::JobRecord.where(id: id).update_all(attempts: attempts)
      id
    end
    plain = insert.("GoneJob")
    active_job = insert.("GoneActiveJob", active_job_id: "aj-gone")
    late = insert.("GoneJob", attempts: 20)
    last = insert.("GoneJob", attempts: 24)
    drain(fibers: 5)
    now = Time.now.utc
    row = ->(id) { Bobbin::JobRecord.find(id) }
    assert_equal [ [ "ready", 1 ], [ "ready", 1 ], [ "ready", 21 ], [ "failed", 25 ] ], [ plain, active_job, late, last ].map { |id| [ row.(id).state, row.(id).attempts ] }
    assert_equal [ "Bobbin::UnknownJobClass" ] * 4, [ plain, active_job, late, last ].map { |id| row.(id).last_error_class }
    assert_equal [ 25, 25, 25, 25 ], [ plain, active_job, late, last ].map { |id| row.(id).attempts_allowed },
                 "what lists show as the attempts it may make: the log's \"attempt 1/25\", not its raised max_attempts (2)"
    assert_equal [ 2, 2, 2 ], [ plain, active_job, late ].map { |id| row.(id).max_attempts }
    assert_operator row.(late).run_at - now, :<=, 300, "at most 5 minutes away, not 2^20 s"
    assert_operator row.(late).run_at - now, :>, 200
  end

  # A rolling deploy: a job of a class only the new workers know, claimed by old workers meanwhile, came to the new code
  # with its retries used up by those tries: its first real failure failed it for good (a review).
  test "the tries an unknown class took leave the job its own retries once its class is there" do
    id = tried_unknown("ArrivingJob", [ "k", 1 ], max_attempts: 3, tries: 4)
    assert_equal [ "ready", 4, "Bobbin::UnknownJobClass" ], Bobbin::JobRecord.where(id: id).pick(:state, :attempts, :last_error_class)

    Object.const_set(:ArrivingJob, Class.new(FlakyJob)) # fails once, then succeeds
    drain(threads: 1)
    Bobbin::JobRecord.where(id: id).update_all(run_at: Time.now.utc)
    drain(threads: 1)
    assert_equal [ "succeeded", "ArgumentError" ], Bobbin::JobRecord.where(id: id).pick(:state, :last_error_class),
                 "its real failure is retried, as its 2 retries say"
  ensure
    Object.send(:remove_const, :ArrivingJob) if Object.const_defined?(:ArrivingJob, false)
  end

  # Each unknown-class try raised its attempts (and gave it back in max_attempts): the first real failure's backoff was
  # reckoned from attempt 16, backoff × 2^15 capped at 6 h, so a job that waited out a rolling deploy then waited hours.
  test "a job whose class was unknown for many tries retries its first real failure after its own backoff", long: true do
    id = tried_unknown("LateFlakyJob", [ "late", 2 ], max_attempts: 4, tries: 15)
    assert_equal [ "ready", 15, 19 ], Bobbin::JobRecord.where(id: id).pick(:state, :attempts, :max_attempts)

    Object.const_set(:LateFlakyJob, Class.new(FlakyJob) { bobbin_options retries: 3, backoff: 60 }) # fails twice, then succeeds
    [ 60, 120 ].each do |backoff|
      before = Time.now.utc
      drain(threads: 1)
      state, run_at, error = Bobbin::JobRecord.where(id: id).pick(:state, :run_at, :last_error_class)
      assert_equal [ "ready", "ArgumentError" ], [ state, error ]
      assert_operator run_at, :>=, before + backoff * 0.75 - 1, "at least its own backoff (#{backoff} s ± 25 %) away"
      assert_operator run_at, :<=, Time.now.utc + backoff * 1.25 + 1, "its own backoff (#{backoff} s ± 25 %), not hours"
      Bobbin::JobRecord.where(id: id).update_all(run_at: Time.now.utc)
    end
    drain(threads: 1)
    assert_equal "succeeded", Bobbin::JobRecord.where(id: id).pick(:state), "within its own 3 retries"
  ensure
    Object.send(:remove_const, :LateFlakyJob) if Object.const_defined?(:LateFlakyJob, false)
  end

  # A check that a row's class is a class name at all (one written from outside fails at once) refused ÜberJob (a trial).
  test "a job class whose name is not ASCII runs" do
    Object.const_set(:ÜberJob, Class.new(LedgerJob))
    ÜberJob.enqueue("über")
    drain(threads: 1)
    assert_equal [ "succeeded" ], Bobbin::JobRecord.pluck(:state)
    assert LedgerEntry.exists?(key: "über")
  ensure
    Object.send(:remove_const, :ÜberJob) if Object.const_defined?(:ÜberJob, false)
  end

  test "an unknown job class is retried (a deploy may be under way) with a clear message; the worker keeps running" do
    Bobbin::Client::Enqueuer.insert([ Bobbin::Client::Enqueuer.build(class_name: "LaterJob", arguments: "[\"late\"]", queue: "default",
                                                                     priority: 0, run_at: nil, max_attempts: 5) ])
    LedgerJob.enqueue("after")
    drain(fibers: 5)
    job = Bobbin::JobRecord.find_by!(class_name: "LaterJob")
    assert_equal [ "ready", "Bobbin::UnknownJobClass", 1 ], [ job.state, job.last_error_class, job.attempts ]
    assert_match(/unknown job class LaterJob .*--require/, job.last_error_message)
    assert LedgerEntry.exists?(key: "after")

    Object.const_set(:LaterJob, Class.new(LedgerJob))
    job.update_columns(run_at: Time.now.utc)
    drain(fibers: 5)
    assert_equal "succeeded", job.reload.state, "once the class exists, the retry runs it"
    assert LedgerEntry.exists?(key: "late")
  ensure
    Object.send(:remove_const, :LaterJob) if defined?(LaterJob)
  end

  test "each retried and each failed job gets one line in Bobbin's log with class, id and error" do
    id = FlakyJob.enqueue("k", 99)
    log = bobbin_log { drain(fibers: 2) }
    assert_match(/FlakyJob #{id} failed attempt 1\/4 \(ArgumentError: flaky k\); retrying in/, log)
    assert_match(/FlakyJob #{id} failed after 4 attempt\(s\): ArgumentError: flaky k/, log)
    assert_equal 4, log.scan(/FlakyJob #{id} failed/).size
  end

  test "a class that is not a job is refused, not run" do
    Bobbin::Client::Enqueuer.insert([ Bobbin::Client::Enqueuer.build(class_name: "NotAJob", arguments: "[]", queue: "default",
                                                                     priority: 0, run_at: nil, max_attempts: 1) ])
    drain(threads: 1)
    job = Bobbin::JobRecord.last
    assert_equal [ "failed", "Bobbin::UnrunnableJob", 1 ], [ job.state, job.last_error_class, job.attempts ]
    assert_match(/NotAJob is not a job class/, job.last_error_message)
  end

  test "a row with broken JSON arguments fails with a clear message; other jobs run" do
    id = LedgerJob.enqueue("broken")
    Bobbin::JobRecord.where(id: id).update_all(arguments: "[\"unterminated")
    LedgerJob.enqueue("fine")
    drain(fibers: 5)
    job = Bobbin::JobRecord.find(id)
    assert_equal [ "failed", "Bobbin::UnrunnableJob" ], [ job.state, job.last_error_class ]
    assert_match(/arguments are not valid JSON/, job.last_error_message)
    assert_equal [ "fine" ], LedgerEntry.pluck(:key)
  end

  private
    # A job of `class_name`, a class this process does not know (yet), tried `tries` times as soon as each retry is
    # enqueued (its run_at brought to now); returns its id.
    def tried_unknown(class_name, arguments, max_attempts:, tries:)
      id = Bobbin::Client::Enqueuer.insert([ Bobbin::Client::Enqueuer.build(class_name: class_name, arguments: JSON.generate(arguments), queue: "default",
                                                                           priority: 0, run_at: nil, max_attempts: max_attempts) ]).first
      tries.times do
        drain(threads: 1)
        Bobbin::JobRecord.where(id: id).update_all(run_at: Time.now.utc)
      end
      id
    end
end
