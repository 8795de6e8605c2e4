# frozen_string_literal: true

module Bobbin
  class Worker
    # Raised into job threads that outlive the shutdown timeout.
    class Shutdown < Exception; end # rubocop:disable Lint/InheritException -- must pass through the jobs' rescue StandardError
  end
end
