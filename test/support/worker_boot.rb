# frozen_string_literal: true

# Loaded by worker processes the tests start (`bobbin work --require`): the test job classes.
require_relative "jobs"
