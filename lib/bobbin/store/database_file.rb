# frozen_string_literal: true

module Bobbin
  module Store
    # The SQLite file a process opened. SQLite goes on with the file it has open, so when the path is moved, deleted or
    # replaced (a backup restored with `mv`, a directory moved) the process works on in the old file while jobs are
    # enqueued into the new one: they waited for ever, with nothing said (a trial). `replaced?` notices it.
    class DatabaseFile
      # Exit status of a worker that stopped for it (EX_TEMPFAIL: start it again, and it opens the file at the path).
      EXIT_REPLACED = 75

      # For Bobbin's database when it is an SQLite file; nil otherwise. A relative path is the one Active Record opens:
      # from Rails.root in a Rails app (database.yml's `storage/production.sqlite3`), not from the working directory. From
      # there, a web server started elsewhere (systemd's `/`, `puma -C /app/config/puma.rb`) watched a file that is not
      # there, and enqueued into a replaced database without a word (a review).
      def self.open(db_config = Record.connection_db_config)
        path = db_config.database.to_s
        return unless db_config.adapter.to_s.match?(/sqlite/i) && !path.empty? && !path.start_with?(":memory:", "file:")

        new(File.expand_path(path, (::Rails.root if defined?(::Rails.root)) || Dir.pwd))
      end

      # What a restart on the file now at the path needs first: SQLite's -wal and -shm files belong to the path, and
      # pages the old processes wrote to them reach a file moved over it while they ran (a trial: a copy made with
      # VACUUM INTO, moved in under a busy worker, read "database disk image is malformed").
      BEFORE_RESTART = "check that file first (sqlite3 FILE 'PRAGMA integrity_check'): one moved over the path while processes " \
                       "had it open can be corrupt; replace the file only with every process stopped"

      # What to say of it, with the path.
      def self.replaced(path) = "the SQLite database #{path} was moved, deleted or replaced while it ran, and the old file " \
                                "it still has open gets no new job"

      attr_reader :path

      def initialize(path)
        @path = File.expand_path(path)
        @identity = identity
      end

      # True once the path no longer names the file that was there when this was made.
      def replaced? = identity != @identity

      # Bytes `full?` writes beside the file: the first -shm mapping SQLite makes (32 KB) and then some.
      PROBE = 65_536

      # True when the disk holding the file takes no more data: a file of PROBE bytes beside it cannot be written
      # (it is removed at once). SQLite says only "disk I/O error" when the disk has no room for the -shm and -wal
      # files the first connection to the file makes.
      def full?
        probe = "#{@path}-bobbin-space-#{::Process.pid}"
        File.open(probe, File::WRONLY | File::CREAT | File::EXCL) { |file| file.write("\0" * PROBE) && file.fsync }
        false
      rescue Errno::ENOSPC, Errno::EDQUOT
        true
      rescue SystemCallError
        false
      ensure
        File.unlink(probe) if probe && File.exist?(probe)
      end

      private
        def identity
          stat = File.stat(@path)
          [ stat.dev, stat.ino ]
        rescue SystemCallError
          nil
        end
    end
  end
end
