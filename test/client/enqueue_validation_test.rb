# frozen_string_literal: true

require "test_helper"

# Bad input to enqueue raises one error class, Bobbin::EnqueueError, the same on both databases, before any write.
class EnqueueValidationTest < Bobbin::TestCase
  # Hands what it was given back to the test (the worker runs in this process).
  class EchoJob
    include Bobbin::Job
    bobbin_options retries: 0
    RECEIVED = Queue.new

    def perform(*args) = RECEIVED << args
  end

  def enqueue_with(**options) = Bobbin.enqueue_all([ [ SleepJob, [ 0 ], options ] ])

  test "the error classes: SerializationError is an EnqueueError, both are Bobbin errors" do
    assert_operator Bobbin::SerializationError, :<, Bobbin::EnqueueError
    assert_operator Bobbin::EnqueueError, :<, Bobbin::Error
    assert_refused(/row 1: NotAJob is not a Bobbin job \(include Bobbin::Job\)/) { Bobbin.enqueue_all([ [ NotAJob, [] ] ]) }
    assert_refused(/row 1: "NotAJob" is not a Bobbin job/) { Bobbin.enqueue_all([ [ "NotAJob", [] ] ]) }
  end

  test "arguments given as a Hash (or anything but an Array) are refused instead of becoming key-value pairs" do
    assert_refused(/SleepJob: arguments must be an Array.*got #{Regexp.escape({ "a" => 1 }.inspect)}/) { Bobbin.enqueue_all([ [ SleepJob, { "a" => 1 } ] ]) }
    assert_refused(/arguments must be an Array/) { Bobbin.enqueue_all([ [ SleepJob, "a" ] ]) }
    assert_equal 2, Bobbin.enqueue_all([ [ LedgerJob, [ { "a" => 1 } ] ], [ NotImplementedJob ] ]).size
  end

  test "rows that are not [JobClass, [args], {options}] and unknown options are refused" do
    assert_refused(/Bobbin\.enqueue_all row 1: a row must be \[JobClass, \[arguments\]/) { Bobbin.enqueue_all([ SleepJob ]) }
    assert_refused(/row 1: a row must be/) { Bobbin.enqueue_all([ [ SleepJob, [], {}, :extra ] ]) }
    assert_refused(/unknown option :wait \(known: run_at, queue, priority\)/) { enqueue_with(wait: 5) }
    assert_refused(/options must be a Hash/) { Bobbin.enqueue_all([ [ SleepJob, [], "llm" ] ]) }
    assert_refused(/a list of rows/) { Bobbin.enqueue_all(SleepJob) }
    assert_refused(/a list of rows/) { Bobbin.enqueue_all({ SleepJob => [ 0 ] }) }
    assert_equal 2, Bobbin.enqueue_all((1..2).lazy.map { |i| [ SleepJob, [ i ] ] }).size
  end

  test "priority must be an Integer in the 32-bit signed range, the same on both databases" do
    [ 1.7, 2**31, -2**31 - 1, "high", Float::NAN, 2.0, true ].each do |priority|
      error = assert_refused(/SleepJob: priority must be a whole number from -2147483648 to 2147483647/) { enqueue_with(priority: priority) }
      assert_includes error.message, priority.inspect
    end
    ids = [ 2**31 - 1, -2**31 ].map { |priority| enqueue_with(priority: priority).first }
    assert_equal [ 2**31 - 1, -2**31 ], ids.map { |id| Bobbin::JobRecord.find(id).priority }
  end

  test "a bad priority, queue or retries in bobbin_options is refused where it is declared, naming the job" do
    declare = ->(**options) { assert_raises(Bobbin::ConfigurationError) { SleepJob.dup.tap { |job| job.define_singleton_method(:name) { "BadJob" } }.bobbin_options(**options) } }
    assert_match(/\ABadJob: priority must be/, declare.(priority: 1.5).message)
    assert_match(/\ABadJob: queue must be a non-empty String/, declare.(queue: " ").message)
    assert_equal "BadJob: retries must be a whole number from 0 to 2147483646 (the runs after the first), got -1", declare.(retries: -1).message
    assert_match(/retries must be .*, got 1\.5/, declare.(retries: 1.5).message)
    anonymous = assert_raises(Bobbin::ConfigurationError) { Class.new { include Bobbin::Job }.bobbin_options(colour: 1) }
    assert_match(/\A#<Class:0x\h+>: unknown bobbin_options colour/, anonymous.message, "an anonymous class is named as Ruby shows it")
    assert_equal [ 2, :mail ], SleepJob.dup.bobbin_options(retries: 2, queue: :mail, priority: -1).values_at(:retries, :queue)
  end

  # `queue: nil` was kept, and each enqueue then raised on it; a subclass read its parent's options once and kept that
  # copy when the parent changed them later (a review).
  test "a nil queue or priority in bobbin_options is the default's; a subclass follows its parent's options as they change" do
    parent = Class.new(SleepJob) { bobbin_options queue: "low", priority: 5 }
    child = Class.new(parent)
    assert_equal [ "low", 5 ], child.bobbin_options.values_at(:queue, :priority)
    parent.bobbin_options(queue: "high", retries: 1)
    assert_equal [ "high", 5, 1 ], child.bobbin_options.values_at(:queue, :priority, :retries), "the parent's options now"
    child.bobbin_options(queue: nil, priority: nil)
    assert_equal [ "default", 0, 1 ], child.bobbin_options.values_at(:queue, :priority, :retries)
    Object.const_set(:NilQueueJob, child)
    assert_equal "default", Bobbin::JobRecord.find(NilQueueJob.enqueue(0)).queue
  ensure
    Object.send(:remove_const, :NilQueueJob) if Object.const_defined?(:NilQueueJob, false)
  end

  test "the queue must be a non-empty String or Symbol of valid UTF-8 without control characters, commas or spaces around it, at most 255 bytes" do
    [ [ "a", "b" ], "", "  ", "a\0b", "a\nfake line", "\e[2Jq", "mail\u202Etxt", "mail\u200Ftxt", "a\u2028b", "x,y", " pad", "pad ",
      "\xff".dup.force_encoding("UTF-8"), "é" * 128, 5, [] ].each do |queue|
      error = assert_refused(/SleepJob: queue must be/) { enqueue_with(queue: queue) }
      assert_includes error.message, Bobbin::Printable.printable(queue.inspect[0, 40])
      assert_no_match(/[\u200F\u202E\u2028]/, error.message, "shown escaped")
    end
    ids = [ :llm, "é" * 127 + "x", "llm 🧵" ].map { |queue| enqueue_with(queue: queue).first }
    assert_equal [ "llm", "é" * 127 + "x", "llm 🧵" ], ids.map { |id| Bobbin::JobRecord.find(id).queue }
  end

  test "one bad row in enqueue_all writes nothing, and the message names the row" do
    rows = Array.new(5) { |i| [ LedgerJob, [ "k#{i}" ] ] }
    rows.insert(3, [ LedgerJob, [ "bad" ], { queue: "" } ])
    assert_refused(/Bobbin\.enqueue_all row 4: LedgerJob: queue must be/) { Bobbin.enqueue_all(rows) }
  end

  # One statement of 1 GB (PostgreSQL's limit for a message) failed as a lost connection after 11 s at 4 GB of memory.
  test "an enqueue_all carrying more than 256 × max_argument_bytes of arguments is refused whole, saying so" do
    Bobbin.config.max_argument_bytes = 1_000
    row = [ LedgerJob, [ "x" * 900 ] ]
    each = Bobbin::Client::Arguments.dump("LedgerJob", row.last).bytesize
    fits = 256_000 / each
    error = assert_refused(/more than one enqueue writes/) { Bobbin.enqueue_all([ row ] * (fits + 1)) }
    assert_equal "#{fits + 1} jobs carry #{each * (fits + 1)} bytes of arguments, more than one enqueue writes (256000 bytes, " \
                 "256 × max_argument_bytes): enqueue them in smaller batches (nothing was written)", error.message
    assert_equal fits, Bobbin.enqueue_all([ row ] * fits).size
  end

  # The batch caps are multiples of max_argument_bytes, which may be nil (no limit for one job's arguments): every
  # enqueue then raised NoMethodError.
  test "with max_argument_bytes nil, enqueues and batches still work, capped by its default" do
    Bobbin.config.max_argument_bytes = nil
    assert_kind_of Integer, LedgerJob.enqueue("x" * 2_000_000)
    assert_equal 2, Bobbin.enqueue_all([ [ LedgerJob, [ "a" ] ], [ LedgerJob, [ "b" ] ] ]).size
    assert_equal 256 * 1_048_576, Bobbin::Client::Enqueuer.statement_bytes(256)
  end

  test "arguments nested deeper than the worker can parse are refused at enqueue, without a stack overflow" do
    deep = (1..10_000).reduce([]) { |inner, _| [ inner ] }
    error = assert_refused(/SleepJob argument 2.* nested more than 100 levels/) { SleepJob.enqueue(0, deep) }
    assert_kind_of Bobbin::SerializationError, error
    cycle = []
    cycle << cycle
    assert_refused(/nested more than 100 levels/) { SleepJob.enqueue(0, cycle) }
    assert_refused(/nested more than 100 levels/) { SleepJob.enqueue((1..100).reduce({}) { |inner, _| { "k" => inner } }) }
  end

  test "the deepest arguments accepted run on a worker, and NUL and other control characters round-trip" do
    deepest = (1..98).reduce([ "bottom" ]) { |inner, _| [ inner ] }
    strings = [ "a\0b", "\0", "\u0001\t\n\"\\", "é🧵", { "k\0" => "v\0" } ]
    EchoJob.enqueue(deepest, strings)
    drain(threads: 1)
    assert_equal 1, Bobbin.counts["succeeded"], Bobbin::JobRecord.pluck(:last_error_message).inspect
    assert_equal [ deepest, strings ], EchoJob::RECEIVED.pop(timeout: 0)
  end

  test "the row builder the Active Job adapter uses checks priority, queue and class name" do
    row = { class_name: "X", arguments: "[]", queue: "q", priority: nil, run_at: nil, max_attempts: 1, active_job_id: "id" }
    assert_equal 0, Bobbin::Client::Enqueuer.build(**row)[:priority]
    assert_raises(Bobbin::EnqueueError) { Bobbin::Client::Enqueuer.build(**row, priority: 2**31) }
    assert_raises(Bobbin::EnqueueError) { Bobbin::Client::Enqueuer.build(**row, queue: "a\0") }
    assert_raises(Bobbin::EnqueueError) { Bobbin::Client::Enqueuer.build(**row, class_name: nil) }
    assert_raises(Bobbin::EnqueueError) { Bobbin::Client::Enqueuer.build(**row, max_attempts: 0) }
  end

  test "an anonymous job class is refused: a worker could not find it" do
    assert_refused(/anonymous class.*assign it to a constant/) { Class.new(SleepJob).enqueue(0) }
    assert_refused(/\A"fake<job>": an anonymous class.*assign it to a constant/) { Class.new(SleepJob).set_temporary_name("fake<job>").enqueue(0) }
  end
end
