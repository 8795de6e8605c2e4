# frozen_string_literal: true

module Bobbin
  module Store
    # The queues a worker pool takes jobs from: exact names, prefix wildcards (`llm_*`) or everything (`*`).
    class QueueSelection
      attr_reader :names, :prefixes

      # Parses a list such as ["chat", "llm_*"]; raises ConfigurationError on an empty or blank entry.
      def initialize(queues)
        list = Array(queues).flat_map { |queue| queue.to_s.split(",") }.map(&:strip)
        raise ConfigurationError, "queues must name at least one queue (or \"*\")" if list.empty? || list.any?(&:empty?)

        @all = list.include?("*")
        @names = list.reject { |queue| queue.end_with?("*") }
        @prefixes = list.select { |queue| queue.end_with?("*") && queue != "*" }.map { |queue| queue.delete_suffix("*") }
      end

      # True when the pool takes every queue.
      def all? = @all

      # True when the pool takes jobs of `queue`.
      def match?(queue) = @all || @names.include?(queue) || @prefixes.any? { |prefix| queue.start_with?(prefix) }

      # Escapes a prefix for SQL LIKE so `_` and `%` in queue names match literally.
      def like_patterns
        prefixes.map { |prefix| prefix.gsub(/[\\%_]/) { |char| "\\#{char}" } + "%" }
      end

      def to_s = all? ? "*" : (names + prefixes.map { |prefix| "#{prefix}*" }).join(",")
    end
  end
end
