# frozen_string_literal: true

# A row per job run: the table the test helper creates (bobbin_test_ledger).
class LedgerEntry < ApplicationRecord
  self.table_name = "bobbin_test_ledger"
end
