# frozen_string_literal: true

module Bobbin
  # The database could not be reached before work started (down, refusing connections, too many of them): a process
  # manager's restart mends it once the database is back, so the command line exits 69, not a configuration's 78.
  class DatabaseUnreachable < ConfigurationError; end
end
