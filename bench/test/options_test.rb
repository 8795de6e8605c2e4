# frozen_string_literal: true

require_relative "test_helper"
require "open3"

# bin/bench's command line: a mistake is one clear line and a failing exit, before anything starts.
class OptionsTest < Minitest::Test
  BIN = File.expand_path("../../bin/bench", __dir__)

  def test_malformed_options_exit_with_one_line
    { %w[--rounds x] => "invalid argument: --rounds x", %w[--sweep 10,abc] => "concurrencies are positive integers",
      %w[--only nope] => "unknown workload nope", %w[--frobnicate] => "invalid option: --frobnicate" }.each do |args, message|
      out, status = Open3.capture2e(BIN, *args)

      refute status.success?, "bin/bench #{args.join(' ')} succeeded"
      assert_equal 1, out.lines.size, out
      assert_includes out, message
    end
  end
end
