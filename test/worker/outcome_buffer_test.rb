# frozen_string_literal: true

require "test_helper"

# Outcomes are written only to rows still running on their worker. A worker declared dead (cut off from the database,
# or frozen, past process_alive_threshold) has its jobs taken back meanwhile, and they may run again elsewhere; its
# late outcomes for them are dropped. That used to happen without a word (a trial: a woken host said only "took back 0
# of its jobs" while 30 of 30 had run twice).
class OutcomeBufferTest < Bobbin::TestCase
  teardown { @store&.close }

  def outcome(job, state = "succeeded", run_at: nil)
    Bobbin::Store::Outcome.new(job.id, state, (Bobbin::Store.timestamp(Time.now) unless run_at), run_at, nil, nil, nil, nil, job.queue, job.attempts)
  end

  test "outcomes of jobs taken back from the worker and claimed by another are dropped, and a warning counts them" do
    process_id = Bobbin::ProcessRecord.register(kind: "test", name: "outcomes").id
    @store = Bobbin::Store.open(Bobbin::Store::QueueSelection.new([ "*" ]))
    ids = Array.new(3) { |i| SleepJob.enqueue(i) }
    jobs = @store.claim(process_id, 3)
    assert_equal ids, jobs.map(&:id)
    Bobbin::JobRecord.where(id: ids.first(2)).update_all(state: "ready", claimed_at: nil) # another host's recovery
    other = Bobbin::ProcessRecord.register(kind: "test", name: "other").id
    assert_equal ids.first(2), @store.claim(other, 2).map(&:id), "and another worker's claim"

    log = bobbin_log do
      buffer = Bobbin::Worker::OutcomeBuffer.new(@store, process_id)
      jobs.each { |job| buffer << Bobbin::Store::Outcome.new(job.id, "succeeded", Bobbin::Store.timestamp(Time.now), nil, nil, nil, nil, nil, job.queue, job.attempts) }
      assert_equal 3, buffer.flush
      assert_empty buffer.pending_ids
    end
    assert_equal %w[running running succeeded], Bobbin::JobRecord.where(id: ids).order(:id).pluck(:state)
    assert_equal 1, log.scan(/bobbin worker #{process_id}: 2 finished jobs were no longer this worker's when their outcomes were written, and their outcomes were dropped/).size, log
  end

  # A worker cut off from the database past process_alive_threshold is judged dead and its jobs go back to ready; the
  # ones it finished meanwhile, claimed by no one since, take its outcomes when it comes back, at the attempt they ran
  # as (recovery gave it back), and do not run again (a trial's partitioned worker: 5 of 5 ran twice).
  test "outcomes of jobs recovered while the worker was cut off, and claimed by no one since, land as they ended" do
    process_id = Bobbin::ProcessRecord.register(kind: "test", name: "outcomes").id
    @store = Bobbin::Store.open(Bobbin::Store::QueueSelection.new([ "*" ]))
    ids = Array.new(3) { |i| SleepJob.enqueue(i) }
    finished, retried, _still_running = jobs = @store.claim(process_id, 3)
    Bobbin::ProcessRecord.where(id: process_id).delete_all
    assert_equal 3, Bobbin::Recovery.recover(process_id, "process #{process_id} stopped heartbeating")
    assert_equal [ 0 ], Bobbin::JobRecord.where(id: ids).distinct.pluck(:attempts), "recovery gave the attempts back"

    log = bobbin_log do
      buffer = Bobbin::Worker::OutcomeBuffer.new(@store, process_id)
      buffer << outcome(finished)
      buffer << outcome(retried, "ready", run_at: Bobbin::Store.timestamp(Time.now + 60))
      assert_equal 2, buffer.flush
    end
    assert_no_match(/no longer this worker's/, log)
    assert_equal [ [ "succeeded", 1 ], [ "ready", 1 ], [ "ready", 0 ] ], Bobbin::JobRecord.where(id: ids).order(:id).pluck(:state, :attempts)
    assert_equal [ jobs[2].id ], @store.claim(process_id, 3).map(&:id), "the retry waits for its time; the job recovery gave back runs"
  end

  # Recovery fails a job blamed for a crash once it is out of crash retries. A worker only cut off (frozen, partitioned)
  # that then finishes it is no crash: its outcome is what happened, where the job stayed failed with ProcessDied
  # though it had succeeded (a review), and a user retrying it ran it again. An operator's retry since is left alone.
  test "outcomes of jobs recovery failed while their worker was cut off land as they ended, unless retried since" do
    Bobbin.config.set(crash_retries: 1)
    process_id = Bobbin::ProcessRecord.register(kind: "test", name: "outcomes").id
    @store = Bobbin::Store.open(Bobbin::Store::QueueSelection.new([ "*" ]))
    failed_ids = Array.new(2) do |i|
      id = SleepJob.enqueue(i)
      Bobbin::JobRecord.where(id: id).update_all(max_attempts: 1)
      2.times do # one in flight at a time, so blamed: its second crash is past its crash retry
        assert_equal [ id ], @store.claim(process_id, 1).map(&:id)
        assert_equal 1, Bobbin::Recovery.recover(process_id, "process #{process_id} stopped heartbeating")
      end
      assert_equal [ "failed", Bobbin::ProcessDied.name ], Bobbin::JobRecord.where(id: id).pick(:state, :last_error_class)
      id
    end
    assert Bobbin::Operator.retry(failed_ids.last, by: "ops")

    log = bobbin_log do
      buffer = Bobbin::Worker::OutcomeBuffer.new(@store, process_id)
      failed_ids.each { |id| buffer << outcome(Bobbin::JobRecord.find(id)) }
      buffer.flush
    end
    assert_equal [ "succeeded", "ready" ], Bobbin::JobRecord.where(id: failed_ids).order(:id).pluck(:state), log
    assert_match(/bobbin worker #{process_id}: 1 finished job was no longer this worker's/, log)
  end

  # A write sent to a server that then froze gave up unanswered, landed once the server resumed, and the worker's
  # retry found the rows finished: it warned that 5 jobs "may have run again", all finished by itself (a trial).
  test "an outcome written again after its first write landed unseen is not taken for a job taken back" do
    process_id = Bobbin::ProcessRecord.register(kind: "test", name: "outcomes").id
    @store = Bobbin::Store.open(Bobbin::Store::QueueSelection.new([ "*" ]))
    Array.new(2) { |i| SleepJob.enqueue(i) }
    now = Bobbin::Store.timestamp(Time.now)
    finished, retried = @store.claim(process_id, 2)
    outcomes = [ Bobbin::Store::Outcome.new(finished.id, "succeeded", now, nil, nil, nil, nil, nil, finished.queue, 1),
                 Bobbin::Store::Outcome.new(retried.id, "ready", nil, now, "RuntimeError", "boom", nil, nil, retried.queue, 1) ]
    @store.finish(process_id, outcomes) # the first write, whose answer never came
    log = bobbin_log do
      buffer = Bobbin::Worker::OutcomeBuffer.new(@store, process_id)
      outcomes.each { buffer << it }
      assert_equal 2, buffer.flush
    end
    assert_no_match(/no longer this worker's/, log)
    assert_equal %w[succeeded ready], Bobbin::JobRecord.where(id: [ finished.id, retried.id ]).order(:id).pluck(:state)
  end

  test "outcomes all written say nothing" do
    process_id = Bobbin::ProcessRecord.register(kind: "test", name: "outcomes").id
    @store = Bobbin::Store.open(Bobbin::Store::QueueSelection.new([ "*" ]))
    SleepJob.enqueue(0)
    log = bobbin_log do
      buffer = Bobbin::Worker::OutcomeBuffer.new(@store, process_id)
      @store.claim(process_id, 1).each { |job| buffer << Bobbin::Store::Outcome.new(job.id, "succeeded", Bobbin::Store.timestamp(Time.now), nil, nil, nil, nil, nil, job.queue, job.attempts) }
      assert_equal 1, buffer.flush
    end
    assert_equal %w[succeeded], Bobbin::JobRecord.pluck(:state)
    assert_no_match(/no longer this worker's/, log)
  end
end
