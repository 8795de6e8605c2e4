# frozen_string_literal: true

require "net/http"

# The demo's job: stream a reply from the (fake) LLM and append each token to the message row as it arrives,
# as a chat app would. Almost all of its time is waiting on the next token.
class StreamReplyJob
  include Bobbin::Job
  bobbin_options queue: "llm", retries: 2

  class Message < ActiveRecord::Base
    self.table_name = "demo_messages"
  end

  def perform(message_id)
    uri = URI("#{ENV.fetch('DEMO_LLM_URL')}/stream?tokens=40&interval_ms=20")
    Net::HTTP.start(uri.host, uri.port, read_timeout: 10) do |http|
      http.request_get(uri) { |response| each_token(response) { |token| append(message_id, token) } }
    end
  end

  private
    def each_token(response)
      buffer = +""
      response.read_body do |chunk|
        buffer << chunk
        while (event = buffer.slice!(/\Adata: (.*?)\n\n/m))
          data = event.delete_prefix("data: ").strip
          return if data == "[DONE]"

          yield JSON.parse(data).dig("choices", 0, "delta", "content")
        end
      end
      raise IOError, "the stream ended before [DONE]"
    end

    def append(message_id, token)
      Message.where(id: message_id).update_all([ "content = content || ?", token ])
    end
end
