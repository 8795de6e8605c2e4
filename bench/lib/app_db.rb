# frozen_string_literal: true

# The application's own tables that the llm_stream and db_mix jobs read and write, through Active Record and
# the pool each system gives its jobs. Systems without an Active Record setup of their own (Sidekiq,
# Async::Job) connect on first use, as an app's initializer would, with fiber isolation under a fiber scheduler.
module AppDB
  ROWS = 1_000
  SCHEMA = <<~SQL
    CREATE TABLE IF NOT EXISTS bench_messages (id bigserial PRIMARY KEY, key text NOT NULL, body text NOT NULL DEFAULT '');
    CREATE TABLE IF NOT EXISTS bench_rows (id bigint PRIMARY KEY, payload text NOT NULL, hits integer NOT NULL DEFAULT 0);
    TRUNCATE bench_messages, bench_rows;
    INSERT INTO bench_rows (id, payload) SELECT i, md5(i::text) FROM generate_series(1, #{ROWS}) AS i;
  SQL

  @lock = Mutex.new

  module_function

  # Creates and empties the tables in `database` (run by the harness before each cell).
  def reset(database, port)
    require "pg"
    PG.connect(dbname: database, port: port).tap { |pg| pg.exec("SET client_min_messages = warning"); pg.exec(SCHEMA) }.close
  end

  # Connects Active Record to DATABASE_URL unless the system already did; returns the models' module.
  def ready!
    @ready ||= @lock.synchronize do
      require "active_record"
      unless ActiveRecord::Base.connection_handler.connection_pool_list.any?
        ActiveSupport::IsolatedExecutionState.isolation_level = :fiber if Fiber.scheduler
        ActiveRecord::Base.establish_connection(ENV.fetch("DATABASE_URL"))
      end
      require_relative "app_models"
      self
    end
  end
end
