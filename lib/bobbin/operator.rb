# frozen_string_literal: true

require "time"
%w[filter page actions stats process_view].each { |part| require_relative "operator/#{part}" }

module Bobbin
  # What operators see and steer, in one place for every face (Ruby, `bobbin` CLI, Bobbin::Dashboard, the Mission
  # Control adapter). Reads are keyset-paged and index-bound (see Page, Stats); actions are state-guarded UPDATEs
  # that never touch a running job under a live worker (see Actions) and record who did them.
  #
  #   page = Bobbin::Operator.jobs(state: "failed", queue: "mail", search: "Timeout")
  #   page.jobs; Bobbin::Operator.jobs(page.filter, cursor: page.next_cursor)
  #   Bobbin::Operator.retry_all({ state: "failed", class_name: "MailJob" }, by: "ops@example.com")
  module Operator
    module_function

    # A Page of jobs `filter` (Filter or Hash, or the criteria as keywords) selects, after `cursor`.
    def jobs(filter = nil, cursor: nil, limit: 50, **criteria) = Page.load(filter || criteria, cursor: cursor, limit: limit)

    # Job `id` with every column, or nil.
    def job(id) = JobRecord.find_by(id: id)

    def retry(id, by: "operator") = Actions.retry(id, by: by)
    def discard(id, by: "operator") = Actions.discard(id, by: by)
    def release(id, by: "operator") = Actions.release(id, by: by)
    def retry_all(filter, by: "operator") = Actions.retry_all(filter, by: by)
    def discard_all(filter, by: "operator") = Actions.discard_all(filter, by: by)
    def delete_finished(before:, states: Actions::DONE_WITH) = Actions.delete_finished(before: before, states: states)

    # Patient with SQLite's write lock as the actions on jobs are (both are idempotent).
    def pause(queue) = Actions.patiently { QueuePause.pause(queue) }
    def resume(queue) = Actions.patiently { QueuePause.resume(queue) }

    def counts = Stats.counts
    def queues(cap: nil) = Stats.queues(cap: cap)
    def throughput(minutes: 60) = Stats.throughput(minutes: minutes)
    def latency(queues = nil) = Stats.latency(queues)
    def processes = ProcessView.all
  end
end
