# frozen_string_literal: true

require "test_helper"
require "open3"
require "socket"
require "tmpdir"

# Runs the real `exe/bobbin` to completion and checks how it fails.
module CLIHelper
  ROOT = File.expand_path("../..", __dir__)

  # Runs `exe/bobbin ARGS` with `env` over the test database's (pool 25) and returns [status, stdout, stderr];
  # `prefix` runs it through another command (setpriv). Kills its process group and fails after `timeout` seconds.
  def run_bobbin(*args, env: {}, prefix: [], timeout: 60)
    env = { "DATABASE_URL" => TestDatabase.url_with_pool, "BOBBIN_TEST_DATABASE" => TestDatabase.url }.merge(env)
    Open3.popen3(env, *prefix, *ruby, File.join(ROOT, "exe/bobbin"), *args, chdir: ROOT, pgroup: true) do |stdin, out, err, thread|
      stdin.close
      readers = [ out, err ].map { |io| Thread.new { io.read } }
      unless thread.join(timeout)
        Process.kill(:KILL, -thread.pid)
        flunk("bobbin #{args.join(' ')} did not exit within #{timeout}s (stderr: #{readers[1].value.lines.last(3).join})")
      end
      [ thread.value, *readers.map(&:value) ]
    end
  end

  # Asserts the command exited 78 (or `exitstatus`) with exactly one line on stderr, "bobbin: …" matching `pattern`, and no backtrace.
  def assert_config_exit(result, pattern, exitstatus: 78)
    status, out, err = result
    assert_equal exitstatus, status.exitstatus, "exit status (stderr: #{err})"
    assert_equal 1, err.lines.size, "one line on stderr, got:\n#{err}"
    assert_match(/\Abobbin: /, err)
    assert_match pattern, err
    refute_match(/\.rb:\d+:in /, out + err, "no backtrace")
  end

  # A writable directory of its own for the test, removed afterwards.
  def with_tmpdir(&) = Dir.mktmpdir("bobbin-cli", &)

  # A TCP port on this host where nothing listens.
  def closed_port = TCPServer.open("127.0.0.1", 0).then { |server| server.addr[1].tap { server.close } }
end
