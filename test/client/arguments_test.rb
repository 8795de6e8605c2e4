# frozen_string_literal: true

require "test_helper"
require "active_support/core_ext/hash/indifferent_access"

# Writes to the ledger what its arguments arrived as in the worker.
class ArgumentShapesJob
  include Bobbin::Job

  def perform(hash, text)
    LedgerEntry.create!(key: [ hash.class, hash.keys, hash[:a], hash["a"], text.class, text.encoding, text ].inspect, pid: Process.pid)
  end
end

class ArgumentsTest < Bobbin::TestCase
  test "JSON-safe arguments are stored and come back equal" do
    args = [ "s", 1, 2.5, true, nil, [ 1, [ "x" ] ], { "a" => { "b" => [ nil ] } } ]
    id = SleepJob.enqueue(*args)
    assert_equal args, Bobbin::JobRecord.find(id).parsed_arguments
  end

  test "a non-JSON argument is rejected at enqueue, naming the job and the position" do
    error = assert_raises(Bobbin::SerializationError) { SleepJob.enqueue(0.1, Time.now) }
    assert_match(/SleepJob argument 2 is Time/, error.message)
    assert_equal 0, Bobbin::JobRecord.count
  end

  test "nested values that would not round-trip are rejected with their path" do
    error = assert_raises(Bobbin::SerializationError) { SleepJob.enqueue([ { "ok" => 1, a: 2 } ]) }
    assert_match(/argument 1\[0\] is a Hash with Symbol key :a/, error.message)
    assert_raises(Bobbin::SerializationError) { SleepJob.enqueue(Float::NAN) }
    assert_raises(Bobbin::SerializationError) { SleepJob.enqueue(Object.new) }
    assert_raises(Bobbin::SerializationError) { SleepJob.enqueue("\xff".dup.force_encoding("UTF-8")) }
  end

  test "binary strings are refused unless they are plain ASCII, and hash keys are checked too" do
    error = assert_raises(Bobbin::SerializationError) { SleepJob.enqueue("caf\xC3\xA9\xff".b) }
    assert_match(/SleepJob argument 1 is a binary \(ASCII-8BIT\) String with non-ASCII bytes/, error.message)
    assert_raises(Bobbin::SerializationError) { SleepJob.enqueue({ "\xff".b => 1 }) }
    assert_equal [ "ascii" ], Bobbin::JobRecord.find(SleepJob.enqueue("ascii".b)).parsed_arguments
  end

  # What the README promises arrives in perform: JSON's types. A HashWithIndifferentAccess (params.to_h) arrives as a
  # plain Hash with its String keys, and a String in another encoding as the same text in UTF-8.
  test "a HashWithIndifferentAccess arrives as a plain Hash with String keys, a Latin-1 String as the same text in UTF-8" do
    ArgumentShapesJob.enqueue({ a: 1 }.with_indifferent_access, "caf\xE9".dup.force_encoding(Encoding::ISO_8859_1))
    ArgumentShapesJob.enqueue({ "a" => 2 }, ActiveSupport::SafeBuffer.new("日本").encode(Encoding::Shift_JIS))
    drain(threads: 1)
    assert_equal [ [ Hash, [ "a" ], nil, 1, String, Encoding::UTF_8, "café" ].inspect, [ Hash, [ "a" ], nil, 2, String, Encoding::UTF_8, "日本" ].inspect ].sort,
                 LedgerEntry.pluck(:key).sort
    assert_equal 2, Bobbin.counts["succeeded"]
  end

  test "bytes not valid in their encoding, binary or not, are refused at enqueue and nothing is stored" do
    [ "caf\xE9".b, "\x89PNG\r\n".b, "caf\xE9".dup.force_encoding(Encoding::UTF_8), "caf\xE9".dup.force_encoding(Encoding::US_ASCII) ].each do |bad|
      error = assert_raises(Bobbin::SerializationError) { ArgumentShapesJob.enqueue({ "file" => [ bad ] }, "x") }
      assert_match(/\AArgumentShapesJob argument 1\["file"\]\[0\] is a (binary \(ASCII-8BIT\) String with non-ASCII bytes|String that is not valid)/, error.message)
    end
    assert_equal 0, Bobbin::JobRecord.count
  end

  test "arguments over the size limit are rejected with the limit in the message" do
    Bobbin.config.max_argument_bytes = 1_000
    error = assert_raises(Bobbin::SerializationError) { SleepJob.enqueue("x" * 2_000) }
    assert_match(/over the 1000-byte limit/, error.message)
    assert_equal 0, Bobbin::JobRecord.count
  ensure
    Bobbin.config.max_argument_bytes = 1_048_576
  end
end
