# frozen_string_literal: true

require "test_helper"
require "open3"

# Active Record 7.2 drops a SQLite statement's binds when prepared statements are off (`prepared_statements: false`,
# or query log tags, `query_log_tags_enabled`): each enqueue inserted nothing and returned no id,
# Active Job called it enqueued, and a retry_on retry vanished (a review). Run in a process of each bundle: Active
# Record 7.2's (the Rails suite's) and this one's.
class PreparedStatementsOffTest < Bobbin::TestCase
  GEMFILES = { "7.2" => File.join(ROOT, "test/active_job/rails_suite/rails-7.2.gemfile"), "8.1" => File.join(ROOT, "Gemfile") }.freeze

  SCRIPT = <<~'RUBY'
    require "bobbin"
    Bobbin.connect(ENV.fetch("URL"))
    Bobbin.migrate!
    Bobbin.configure { |config| config.logger = Logger.new(File::NULL) }
    class PlainJob
      include Bobbin::Job
      def perform = nil
    end
    class OneAtATimeJob
      include Bobbin::Job
      bobbin_options concurrency: { to: 1, key: ->(key) { key } }
      def perform(_key) = nil
    end
    holder = OneAtATimeJob.enqueue("k")
    waiting = OneAtATimeJob.enqueue("k")
    blocked = Bobbin::JobRecord.find(waiting).state
    Bobbin.discard(holder) # lets the waiting one through
    puts JSON.generate(
      rails: ActiveRecord.version.segments.first(2).join("."), prepared: Bobbin::Record.connection.prepared_statements,
      one: PlainJob.enqueue, all: Bobbin.enqueue_all([ [ PlainJob, [] ], [ PlainJob, [] ] ]), blocked: blocked,
      let_through: Bobbin::JobRecord.find(waiting).state,
      queues: Bobbin::Operator::Stats.queues(cap: 100, grouped_up_to: 0).map { |queue| [ queue.name, queue.ready ] }
    )
  RUBY

  setup { skip "the binds dropped are SQLite's" if postgres? }

  GEMFILES.each do |rails, gemfile|
    test "with prepared statements off on Active Record #{rails} and SQLite, enqueues store their jobs and limits let them through" do
      env = { "BUNDLE_GEMFILE" => gemfile, "BUNDLE_PATH" => File.join(ROOT, "vendor/bundle"), "DATABASE_URL" => nil,
              "URL" => "sqlite3:#{File.join(Dir.mktmpdir, 'jobs.sqlite3')}?prepared_statements=false" }
      output, status = Bundler.with_unbundled_env { Open3.capture2e(env, "bundle", "check", chdir: ROOT) }
      skip "Active Record #{rails}'s bundle is not installed (bin/setup installs it): #{output}" unless status.success?

      output, status = Bundler.with_unbundled_env { Open3.capture2e(env, "bundle", "exec", RbConfig.ruby, "-e", SCRIPT, chdir: ROOT) }
      assert status.success?, output
      result = JSON.parse(output.lines.last)
      assert_equal [ rails, false ], result.values_at("rails", "prepared")
      assert_kind_of Integer, result["one"]
      assert_equal 2, result["all"].compact.size
      assert_equal %w[blocked ready], result.values_at("blocked", "let_through")
      assert_equal [ [ "default", 4 ] ], result["queues"], "counted with the statement's values"
    end
  end
end
