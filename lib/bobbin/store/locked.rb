# frozen_string_literal: true

module Bobbin
  module Store
    # Raised when a statement waited Store.lock_wait for a lock on Bobbin's tables that another session holds (a
    # CREATE INDEX without CONCURRENTLY, VACUUM FULL, an ALTER TABLE that rewrites, LOCK TABLE): an outage of those
    # tables, waited out the same way, on the same session.
    class Locked < Unavailable; end
  end
end
