# frozen_string_literal: true

require "json"

module Bobbin
  module Client
    # Turns job arguments into the JSON stored in a job row, refusing anything that would not come back the same.
    module Arguments
      PLAIN = [ String, Integer, TrueClass, FalseClass, NilClass ].freeze

      module_function

      # Returns the JSON text for `args`; raises SerializationError naming the job and argument position.
      def dump(job_name, args, limit: Bobbin.config.max_argument_bytes)
        args.each_with_index { |arg, index| check(arg, job_name, "argument #{index + 1}") }
        json = JSON.generate(args)
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

      def check(value, job_name, where)
        case value
        when *PLAIN then check_string(value, job_name, where)
        when Float then value.finite? || reject(job_name, where, "#{value} (non-finite Float)")
        when Array then value.each_with_index { |item, i| check(item, job_name, "#{where}[#{i}]") }
        when Hash then check_hash(value, job_name, where)
        else reject(job_name, where, "#{value.class} (#{value.inspect[0, 60]})")
        end
      end

      def check_hash(hash, job_name, where)
        hash.each do |key, item|
          reject(job_name, where, "a Hash with #{key.class} key #{key.inspect}") unless key.is_a?(String)
          check(item, job_name, "#{where}[#{key.inspect}]")
        end
      end

      def check_string(value, job_name, where)
        return unless value.is_a?(String) && !value.valid_encoding?

        reject(job_name, where, "a String that is not valid #{value.encoding}")
      end

      def reject(job_name, where, what)
        raise SerializationError, "#{job_name} #{where} is #{what}, which does not round-trip through JSON; " \
                                  "pass Strings, Integers, Floats, true/false/nil, Arrays and Hashes with String keys"
      end
    end
  end
end
