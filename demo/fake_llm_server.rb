# frozen_string_literal: true

# A fake OpenAI-style server on loopback, evented (one fiber per connection) so it holds thousands of open
# streams without becoming the bottleneck. Used by bin/demo and the benchmarks.
#
#   ruby demo/fake_llm_server.rb --port 0      # prints "listening on PORT" once ready
#   GET /stream?tokens=40&interval_ms=20       # SSE: one token every 20 ms, then [DONE]
#   GET /delay?ms=50                           # answers after 50 ms
require "async"
require "socket"
require "json"
require "uri"
require "optparse"

module FakeLLMServer
  module_function

  def run(port)
    raise_file_limit
    server = TCPServer.new("127.0.0.1", port)
    server.listen(4096)
    $stdout.puts("listening on #{server.addr[1]}")
    $stdout.flush
    Sync do |task|
      loop do
        client = server.accept
        task.async { serve(client) }
      end
    end
  end

  def serve(client)
    path, query = client.gets.to_s.split(" ")[1].to_s.split("?", 2)
    nil until client.gets.to_s.strip.empty?
    params = URI.decode_www_form(query.to_s).to_h
    path == "/stream" ? stream(client, params) : delay(client, params)
  rescue Errno::EPIPE, Errno::ECONNRESET, IOError
    nil
  ensure
    client.close
  end

  def stream(client, params)
    client.write("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
    Integer(params.fetch("tokens", 40)).times do |i|
      sleep(Integer(params.fetch("interval_ms", 20)) / 1000.0)
      client.write("data: #{JSON.generate(choices: [ { delta: { content: "tok#{i} " } } ])}\n\n")
    end
    client.write("data: [DONE]\n\n")
  end

  def delay(client, params)
    sleep(Integer(params.fetch("ms", 50)) / 1000.0)
    client.write("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
  end

  def raise_file_limit
    _, hard = Process.getrlimit(:NOFILE)
    Process.setrlimit(:NOFILE, hard)
  end
end

if $PROGRAM_NAME == __FILE__
  port = 0
  OptionParser.new { |o| o.on("--port N", Integer) { |v| port = v } }.parse!
  FakeLLMServer.run(port)
end
