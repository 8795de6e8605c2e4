# frozen_string_literal: true

require_relative "test_helper"
require "json"
require "bobbin"
require_relative "../lib/fiber_safety/jobs"
require_relative "../lib/fiber_safety/summary"

# bench/fiber_safety.rb's tables: a target is met only by what the cells show, and a cell that lost a job says so.
class FiberSafetySummaryTest < Minitest::Test
  SIZES = { noop_jobs: 100, sleep_jobs: 100, cost_repeats: 1, deflate_mb: 32, fp_seconds: 1 }.freeze

  def test_the_blocking_jobs_count_as_named_only_with_the_line_of_the_call
    at_call = falcon_cells(location: "bench/lib/fiber_safety/jobs.rb:#{FiberSafety.call_line}:in 'Fiddle::Function#call'")
    elsewhere = falcon_cells(location: "bench/lib/fiber_safety/jobs.rb:1:in 'perform'")

    assert_includes text(at_call), "| the 5 blocking jobs named (class, id, line of the call) | every round | 1/1 | met |"
    assert_includes text(elsewhere), "| the 5 blocking jobs named (class, id, line of the call) | every round | 0/1 | missed |"
    assert_includes text(at_call), "| …within 1 s of the call's start | ≤ 1,000 ms | 1010 ms | missed |"
  end

  def test_the_detector_cost_pairs_each_cell_with_its_own_default
    runs = [ [ "default", 1_000 ], [ "detector off", 1_020 ], [ "offload off", 990 ], [ "offload off", 1_010 ], [ "detector off", 1_040 ],
             [ "default", 1_000 ] ].map { |setup, rate| { "setup" => setup, "jobs_per_second" => rate, "cpu_us_per_job" => 20.0 } }
    cell = { "experiment" => "cost", "variant" => "noop", "round" => 1, "result" => { "runs" => runs, "stalls" => [] } }

    assert_includes text([ cell ]), "| noop | detector off | 1030 (1020–1040) | 20.0 | — | 1.03 |"
    assert_includes text([ cell ]), "| detector's cost on noop throughput (median over cells; their range) | ≤ 3 % | 2.9 % (2.9 … 2.9 %) | met |"
  end

  def test_a_cell_whose_jobs_did_not_all_succeed_is_listed
    cells = falcon_cells(location: "x", jobs: { "enqueued" => 55, "succeeded" => 54 })

    assert_includes text(cells), "falcon fibers round 1: {\"enqueued\" => 55, \"succeeded\" => 54}"
  end

  private
    def text(cells) = FiberSafety::Summary.new(cells, SIZES).to_s

    def falcon_cells(location:, jobs: { "enqueued" => 55, "succeeded" => 55 })
      blocking = Array.new(5) { |i| { "id" => i, "ran_ms" => 1_000, "events" => 1, "event_after_ms" => 1_010, "reported_ms" => 1_000, "row" => [ 1, 1_000 ] } }
      stalls = blocking.map { |job| { "id" => job["id"], "class_name" => "FiberSafety::BlockingCall", "duration_ms" => 1_000, "location" => location } }
      http = { "http_span_ms" => 100, "http_ms" => { "p50" => 60, "p99" => 90 } }
      [ [ "alone", [], [] ], [ "fibers", blocking, stalls ], [ "thread lane", [], [] ] ].map do |variant, jobs_blocking, reported|
        { "experiment" => "falcon", "variant" => variant, "round" => 1,
          "result" => http.merge("blocking" => jobs_blocking, "stalls" => reported, "jobs" => variant == "fibers" ? jobs : { "enqueued" => 50, "succeeded" => 50 }) }
      end
    end
end
