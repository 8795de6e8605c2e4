# frozen_string_literal: true

module Bobbin
  # The type of every time column of Bobbin's tables (`timestamp` without a zone), which hold UTC wall-clock times:
  # the hot-path SQL writes `now() AT TIME ZONE 'UTC'` and UTC text whatever the app's settings. In an app on
  # `config.active_record.default_timezone = :local`, Active Record wrote and read these columns as local times: on a
  # host at UTC+13 a heartbeat it judged looked 13 hours old (live workers were pruned as dead and their jobs run
  # again), a retried job was set to run 13 hours late, and two hosts in different zones wrote each recurring tick
  # under two keys (a trial). This type keeps them UTC both ways, whatever the app's zone.
  class UtcTime < ActiveRecord::Type::DateTime
    def initialize(**options) = super(timezone: :utc, **options) # strings are read as UTC

    # As UTC text: a connection on `default_timezone = :local` quotes a Time as its local wall clock.
    def serialize(value) = utc_text(super)
    def serialize_cast_value(value) = utc_text(super)

    # PostgreSQL's decoder for a `:local` connection reads the stored wall clock as a local time: the same wall
    # clock, as UTC.
    def deserialize(value)
      value = ::Time.utc(value.year, value.month, value.day, value.hour, value.min, value.sec + value.subsec) if value.is_a?(::Time) && !value.utc?
      super
    end

    private
      def utc_text(value) = value.acts_like?(:time) ? Store.timestamp(value) : value
  end
end
