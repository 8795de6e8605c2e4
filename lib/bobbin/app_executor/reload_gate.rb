# frozen_string_literal: true

module Bobbin
  module AppExecutor
    # When a worker reloads a Rails app's code (development). Rails' reload lock (ActiveSupport::Dependencies.interlock)
    # tells the code it lets run apart from a reload by thread, and the jobs of a fiber pool share one thread: a job
    # that found the app's files changed as it began would unload the app's code while the jobs beside it ran it or
    # loaded it, and they failed on constants that were gone. So the app's reloader never reloads inside a job (its
    # check answers false there; code outside jobs, a request in the same process, is left to Rails' lock); the gate
    # does, between jobs. A job that finds the files changed as it starts holds back the jobs that start after it,
    # waits for those running in this process to end, reloads, then runs: what Rails' lock does for threads, for
    # fibers and threads alike.
    class ReloadGate
      # This process's gate for the Rails app's reloader (a forked child gets its own).
      def self.current
        return @current if @pid == ::Process.pid

        @pid = ::Process.pid
        @current = new(::Rails.application.reloader)
      end

      def initialize(reloader)
        @reloader = reloader
        @changed = reloader.check # the app's own: are any of its watched files changed?
        reloader.check = -> { !Fiber[:bobbin_job] && @changed.call }
        @lock = Thread::Mutex.new # both wait as a fiber under a fiber scheduler, as a thread otherwise
        @turn = Thread::ConditionVariable.new
        @running = 0
        @reloading = false
      end

      # Runs the block as one job, reloading the app's code first when its files changed.
      def pass
        entered = enter
        Fiber[:bobbin_job] = true # fiber storage: fibers the job starts inherit it
        yield
      ensure
        if entered
          Fiber[:bobbin_job] = nil
          leave
        end
      end

      private
        def enter
          @lock.synchronize do
            @turn.wait(@lock) while @reloading
            reload if @changed.call
            @running += 1
          end
          true
        end

        # Under the lock: waits for the running jobs to end (jobs starting meanwhile wait for the reload), reloads.
        def reload
          @reloading = true
          @turn.wait(@lock) while @running.positive?
          @reloader.reload!
        ensure
          @reloading = false
          @turn.broadcast
        end

        def leave
          @lock.synchronize do
            @running -= 1
            @turn.broadcast if @running.zero? && @reloading
          end
        end
    end
  end
end
