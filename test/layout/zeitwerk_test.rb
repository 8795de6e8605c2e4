# frozen_string_literal: true

require "test_helper"
require "open3"

# Every constant lives in a file at the path its name implies (Zeitwerk's rule, which a Rails engine and its
# autoloading depend on). errors/, records/ and config/ group files without adding a namespace.
class ZeitwerkTest < Bobbin::TestCase
  CHECK = <<~RUBY
    require "zeitwerk"
    require "active_record"
    require "async"
    require "rails"
    lib = File.expand_path("lib")
    loader = Zeitwerk::Loader.new
    loader.push_dir(lib)
    loader.ignore("\#{lib}/active_job", "\#{lib}/generators", "\#{lib}/puma", "\#{lib}/tasks") # loaded by path: Rails, Puma, Rake
    loader.inflector.inflect("cli" => "CLI", "postgresql" => "PostgreSQL", "sqlite" => "SQLite", "version" => "VERSION")
    %w[errors records config].each { |dir| loader.collapse("\#{lib}/bobbin/\#{dir}") }
    loader.setup
    # Zeitwerk checks that each file defines the constant its path names; a file may also open namespaces and nest
    # constants in its own, but any other class or module it defines is one no path names.
    expected = loader.all_expected_cpaths
    stray = []
    trace = TracePoint.new(:class) do |event|
      own = expected[event.path] or next
      name = event.self.name
      stray << "\#{name} in \#{event.path.delete_prefix(lib)}" unless name == own || name.start_with?("\#{own}::") || expected.value?(name)
    end
    trace.enable { loader.eager_load(force: true) }
    abort "defined where no path names them: \#{stray.join(', ')}" if stray.any?
    puts "eager loaded \#{Bobbin.constants.size} constants"
  RUBY

  test "Zeitwerk eager-loads lib/ with no file defining a constant other than the one its path names" do
    output, status = Open3.capture2e(RbConfig.ruby, "-e", CHECK, chdir: TestProcesses::ROOT)
    assert status.success?, output
    assert_match(/eager loaded \d+ constants/, output)
  end
end
