# frozen_string_literal: true

module Bobbin
  class Worker
    # Stamps, in each fiber, when it last got the event loop back from a wait: every way a fiber waits on an async
    # loop (IO, sleep, a Mutex or Queue, a yield, async's own conditions, offloaded work) goes through one of these
    # scheduler methods, and returns when the fiber runs again. The stall detector measures a job's hold from there:
    # a job that waited a moment (a contended lock) while 2,000 other fibers took their turns held the loop only
    # since it came back (a noop job was named for 101 ms of the others' time).
    module ResumeStamps
      # The fiber-local the stamp (monotonic seconds) is kept in.
      RESUMED = :bobbin_job_resumed

      # async's waits (kernel_sleep goes through block or transfer).
      WAITS = %i[transfer yield block io_wait io_read io_write process_wait blocking_operation_wait].freeze

      # Each wait written out as a method of its own: a forwarding `define_method` cost 1.4 µs a wait, these 0.45 µs.
      module Waits
        WAITS.each do |name|
          # def io_wait(...)
          #   super
          # ensure
          #   Thread.current[RESUMED] = Bobbin.monotonic
          # end
          module_eval(<<~RUBY, __FILE__, __LINE__ + 1)
            def #{name}(...)
              super
            ensure
              Thread.current[RESUMED] = Bobbin.monotonic
            end
          RUBY
        end
      end

      # Stamps `scheduler`'s fibers from now on (once per scheduler), in the waits it has (which depend on the Ruby,
      # io-event and worker pool).
      def self.on(scheduler)
        return if scheduler.is_a?(ResumeStamps)

        waits = Waits.instance_methods.select { |name| scheduler.respond_to?(name) }
        scheduler.singleton_class.prepend(Module.new do
          include ResumeStamps
          waits.each { |name| define_method(name, Waits.instance_method(name)) }
        end)
      end
    end
  end
end
