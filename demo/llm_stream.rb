# frozen_string_literal: true

require "json"
require "net/http"

# Reads a streamed (OpenAI-style server-sent events) chat completion token by token; used by the demo's job
# and the benchmark's llm_stream workload.
module LLMStream
  module_function

  # GETs `url` and yields each token's text as it arrives; raises IOError if the stream ends before [DONE].
  def each_token(url)
    uri = URI(url)
    Net::HTTP.start(uri.host, uri.port, read_timeout: 10) do |http|
      http.request_get(uri) { |response| read_events(response) { |token| yield token } }
    end
  end

  def read_events(response)
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
end
