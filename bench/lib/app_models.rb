# frozen_string_literal: true

module AppDB
  # A chat message the llm_stream job appends tokens to.
  class Message < ActiveRecord::Base
    self.table_name = "bench_messages"
  end

  # A row db_mix reads, then counts a hit on.
  class Row < ActiveRecord::Base
    self.table_name = "bench_rows"
  end
end
