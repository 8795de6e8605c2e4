# frozen_string_literal: true

# The harness's own tests (bin/rake test:bench): run in the bench bundle, against real processes, a real
# ledger socket and, for the one end-to-end cell, real PostgreSQL.
require "minitest/autorun"
require "tmpdir"
require_relative "../lib/ledger"
require_relative "../lib/plan"
require_relative "../lib/report"

FileUtils.mkdir_p(File.join(__dir__, "..", "tmp")) # worker logs; absent in a fresh clone
