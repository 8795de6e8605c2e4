# frozen_string_literal: true

require "net/http"
require "socket"

# The services a run needs: PostgreSQL and Redis (checked with a clear error, never a hang) and the fake
# LLM/delay server (a separate evented process, shared with bin/demo).
module Servers
  ROOT = File.expand_path("../..", __dir__)

  module_function

  def port = File.exist?(File.join(ROOT, ".database_url")) ? File.read(File.join(ROOT, ".database_url"))[/port=(\d+)/, 1] : "5432"

  # Creates the systems' databases; aborts with a clear message when PostgreSQL or Redis is unreachable.
  def check_databases!(systems)
    system("pg_isready", "-q", "-p", port, "-t", "5") or abort("bin/bench: PostgreSQL is not running on port #{port} (run bin/setup)")
    redis = (TCPSocket.new("127.0.0.1", 6379).tap { |s| s.write("PING\r\n") }.gets rescue nil)
    abort("bin/bench: Redis is not running on 127.0.0.1:6379 (run bin/setup)") unless redis&.start_with?("+PONG")
    systems.filter_map { |s| s[:database] }.uniq.each { |db| create_database(db) }
  end

  # Creates PostgreSQL database `name` on the bench's port (exists already: fine).
  def create_database(name) = system("createdb", "-p", port, name, err: File::NULL)

  # The environment a system's scripts run with.
  def env(system, pool, ledger_path, http_url)
    { "DATABASE_URL" => system[:database] && "postgres:///#{system[:database]}?port=#{port}&pool=#{pool}",
      "BENCH_LEDGER" => ledger_path, "BENCH_HTTP_URL" => http_url, "REDIS_URL" => "redis://127.0.0.1:6379/0",
      "RAILS_ENV" => "production", "RACK_ENV" => "production", "BUNDLE_GEMFILE" => File.join(ROOT, "bench", "Gemfile") }.merge(system.fetch(:env, {}))
  end

  # The fake LLM/delay server from demo/, run as its own process.
  class FakeLLM
    attr_reader :url

    def self.start = new.tap(&:start)

    def start
      reader, writer = IO.pipe
      @pid = Process.spawn(RbConfig.ruby, File.join(ROOT, "demo/fake_llm_server.rb"), "--port", "0", out: writer)
      writer.close
      line = reader.wait_readable(15) && reader.gets or abort("bin/bench: the fake LLM server did not start")
      @url = "http://127.0.0.1:#{line[/\d+/]}"
    end

    # 2,000 requests that each wait 1 s, opened at once from one fiber client, so that all are held open together:
    # if the server keeps up, each answer takes ≈ 1,000 ms from its request, however many are open.
    def capacity_check(concurrency: 2_000, delay_ms: 1_000)
      require "async"
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      results = Sync do |task|
        Array.new(concurrency) do
          task.async do
            sent = Process.clock_gettime(Process::CLOCK_MONOTONIC)
            ok = Net::HTTP.get_response(URI("#{@url}/delay?ms=#{delay_ms}")).code == "200"
            [ ok, (Process.clock_gettime(Process::CLOCK_MONOTONIC) - sent) * 1000 ]
          end
        end.map(&:wait)
      end
      waits = results.map(&:last).sort
      { "concurrent_requests" => concurrency, "delay_ms" => delay_ms, "all_ok" => results.all?(&:first),
        "p50_ms" => waits[waits.size / 2].round(1), "p99_ms" => waits[(waits.size * 0.99).ceil - 1].round(1),
        "seconds" => Process.clock_gettime(Process::CLOCK_MONOTONIC) - started }
    end

    def stop
      Process.kill("TERM", @pid)
      Process.wait(@pid)
    rescue Errno::ESRCH, Errno::ECHILD
      nil
    end
  end
end
