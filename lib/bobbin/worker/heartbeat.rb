# frozen_string_literal: true

module Bobbin
  class Worker
    # Tells the database, every heartbeat_interval, that this process is alive and how busy it is.
    class Heartbeat
      def initialize(worker, store, interval: Bobbin.config.heartbeat_interval)
        @worker = worker
        @store = store
        @interval = interval
        @signal = Thread::Queue.new
      end

      # Beats until `stop`.
      def run
        until @signal.pop(timeout: @interval) == :stop
          beat
        end
      end

      # Makes `run` return.
      def stop = @signal << :stop

      private
        def beat
          status = @worker.status
          ::Process.setproctitle("bobbin worker #{status[:name]} [#{status[:queues]}] #{status[:busy]}/#{status[:capacity]}")
          return if @store.heartbeat(@worker.process_id, JSON.generate(status))

          Bobbin.logger.warn("bobbin worker #{@worker.process_id}: process row is gone (pruned as dead?)")
        rescue Store::Unavailable => error
          Bobbin.logger.warn("bobbin worker #{@worker.process_id}: heartbeat failed: #{error.message}")
        end
    end
  end
end
