# frozen_string_literal: true

module Bobbin
  # Checks for numeric settings, with messages that name the setting. One place for Bobbin.configure,
  # config/bobbin.yml, CLI flags and Worker.new.
  module Setting
    # The smallest value each setting in seconds accepts (retention must also be above 0, or nil to keep forever).
    SECONDS = { polling_interval: 0.01, notified_polling_interval: 0.01, heartbeat_interval: 0.1, shutdown_timeout: 0,
                process_alive_threshold: 0, retention: 0, stall_threshold: 0.01, crash_quarantine: 0.01 }.freeze
    # Settings that are whole numbers ≥ 1 (max_argument_bytes may be nil: no limit).
    COUNTS = %i[max_argument_bytes fiber_db_concurrency crash_retries].freeze
    # Settings that are whole numbers ≥ 0 (0: none).
    SIZES = %i[thread_lane offload_threads].freeze
    NILABLE = %i[retention max_argument_bytes].freeze
    # The longest any setting in seconds may be (100 years). `retention: 1e12` (for "keep them all") passed, and then
    # every housekeeping pass failed in PostgreSQL: its cut-off, now less that, is before any timestamp (a review).
    LONGEST = 100 * 365 * 86_400.0
    # Settings that false turns off.
    OFFABLE = %i[stall_threshold].freeze
    # Settings that are true or false.
    FLAGS = %i[durable_enqueue notifications].freeze

    module_function

    # The value, if `name` accepts it; else ConfigurationError saying "`where`: must be …, got …".
    def check(name, value, where)
      return value if value.nil? && NILABLE.include?(name)
      return false if value == false && OFFABLE.include?(name)
      return flag(value, where) if FLAGS.include?(name)
      return count(value, where) if COUNTS.include?(name)
      return count(value, where, min: 0) if SIZES.include?(name)
      return seconds(value, where, above: 0, at_most: LONGEST, longer: "; retention: nil keeps finished jobs forever") if name == :retention

      seconds(value, where, min: SECONDS.fetch(name) { raise ConfigurationError, "unknown setting #{name.inspect}" }, at_most: LONGEST)
    end

    # Raises ConfigurationError for any given (non-nil) value its setting refuses; `where` names the caller
    # (Worker.new checks its keywords with it).
    def given(where, **settings)
      settings.each { |name, value| check(name, value, "#{where} #{name}") unless value.nil? }
    end

    # A process is presumed dead after process_alive_threshold without a heartbeat; raises unless that leaves room
    # for more than one missed beat.
    def check_heartbeat(interval, threshold, where)
      return if threshold > 2 * interval

      raise ConfigurationError, format("%s.process_alive_threshold: must be more than 2 × heartbeat_interval (2 × %g = %g s), " \
                                       "got %g", where, interval, 2 * interval, threshold) + ": a process is presumed dead after that long without a " \
                                "heartbeat, so one late beat would get a live worker's running jobs run again elsewhere " \
                                "(Bobbin.config.set(heartbeat_interval:, process_alive_threshold:) changes both at once)"
    end

    # true or false.
    def flag(value, where)
      return value if [ true, false ].include?(value)

      raise ConfigurationError, "#{where}: must be true or false, got #{value.inspect}"
    end

    # A whole number ≥ `min`.
    def count(value, where, min: 1)
      return value if value.is_a?(Integer) && value >= min

      raise ConfigurationError, "#{where}: must be a whole number of at least #{min}, got #{value.inspect}"
    end

    # A finite number of seconds ≥ `min` (or > `above`), and at most `at_most`, as a Float; `longer` ends the message
    # for one over `at_most`.
    def seconds(value, where, min: 0, above: nil, at_most: Float::INFINITY, longer: "")
      number = value.is_a?(Numeric) && value.real? && value.finite?
      raise ConfigurationError, "#{where}: must be at most #{at_most.to_i} seconds (#{(at_most / 31_536_000).round} years), got #{value.inspect}#{longer}" if number && value > at_most
      return value.to_f if number && (above ? value > above : value >= min)

      raise ConfigurationError, "#{where}: must be a number of seconds #{above ? "> #{above}" : "≥ #{min}"}, got #{value.inspect}"
    end
  end
end
