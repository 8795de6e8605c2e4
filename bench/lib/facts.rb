# frozen_string_literal: true

require "etc"

# The machine and software a run measured, saved with its results.
module Facts
  GEMS = %w[bobbin activerecord solid_queue good_job sidekiq sidekiq-fiber async-job async-job-processor-redis async io-event pg
            redis-client].freeze

  module_function

  def collect
    @collect ||= {
      "cores" => Etc.nprocessors, "kernel" => `uname -r`.strip, "ruby" => RUBY_DESCRIPTION,
      "cpu" => File.read("/proc/cpuinfo")[/model name\s*:\s*(.*)/, 1], "memory_gb" => (File.read("/proc/meminfo")[/MemTotal:\s+(\d+)/, 1].to_i / 1024.0 / 1024).round(1),
      "gems" => GEMS.to_h { |name| [ name, Gem.loaded_specs[name]&.version&.to_s || gem_version(name) ] },
      "postgresql" => psql("SHOW server_version"), "max_connections" => psql("SHOW max_connections"),
      "shared_buffers" => psql("SHOW shared_buffers"), "synchronous_commit" => psql("SHOW synchronous_commit"),
      "redis" => `redis-server --version`[/v=(\S+)/, 1]
    }
  end

  def psql(sql) = `psql -XtAc "#{sql}" -d postgres 2>/dev/null`.strip

  def gem_version(name) = Gem::Specification.find_by_name(name).version.to_s rescue "n/a"
end
