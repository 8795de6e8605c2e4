# frozen_string_literal: true

module Bobbin
  module Wakeups
    # What an announcement says: the queues with new work (nil: any queue) and, when none of it is due yet, the
    # earliest time it becomes due (epoch seconds). Sent as a NOTIFY payload: `{"q":["llm","mail"],"at":1767225600.5}`.
    # A pause or resume of queues says so instead (`paused`: true or false; `{"q":["llm"],"at":null,"p":true}`).
    class Notice < Data.define(:queues, :at, :paused)
      # PostgreSQL refuses payloads of 8000 bytes or more; a longer list of queues becomes "any queue".
      MAX_BYTES = 7_900

      # Reads a payload; anything unreadable means "any queue, now" (a wake-up too many costs one claim).
      def self.parse(payload)
        hash = JSON.parse(payload)
        queues = hash["q"]
        new(queues.is_a?(Array) ? queues.grep(String).freeze : nil, hash["at"].is_a?(Numeric) ? hash["at"].to_f : nil,
            [ true, false ].include?(hash["p"]) ? hash["p"] : nil)
      rescue JSON::ParserError, TypeError, NoMethodError
        new(nil, nil)
      end

      # A notice of new work unless `paused` is given.
      def initialize(queues:, at: nil, paused: nil) = super

      # The payload: at most MAX_BYTES.
      def to_json(*)
        hash = { q: queues, at: at }
        hash[:p] = paused unless paused.nil?
        json = JSON.generate(hash)
        json.bytesize <= MAX_BYTES ? json : JSON.generate({ q: nil, at: at })
      end
    end
  end
end
