# frozen_string_literal: true

module Bobbin
  # One configured worker pool: its queues, fibers or threads, how many processes run it, how often it polls, and
  # for a fiber pool its stall threshold and thread lane (nil: Bobbin.config's).
  class Pool < Data.define(:queues, :mode, :size, :processes, :polling_interval, :stall_threshold, :thread_lane)
    KEYS = %w[queues fibers threads processes polling_interval stall_threshold thread_lane].freeze
    # Keys only a fiber pool takes.
    FIBER_KEYS = %w[stall_threshold thread_lane].freeze

    # Builds a Pool from a Hash (string or symbol keys); errors name `where` (e.g. "config/bobbin.yml: workers[1]").
    def self.parse(hash, where)
      raise ConfigurationError, "#{where}: a pool must be a mapping of #{KEYS.join(', ')}, got #{hash.inspect}" unless hash.is_a?(Hash)

      hash = hash.transform_keys(&:to_s)
      unknown = hash.keys - KEYS
      raise ConfigurationError, "#{where}: unknown key #{unknown.first.inspect} (known: #{KEYS.join(', ')})" if unknown.any?

      new(queues: queues(hash.fetch("queues", [ "*" ]), where), **mode(hash, where),
          processes: Setting.count(hash.fetch("processes", 1), "#{where}.processes"),
          polling_interval: (Setting.check(:polling_interval, hash["polling_interval"], "#{where}.polling_interval") if hash.key?("polling_interval")),
          **fiber_options(hash, where))
    end

    def self.fiber_options(hash, where)
      given = FIBER_KEYS & hash.keys
      raise ConfigurationError, "#{where}.#{given.first}: only a fiber pool takes it (this one has threads)" if given.any? && hash.key?("threads")

      FIBER_KEYS.to_h { |key| [ key.to_sym, (Setting.check(key.to_sym, hash[key], "#{where}.#{key}") if hash.key?(key)) ] }
    end

    # Positional construction keeps working for callers that predate the fiber options.
    def initialize(queues:, mode:, size:, processes:, polling_interval: nil, stall_threshold: nil, thread_lane: nil) = super

    # The pool's own, else Bobbin.config's as it is when read: `Bobbin.configure { |c| c.polling_interval = 0.05 }` (or
    # config.bobbin's) after the default pool was made reached the setting and not the pool (a review).
    def polling_interval = super || Bobbin.config.polling_interval

    def self.queues(value, where)
      list = value.is_a?(String) ? value.split(",").map(&:strip) : value
      valid = list.is_a?(Array) && list.any? && list.all? { |queue| queue.is_a?(String) && !queue.strip.empty? }
      raise ConfigurationError, "#{where}.queues: must be a list of queue names (or \"*\"), got #{value.inspect}" unless valid

      list
    end

    def self.mode(hash, where)
      given = %w[fibers threads].select { |key| hash.key?(key) }
      raise ConfigurationError, "#{where}: give exactly one of fibers or threads, not both" if given.size == 2
      raise ConfigurationError, "#{where}: give fibers: N or threads: N" if given.empty?

      { mode: given.first.to_sym, size: Setting.count(hash[given.first], "#{where}.#{given.first}") }
    end

    # Keyword arguments for Worker.new.
    def worker_options
      options = { queues: queues, mode => size, polling_interval: to_h[:polling_interval] }.compact
      mode == :fibers ? options.merge(stall_threshold: stall_threshold, thread_lane: thread_lane).compact : options
    end

    # The pool as the Hash `parse` takes back.
    def settings
      { "queues" => queues, mode.to_s => size, "processes" => processes, "polling_interval" => to_h[:polling_interval],
        "stall_threshold" => stall_threshold, "thread_lane" => thread_lane }.compact
    end

    def to_s = "#{mode}: #{size} × #{processes} process#{'es' if processes > 1}, queues #{queues.join(',')}"
  end
end
