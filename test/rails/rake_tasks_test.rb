# frozen_string_literal: true

require "test_helper"
require "rake"

# lib/tasks/bobbin.rake in a Rake application of its own; this process stands for the booted app (its `environment`).
class RakeTasksTest < Bobbin::TestCase
  setup do
    @application, Rake.application = Rake.application, Rake::Application.new
    Rake::Task.define_task(:environment)
    load File.join(TestProcesses::ROOT, "lib/tasks/bobbin.rake")
  end

  teardown { Rake.application = @application }

  # Invokes `task` and returns [its exit status, what it wrote to stderr].
  def invoke(task)
    status = nil
    _, err = capture_io { status = assert_raises(SystemExit) { Rake::Task[task].invoke }.status }
    [ status, err ]
  end

  test "bobbin:pause and bobbin:resume without a queue say how to give one, and exit 64 as the CLI does" do
    once_per_run
    %w[bobbin:pause bobbin:resume].each do |task|
      assert_equal [ 64, "bobbin: #{task} needs a queue: bin/rails '#{task}[QUEUE]'\n" ], invoke(task)
    end
  end
end
