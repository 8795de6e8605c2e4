# frozen_string_literal: true

require_relative "llm_stream"

# The demo's job: stream a reply from the (fake) LLM and append each token to the message row as it arrives,
# as a chat app would. Almost all of its time is waiting on the next token.
class StreamReplyJob
  include Bobbin::Job
  bobbin_options queue: "llm", retries: 2

  class Message < ActiveRecord::Base
    self.table_name = "demo_messages"
  end

  def perform(message_id)
    LLMStream.each_token("#{ENV.fetch('DEMO_LLM_URL')}/stream?tokens=40&interval_ms=20") do |token|
      Message.where(id: message_id).update_all([ "content = content || ?", token ])
    end
  end
end
