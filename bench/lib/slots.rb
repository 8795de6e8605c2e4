# frozen_string_literal: true

require "async/semaphore"

# An Async::Job middleware that runs at most `slots` jobs at once: Async::Job's Redis processor has no concurrency
# setting of its own (it starts a fiber per popped job), so this gives it the same N slots as every other system.
class Slots
  def initialize(delegate, slots:)
    @delegate = delegate
    @semaphore = Async::Semaphore.new(slots)
  end

  def call(job) = @semaphore.acquire { @delegate.call(job) }

  def start = @delegate.start

  def stop = @delegate.stop
end
