# frozen_string_literal: true

require "date"

module Bobbin
  module Client
    # Checks the fields of a new job row before anything is written, so both databases accept exactly the same
    # rows and every refusal is an EnqueueError that names the job and the value.
    module Fields
      INT32 = (-2**31..2**31 - 1)
      YEARS = (1970..9999)
      QUEUE_BYTES = 255
      TIME_CLASSES = "Time, DateTime or ActiveSupport::TimeWithZone"
      # A name Ruby can give a class (ÜberJob and CaféJob too), nested or not.
      CLASS_NAME = /\A(?:::)?[[:upper:]][[:word:]]*(?:::[[:upper:]][[:word:]]*)*\z/

      module_function

      # The class name, if it is one a worker can look up. A temporary name (Class#set_temporary_name) was stored, and the
      # worker failed the job at once as no class's (a review).
      def class_name(name)
        return name if name.is_a?(String) && name.match?(CLASS_NAME)

        raise EnqueueError, "#{"#{name.inspect}: " if name}an anonymous class cannot be enqueued (a worker finds the job by its class name): " \
                            "assign it to a constant"
      end

      # The queue as a UTF-8 String: a non-empty String or Symbol without control characters, at most 255 bytes.
      def queue(value, job)
        name = utf8(value.is_a?(Symbol) ? value.name : value)
        return name if queue_name?(name)

        raise EnqueueError, "#{job}: queue must be a non-empty String or Symbol of valid UTF-8 without control characters, commas or " \
                            "spaces around it, at most #{QUEUE_BYTES} bytes, got #{Printable.printable(value.inspect[0, 80])}"
      end

      # Whether `name` (a String, or nil) can name a queue. Control characters (NUL, a newline, \e[2J) in a name went raw
      # into Active Job's log lines; a comma, or spaces around it, made a name no worker's queue list can select (both
      # trials).
      def queue_name?(name)
        !name.nil? && !name.empty? && name == name.strip && !name.include?(",") && !name.match?(Printable::UNPRINTABLE) &&
          name.bytesize <= QUEUE_BYTES
      end

      # The priority, an Integer in PostgreSQL's and SQLite's common 32-bit range (lower runs first).
      def priority(value, job)
        return value if value.is_a?(Integer) && INT32.cover?(value)

        raise EnqueueError, "#{job}: priority must be a whole number from #{INT32.min} to #{INT32.max} (lower runs " \
                            "first), got #{value.inspect}"
      end

      # The runs `retries` allows (retries + 1), to check with max_attempts; anything else as given.
      def attempts(retries) = retries.is_a?(Integer) ? retries + 1 : retries

      # How many times the job may run: retries + 1, at least 1.
      def max_attempts(value, job)
        return value if value.is_a?(Integer) && value >= 1 && value <= INT32.max

        raise EnqueueError, "#{job}: max_attempts must be a whole number from 1 to #{INT32.max} " \
                            "(bobbin_options retries: N gives N + 1), got #{value.inspect}"
      end

      # The time as UTC, for a Time, DateTime or ActiveSupport::TimeWithZone in the years 1970..9999; nil stays nil
      # (now) unless `required`.
      def run_at(value, job, required: false)
        return if value.nil? && !required
        raise EnqueueError, "#{job}: run_at must be a #{TIME_CLASSES}, #{what(value)}; #{advice(job)}" unless time?(value)

        time = value.to_time.getutc # a copy: Time#utc converts the caller's Time in place (a frozen one raised FrozenError)
        return time if YEARS.cover?(time.year)

        raise EnqueueError, "#{job}: run_at #{time.inspect[0, 60]} is outside the years #{YEARS} that Bobbin stores"
      end

      # Now plus `seconds` (a finite Numeric ≥ 0), checked like run_at.
      def delay(seconds, job)
        unless seconds.is_a?(Numeric) && seconds.real? && seconds.finite? && seconds >= 0
          raise EnqueueError, "#{job}.enqueue_in: seconds must be a finite number ≥ 0, #{what(seconds)}"
        end

        run_at(Time.now + seconds, job)
      rescue RangeError, FloatDomainError
        raise EnqueueError, "#{job}: run_at now + #{seconds.inspect} s is outside the years #{YEARS} that Bobbin stores"
      end

      # Whether `value` is a point in time run_at accepts.
      def time?(value)
        value.is_a?(Time) || value.is_a?(DateTime) || (defined?(ActiveSupport::TimeWithZone) && value.is_a?(ActiveSupport::TimeWithZone))
      end

      # "got VALUE (Class)" for error messages.
      def what(value) = "got #{value.inspect[0, 80]} (#{value.class})"

      # What to pass instead of a value that is not a time.
      def advice(job)
        "for a point in time use Time.now + 60, for a delay in seconds #{job}.enqueue_in(60, ...)"
      end

      # A String as valid UTF-8 (nil when it is not a String or cannot be).
      def utf8(value)
        return unless value.is_a?(String)

        text = value.encoding == Encoding::BINARY ? value.dup.force_encoding(Encoding::UTF_8) : value.encode(Encoding::UTF_8)
        text if text.valid_encoding?
      rescue EncodingError
        nil
      end
    end
  end
end
