# frozen_string_literal: true

require "test_helper"
require_relative "../wakeups/silent_proxy"

# A pooler or proxy that freezes (SIGSTOP, a hang) keeps its connections open and the kernel keeps acknowledging what
# is sent to it: no keepalive or tcp_user_timeout fires, and nothing answers. A worker's heartbeat, claims and outcome
# writes waited on such sessions without a word until other hosts declared the worker dead (a trial). Bobbin's own
# statements now give up after half of process_alive_threshold, as in an outage, and the next one opens a new session.
class UnansweredStatementsTest < Bobbin::TestCase
  setup do
    skip_unless_postgres
    @proxy = SilentProxy.new(Bobbin::Record.connection_db_config.configuration_hash)
    @process_id = Bobbin::ProcessRecord.register(kind: "test", name: "unanswered").id
    Bobbin.config.set(heartbeat_interval: 0.5, process_alive_threshold: 2)
  end

  teardown do
    @store&.close
    @proxy&.close
  end

  test "PostgreSQL: a statement the server never answers is an outage after half of process_alive_threshold, and the next call opens a new session" do
    config = ActiveRecord::DatabaseConfigurations::UrlConfig.new("test", "proxied", @proxy.url("bobbin-unanswered"))
    @store = Bobbin::Store::Guarded.new(Bobbin::Store.for_adapter("postgresql").new(Bobbin::Store::OwnConnections.open(config), Bobbin::Store::QueueSelection.new([ "*" ])))
    assert_empty @store.claim(@process_id, 10), "the session works through the proxy"
    assert_equal 1, @proxy.cut_all, "the store's one session"

    id = SleepJob.enqueue(0)
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    error = assert_raises(Bobbin::Store::Unavailable) { @store.claim(@process_id, 10) }
    waited = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
    assert_match(/database unavailable during claim: PG::ConnectionBad: PostgreSQL did not answer within 1s \(half of process_alive_threshold\)/, error.message)
    assert_operator waited, :>=, 1, "it waited for the answer first"

    # The claim sent on the silent session may have run: its job then reads running, claimed by this process,
    # as after any claim whose answer was lost. The next claim goes out on a new session and is answered.
    claimed = Bobbin::JobRecord.find(id).state == "running" ? [] : [ id ]
    assert_equal claimed, @store.claim(@process_id, 10).map(&:id)
  end
end
