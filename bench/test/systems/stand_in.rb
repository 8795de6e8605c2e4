# frozen_string_literal: true

# A stand-in job system for the harness's own tests: same commands as bench/systems/*.rb, its queue a file
# (STAND_IN_QUEUE), and STAND_IN_FAULT picks how it misbehaves, so the tests can check that the harness
# reports what a real peer would do wrong: lose a job and run another twice, die, or run nothing.
# `ruby stand_in.rb reset | enqueue WORKLOAD N PREFIX | work MODE N`
require_relative "../../lib/work"

queue = ENV.fetch("STAND_IN_QUEUE")
command, *args = ARGV
case command
when "reset"
  File.write(queue, "")
when "enqueue"
  workload, count, prefix = args
  Work.enqueue_one = ->(job_workload, key) { File.write(queue, "#{job_workload} #{key}\n", mode: "a") }
  Work.enqueue(count, prefix, workload) { |keys| File.write(queue, keys.map { |key| "#{workload} #{key}\n" }.join, mode: "a") }
when "work"
  fault = ENV["STAND_IN_FAULT"]
  abort("stand_in: lost its database connection") if fault == "die"
  taken = 0
  loop do # polls the file for jobs enqueued while it runs (the open loop)
    jobs = File.readlines(queue, chomp: true).drop(taken).map(&:split)
    taken += jobs.size
    jobs = jobs.drop(1) + [ jobs[1] ] if fault == "lose_and_repeat" && jobs.size > 1
    jobs.each { |workload, key| Work.run(workload, key) } unless fault == "stall"
    sleep 0.01
  end
end
