# frozen_string_literal: true

module Bobbin
  # A job row names a class this process does not have (yet): a deploy in progress, or a worker started
  # without the job's code. Retried for about an hour and a half whatever the job's own retries (Execution::UNKNOWN_CLASS_ATTEMPTS),
  # so the job runs once the class is there.
  class UnknownJobClass < Error; end
end
