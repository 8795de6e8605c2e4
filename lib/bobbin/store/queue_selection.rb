# frozen_string_literal: true

module Bobbin
  module Store
    # The queues a worker pool takes jobs from: exact names, prefix wildcards (`llm_*`) or everything (`*`). The list
    # is ordered: a pool takes the jobs of its first entry before those of the next (by priority, then age, within
    # each), as Sidekiq's strict queue order and Solid Queue's lists do; a wildcard's queues rank together.
    class QueueSelection
      attr_reader :names, :prefixes

      # Parses a list such as ["chat", "llm_*"]; raises ConfigurationError on an empty or blank entry.
      def initialize(queues)
        list = Array(queues).flat_map { |queue| queue.to_s.split(",") }.map(&:strip)
        raise ConfigurationError, "queues must name at least one queue (or \"*\")" if list.empty? || list.any?(&:empty?)

        @all = list.include?("*")
        @entries = list.uniq
        @names = list.reject { |queue| queue.end_with?("*") }
        @prefixes = list.select { |queue| queue.end_with?("*") && queue != "*" }.map { |queue| queue.delete_suffix("*") }
      end

      # True when the pool takes every queue.
      def all? = @all

      # True when the pool takes jobs of `queue`.
      def match?(queue) = @entries.any? { |entry| covers?(entry, queue) }

      # The entries whose order decides which jobs come first, when it does (two or more): the list up to its "*" (what
      # follows is in the "*"). Each is a queue name, a prefix wildcard ("llm_*") or "*".
      def ranks
        ranks = @all ? @entries[0..@entries.index("*")] : @entries
        ranks.size > 1 ? ranks : nil
      end

      # Each rank's SQL condition, in order: its queues (`term` renders an entry's) and none of an earlier rank's.
      def rank_conditions(&term)
        ranks.each_with_index.map do |entry, index|
          earlier = ranks.first(index).map(&term)
          "AND #{term.call(entry)}#{" AND NOT (#{earlier.join(' OR ')})" if earlier.any?}"
        end
      end

      # The place of `queue` in the ranks (0 when the list's order decides nothing).
      def rank(queue)
        ranks&.index { |entry| covers?(entry, queue) } || 0
      end

      # Escapes a prefix for SQL LIKE so `_` and `%` in queue names match literally.
      def like_patterns = prefixes.map { |prefix| like_pattern(prefix) }

      # The LIKE pattern of a prefix (or a wildcard entry: its "*" is dropped).
      def like_pattern(prefix) = prefix.delete_suffix("*").gsub(/[\\%_]/) { |char| "\\#{char}" } + "%"

      # SQLite's GLOB pattern of a prefix (or a wildcard entry): GLOB, unlike SQLite's LIKE, tells case apart, as
      # PostgreSQL's LIKE and `match?` do (on SQLite `mail*` took MAILERS and Mailbox too: a review). `*`, `?` and
      # `[` in a name match literally, each in brackets.
      def glob_pattern(prefix) = prefix.delete_suffix("*").gsub(/[*?\[]/) { |char| "[#{char}]" } + "*"

      def to_s = (ranks || (all? ? [ "*" ] : @entries)).join(",")

      private

      # True when one entry of the list ("*", "llm_*" or a name) takes jobs of `queue`.
      def covers?(entry, queue) = entry.end_with?("*") ? queue.start_with?(entry.delete_suffix("*")) : entry == queue
    end
  end
end
