# frozen_string_literal: true

require "test_helper"

class SchemaTest < Bobbin::TestCase
  def with_connection(&) = ActiveRecord::Base.connection_pool.with_connection(&)

  # Turns the tables back into what installs before schema versions have (version 1).
  def downgrade_to_version_one
    with_connection do |connection|
      connection.drop_table(:bobbin_schema)
      connection.remove_column(:bobbin_jobs, :crashes)
    end
    Bobbin::JobRecord.reset_column_information
  end

  test "an install from before schema versions is upgraded in place with jobs in flight, and a worker refuses it until then" do
    ids = Bobbin.enqueue_all(Array.new(3) { |i| [ LedgerJob, [ "old-#{i}" ] ] })
    worker = Bobbin::ProcessRecord.register(kind: "worker", name: "old version")
    Bobbin::JobRecord.where(id: ids.first).update_all(state: "running", claimed_by: worker.id, attempts: 1)
    downgrade_to_version_one
    assert_equal 1, with_connection { |c| Bobbin::Schema.version(c) }
    error = assert_raises(Bobbin::ConfigurationError) { drain(fibers: 2) }
    assert_match(/schema version 1 but this Bobbin needs #{Bobbin::Schema::VERSION}: run `bobbin migrate`/, error.message)

    2.times { Bobbin.migrate! }
    Bobbin::JobRecord.reset_column_information
    assert_equal Bobbin::Schema::VERSION, with_connection { |c| Bobbin::Schema.version(c) }
    assert_equal [ 0 ], Bobbin::JobRecord.where(id: ids).distinct.pluck(:crashes)
    assert_equal [ "running", worker.id, 1 ], Bobbin::JobRecord.where(id: ids.first).pick(:state, :claimed_by, :attempts),
                 "the job in flight under the old version is untouched by the upgrade"
    Bobbin::JobRecord.where(id: ids.first).update_all(state: "ready")
    drain(fibers: 2)
    assert_equal %w[old-0 old-1 old-2], LedgerEntry.order(:key).pluck(:key)
  end
end
