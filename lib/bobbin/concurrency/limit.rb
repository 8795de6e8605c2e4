# frozen_string_literal: true

require "digest"

module Bobbin
  module Concurrency
    # A job class's concurrency limit: at most `to` jobs with the same key run at once, across every process and
    # host. Jobs beyond it wait in state "blocked", unclaimed, until a slot frees: a holder finishes, fails, is
    # retried later, or has run for `duration` seconds (so a holder whose process hangs or vanished cannot keep
    # its slot forever). The key is `group/value`: group defaults to the job's own class name (a subclass of the
    # declaring class has slots of its own, as in Solid Queue), value is what `key` returns for the job's arguments
    # (a String, Symbol or number; an Active Record model counts as "Class/id"); a `group` lambda is called as `key` is,
    # and its value is named the same way.
    class Limit
      # Seconds a running job holds its slot at most (Solid Queue's default, so limits_concurrency ports as is).
      DEFAULT_DURATION = 180
      # Seconds a slot is held at most, whatever `duration` says: a century, past any run. PostgreSQL reckons expiry as
      # duration × 1 second, and past its interval's range (about 30,000 years) the statement failed: a duration meant
      # as forever (Float::MAX) made every enqueue of the key raise while a holder ran, and stopped the promotion pass.
      MAX_DURATION = Setting::LONGEST
      KEY_BYTES = 255
      OPTIONS = %i[to key duration group on_conflict].freeze

      attr_reader :to, :duration

      # Builds a Limit from `bobbin_options concurrency: { to:, key:, duration:, group: }` or `limits_concurrency`
      # keywords; raises ConfigurationError naming `job_name` and the option at fault.
      def self.parse(options, job_name)
        raise ConfigurationError, "#{job_name}: concurrency must be a Hash of #{OPTIONS.join(', ')}, got #{options.inspect}" unless options.is_a?(Hash)

        unknown = options.keys - OPTIONS
        raise ConfigurationError, "#{job_name}: unknown concurrency option #{unknown.first.inspect} (known: #{OPTIONS.join(', ')})" if unknown.any?
        raise ConfigurationError, "#{job_name}: concurrency needs key: (a lambda of the job's arguments, or a String)" unless options.key?(:key)

        new(job_name: job_name, **options)
      end

      def initialize(key:, job_name:, to: 1, duration: DEFAULT_DURATION, group: nil, on_conflict: :block)
        self.class.to!(to, job_name)
        unless key.respond_to?(:call) || key.is_a?(String) || key.is_a?(Symbol)
          raise ConfigurationError, "#{job_name}: concurrency key: must be a lambda (or a String or Symbol), got #{key.inspect}"
        end
        raise ConfigurationError, "#{job_name}: concurrency on_conflict: only :block is supported, got #{on_conflict.inspect}" unless on_conflict == :block
        unless group.nil? || group.respond_to?(:call) || group.is_a?(String) || group.is_a?(Symbol)
          raise ConfigurationError, "#{job_name}: concurrency group: must be a String, Symbol or lambda, got #{group.inspect}"
        end

        @to = to
        @key = key
        @duration = self.class.duration!(duration, job_name)
        @group = group
      end

      # The key for a job of class `job_name` with these arguments; `context` is the Active Job instance the
      # lambdas run on (nil for Bobbin::Job, whose lambdas take the arguments).
      def key_for(arguments, job_name, context = nil)
        group = evaluate(@group, arguments, context)
        self.class.key(group.nil? ? job_name : self.class.group(group), evaluate(@key, arguments, context))
      end

      # The job row's concurrency columns for a job whose key is `key`.
      def columns(key) = self.class.columns(key, @to, @duration)

      # `to`, a whole number from 1 to what the row's integer column holds; raises ConfigurationError naming `job_name`
      # otherwise (also for Solid Queue's limit). A larger one (10**10 meant as "no limit") was taken where declared,
      # and every enqueue of the class then failed on PostgreSQL with the driver's "out of range for type integer".
      def self.to!(to, job_name)
        return to if to.is_a?(Integer) && to >= 1 && to <= Client::Fields::INT32.max

        raise ConfigurationError, "#{job_name}: concurrency to: must be a whole number from 1 to #{Client::Fields::INT32.max}, got #{to.inspect}"
      end

      # `duration` in seconds, > 0 (at most MAX_DURATION); raises ConfigurationError naming `job_name` otherwise (also for Solid Queue's).
      def self.duration!(duration, job_name)
        unless duration.respond_to?(:to_f) && !duration.is_a?(String)
          raise ConfigurationError, "#{job_name}: concurrency duration: must be a number of seconds, got #{duration.inspect}"
        end

        [ Setting.seconds(duration.to_f, "#{job_name}: concurrency duration", above: 0), MAX_DURATION ].min
      end

      # The row columns for `key`, `limit` and `duration` (also used for Solid Queue's limits_concurrency).
      def self.columns(key, limit, duration)
        { concurrency_key: key, concurrency_limit: limit, concurrency_duration: duration.to_f }
      end

      # "group/value": an Active Record model as "Class/id", also inside an Array or Hash (`[account, region]`: a model
      # written as itself was "#<Account:0x…>", another key for each job, and the limit held none of them back); keys
      # over 255 bytes, or that are not UTF-8 text without NULs, become "group/sha256-…".
      def self.key(group, value)
        key = [ group, *named(value) ].compact.join("/")
        text = key.dup.force_encoding(Encoding::UTF_8)
        return text if text.bytesize <= KEY_BYTES && text.valid_encoding? && !text.include?("\0")

        # Too long, or bytes no text column takes (a key lambda's Digest#digest, a NUL): failed every enqueue of the key
        # with the driver's error (PostgreSQL: "string contains null byte"; SQLite: "source sequence is illegal/malformed utf-8").
        "#{Store.text(group.to_s, 100)}/sha256-#{Digest::SHA256.hexdigest(key)}"
      end

      # A group lambda's value as text, its Active Record models as "Class/id" as in a key: a model written as itself was
      # "#<Account:0x…>", a group for each job, and the limit held none of them back.
      def self.group(value) = [ named(value) ].join("/")

      # `value` with its Active Record models as [Class, id], at any depth of its Arrays (a Hash's pairs are Arrays).
      def self.named(value)
        return [ value.class.name, value.id ] if defined?(ActiveRecord::Base) && value.is_a?(ActiveRecord::Base)
        return value.to_a.map { |item| named(item) } if value.is_a?(Array) || value.is_a?(Hash)

        value
      end
      private_class_method :named

      private
        def evaluate(option, arguments, context)
          case option
          when nil, String, Symbol then option&.to_s
          else context ? context.instance_exec(*arguments, &option) : option.call(*arguments)
          end
        end
    end
  end
end
