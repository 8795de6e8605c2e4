# frozen_string_literal: true

# Loaded by the supervisors the recurring tests start: the test jobs and an every-second task.
require_relative "jobs"

Bobbin.recurring("every_second", schedule: "every second", class: "TickJob", args: [ "s" ])
