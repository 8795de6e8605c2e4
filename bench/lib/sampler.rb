# frozen_string_literal: true

# Samples, every 100 ms while a cell runs, the worker process trees' RSS and CPU time and the peak number of
# PostgreSQL sessions on the system's database (from pg_stat_activity, over one connection of its own, so the
# sampling costs the systems under test no CPU that Sidekiq would be spared).
require "pg"

class Sampler
  attr_reader :peak_rss_mb, :peak_connections

  def initialize(pids, database)
    @pids = pids
    @database = database
    @peak_rss_mb = 0
    @peak_connections = 0
    @cpu = 0.0
    @pg = PG.connect(dbname: "postgres", port: ENV.fetch("BENCH_PG_PORT", "5432")) if database
    @thread = Thread.new { loop { sample; sleep 0.1 } }
  end

  # Stops sampling; returns the worker tree's CPU seconds as last seen.
  def stop
    sample
    @thread.kill
    @pg&.close
    @cpu
  end

  private
    def sample
      pids = @pids.flat_map { |pid| tree(pid) }
      @peak_rss_mb = [ @peak_rss_mb, pids.sum { |pid| status(pid)[/VmRSS:\s+(\d+)/, 1].to_i } / 1024 ].max
      @cpu = [ @cpu, pids.sum { |pid| cpu_seconds(pid) } ].max
      @peak_connections = [ @peak_connections, connections ].max if @database
    rescue StandardError
      nil
    end

    def connections
      @pg.exec_params("SELECT count(*) FROM pg_stat_activity WHERE datname = $1", [ @database ]).getvalue(0, 0).to_i
    end

    def tree(pid)
      children = File.read("/proc/#{pid}/task/#{pid}/children").split.map(&:to_i) rescue []
      [ pid ] + children.flat_map { |child| tree(child) }
    end

    def status(pid) = File.read("/proc/#{pid}/status") rescue ""

    def cpu_seconds(pid)
      fields = File.read("/proc/#{pid}/stat").split(") ").last.split
      (fields[11].to_i + fields[12].to_i) / 100.0
    rescue StandardError
      0.0
    end
end
