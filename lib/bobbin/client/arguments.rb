# frozen_string_literal: true

require "json"

module Bobbin
  module Client
    # Turns job arguments into the JSON stored in a job row, refusing anything that would not come back the same.
    module Arguments
      PLAIN = [ String, Integer, TrueClass, FalseClass, NilClass ].freeze
      # JSON.parse's default max_nesting, which the worker parses with: deeper arguments (the list counts as one) fail there.
      MAX_NESTING = 100

      module_function

      # Returns the JSON text for `args`; raises SerializationError naming the job and argument position.
      def dump(job_name, args, limit: Bobbin.config.max_argument_bytes)
        unless args.is_a?(Array)
          raise SerializationError, "#{job_name}: arguments must be an Array (to pass one Hash, wrap it: [{...}]), got #{args.inspect[0, 80]}"
        end

        args.each_with_index { |arg, index| check(arg, job_name, "argument #{index + 1}", 2) }
        json = generate(job_name, args)
        return json if limit.nil? || json.bytesize <= limit

        raise SerializationError, "#{job_name}: arguments are #{json.bytesize} bytes of JSON, over the " \
                                  "#{limit}-byte limit (Bobbin.config.max_argument_bytes); store the data and pass its id"
      end

      # Parses stored JSON back into the argument array; raises UnrunnableJob when it is not an array of JSON.
      def load(json)
        args = JSON.parse(json)
        raise UnrunnableJob, "arguments are not a JSON array: #{json[0, 100].inspect}" unless args.is_a?(Array)

        args
      rescue JSON::ParserError => error
        raise UnrunnableJob, "arguments are not valid JSON (#{error.message[0, 120]})"
      end

      # Refuses a value that would not round-trip; `depth`: how deep it sits in the JSON, the argument list being 1.
      def check(value, job_name, where, depth)
        case value
        when *PLAIN then check_string(value, job_name, where)
        when Float then value.finite? || reject(job_name, where, "#{value} (non-finite Float)")
        when Array then nested(value, job_name, where, depth).each_with_index { |item, i| check(item, job_name, "#{where}[#{i}]", depth + 1) }
        when Hash then check_hash(nested(value, job_name, where, depth), job_name, where, depth)
        else reject(job_name, where, "#{value.class} (#{value.inspect[0, 60]})")
        end
      end

      # Checks a Hash's keys (Strings only) and values.
      def check_hash(hash, job_name, where, depth)
        hash.each do |key, item|
          reject(job_name, where, "a Hash with #{key.class} key #{key.inspect}") unless key.is_a?(String)
          check_string(key, job_name, "#{where} key")
          check(item, job_name, "#{where}[#{key.inspect}]", depth + 1)
        end
      end

      # Stops at the depth the worker's JSON.parse refuses (which also ends a cycle before the stack overflows).
      def nested(value, job_name, where, depth)
        return value if depth <= MAX_NESTING

        raise SerializationError, "#{job_name} #{where[0, 60]}… is nested more than #{MAX_NESTING} levels deep " \
                                  "(counting the argument list), more than the worker's JSON parser reads; flatten it"
      end

      # Refuses a String JSON would not give back the same: invalid in its encoding, or binary with non-ASCII bytes.
      def check_string(value, job_name, where)
        return unless value.is_a?(String)
        return value.valid_encoding? || reject(job_name, where, "a String that is not valid #{value.encoding}") unless value.encoding == Encoding::BINARY

        value.ascii_only? || reject(job_name, where, "a binary (ASCII-8BIT) String with non-ASCII bytes (force_encoding(\"UTF-8\") if it is text)")
      end

      # JSON text for checked arguments; a string in an encoding JSON cannot convert still fails as a SerializationError.
      def generate(job_name, args)
        JSON.generate(args)
      rescue JSON::GeneratorError, EncodingError => error
        raise SerializationError, "#{job_name}: arguments cannot be written as JSON (#{error.message[0, 120]})"
      end

      # Raises SerializationError for the argument at `where`.
      def reject(job_name, where, what)
        raise SerializationError, "#{job_name} #{where} is #{what}, which does not round-trip through JSON; " \
                                  "pass Strings, Integers, Floats, true/false/nil, Arrays and Hashes with String keys"
      end
    end
  end
end
