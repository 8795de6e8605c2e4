# frozen_string_literal: true

require "test_helper"
require "open3"

# `require "bobbin"` makes the adapter available to Active Job in either load order, before ActiveJob::Base loads.
class AdapterLoadingTest < Bobbin::TestCase
  PROBE = <<~RUBY
    base_loaded_before = ActiveJob.autoload?(:Base).nil?
    adapter = ActiveJob::QueueAdapters.lookup(:bobbin)
    puts [ adapter.name, base_loaded_before, ActiveJob.autoload?(:Base).nil? ].join(" ")
    ActiveJob::Base.queue_adapter = :bobbin
    puts ActiveJob::Base.queue_adapter.class.name
  RUBY

  {
    "bobbin before active_job" => %w[bobbin active_job],
    "active_job before bobbin" => %w[active_job bobbin]
  }.each do |order, libraries|
    test "#{order}: QueueAdapters.lookup(:bobbin) finds the adapter without loading ActiveJob::Base" do
      output, status = Open3.capture2e(RbConfig.ruby, "-e", libraries.map { |lib| "require #{lib.dump}\n" }.join + PROBE)
      assert status.success?, output
      assert_equal "ActiveJob::QueueAdapters::BobbinAdapter false false\nActiveJob::QueueAdapters::BobbinAdapter\n", output
    end
  end

  test "bobbin required after ActiveJob::Base has loaded: the adapter is loaded at once" do
    output, status = Open3.capture2e(RbConfig.ruby, "-e", <<~RUBY)
      require "active_job"
      ActiveJob::Base
      require "bobbin"
      puts ActiveJob::QueueAdapters.autoload?(:BobbinAdapter).inspect, ActiveJob::QueueAdapters::BobbinAdapter.name
    RUBY
    assert status.success?, output
    assert_equal "nil\nActiveJob::QueueAdapters::BobbinAdapter\n", output
  end
end
