# frozen_string_literal: true

module Bobbin
  # Abstract base of Bobbin's models, so an app can point Bobbin at its own database with `connects_to`.
  class Record < ActiveRecord::Base
    self.abstract_class = true

    # Bobbin's tables are read and written on the writing role whatever role the app switched to: they have no reading
    # role (a queue database), or a replica that a job's state must not be read from or written to. Rails' automatic
    # role switching runs every GET in `connected_to(role: :reading, prevent_writes: true)`, and a `perform_later` or a
    # dashboard page there raised ConnectionNotDefined, or sent its INSERT to the replica (a trial). Likewise the
    # default shard, whatever shard the app switched to (a tenant's): jobs live in one place, where workers claim them.
    def self.current_role = ActiveRecord.writing_role
    def self.current_shard = default_shard
    def self.current_preventing_writes = false

    # Declares Bobbin's time columns UtcTime, whatever the app's `default_timezone`.
    def self.utc_times(*columns) = columns.each { |column| attribute(column, UtcTime.new) }

    # Reads the columns of Bobbin's tables now, at boot. A model reads them at its first query and holds a lock of its
    # class meanwhile: a first query that waited on a table lock (a migration) held up every thread that came after
    # it, housekeeping on a worker's heartbeat thread too, and the worker went silent.
    def self.load_schemas = descendants.each { |model| model.columns_hash unless model.abstract_class? }
  end
end
