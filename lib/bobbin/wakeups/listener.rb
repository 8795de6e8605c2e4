# frozen_string_literal: true

module Bobbin
  module Wakeups
    # PostgreSQL: one LISTENing connection per process, on a thread of its own (waiting in libpq releases the
    # GVL, so neither job fibers nor threads wait on it), handing each announcement to this process's workers.
    # A lost connection (a restart, pg_terminate_backend, a network cut) is logged; idle workers poll at
    # polling_interval meanwhile, and the listener reconnects with backoff and wakes every worker once (work
    # may have arrived while it was deaf). A NOTIFY that never comes back (a pooler in transaction mode between
    # Bobbin and PostgreSQL) turns notifications off for the process, with one log line saying so.
    #
    # A cut that drops packets without a reset (a NAT or firewall forgetting an idle flow, a host gone from the
    # network) leaves a listening socket that is merely quiet, and libpq's TCP keepalives default to ~2 h. So no
    # job waits longer than a polling_interval for it (`quiet`: the process's shortest, within QUIET): after half
    # of it without a word from PostgreSQL the listener sends `SELECT 1`; when the answer is not back after the
    # other half, the listener counts as unhealthy and idle workers poll at once and every polling_interval, while
    # it waits up to PING_TIMEOUT for the answer (a late one makes it healthy again); none by then is a lost
    # connection. That is one trivial round trip per quiet/2 per idle process, none while notifications flow, and
    # no claim. Keepalives and tcp_user_timeout (Store::OwnConnections::KEEPALIVE) bound the listener's other
    # statements and connect_timeout its reconnects the same way.
    class Listener
      CHANNEL = "bobbin_jobs"
      # Seconds a probe NOTIFY may take to come back before we conclude notifications do not work here.
      PROBE_TIMEOUT = 2.0
      # The seconds a silent cut may go unnoticed (the workers' polling_interval, kept within this range: a ping
      # at most every 0.25 s, and at least one per 3.5 s of silence), and how long a ping's answer may take
      # before the connection counts as lost.
      QUIET = 0.5..7.0
      PING_TIMEOUT = 2.0
      # Named, so that pg_stat_activity tells an idle listener's session apart from the others.
      PING = "SELECT 1 AS bobbin_listener_ping"
      MAX_BACKOFF = 30.0

      # True when a NOTIFY sent from another session reaches a LISTEN on `db_config` within PROBE_TIMEOUT
      # (bobbin doctor). Raises the driver's error when PostgreSQL cannot be reached.
      def self.round_trip?(db_config)
        listener = Store::OwnConnections.open(db_config)
        probe(listener.raw_connection, db_config)
      ensure
        listener&.disconnect!
      end

      # Sends a NOTIFY from a second session and waits for it on `listening` (a PG::Connection). The probe must come
      # from another session: through PgBouncer in transaction mode one client's LISTEN and NOTIFY can share a server
      # connection and so "work", while a NOTIFY from any other client never reaches the LISTEN (its server connection
      # is handed to other clients).
      def self.probe(listening, db_config)
        channel = "bobbin_probe_#{::Process.pid}_#{rand(1 << 30)}"
        answer(listening, "LISTEN #{channel}")
        sender = Store::OwnConnections.open(db_config)
        answer(sender.raw_connection, "NOTIFY #{channel}")
        deadline = Bobbin.monotonic + PROBE_TIMEOUT
        heard = nil
        until heard == channel || (left = deadline - Bobbin.monotonic) <= 0
          heard = listening.wait_for_notify(left)
          break if heard.nil?
        end
        answer(listening, "UNLISTEN #{channel}")
        heard == channel
      ensure
        sender&.disconnect!
      end

      # Sends `sql` on `connection` (a PG::Connection) and waits up to PING_TIMEOUT for its answer; returns what the block
      # makes of it (the result is cleared then); none by then raises PG::ConnectionBad. A session that a frozen backend,
      # pooler or proxy accepted but never answers (the kernel acknowledges, so no keepalive or tcp_user_timeout fires)
      # left a reconnecting listener waiting on its LISTEN for ever, deaf even once the server was back (a trial).
      def self.answer(connection, sql)
        connection.send_query(sql)
        unless connection.block(PING_TIMEOUT)
          raise PG::ConnectionBad, "PostgreSQL did not answer within #{PING_TIMEOUT}s (a server, pooler or proxy that accepted the " \
                                   "connection and stopped answering?)"
        end
        result = connection.get_last_result
        yield result if block_given?
      ensure
        result&.clear
      end

      def initialize(db_config, logger: Bobbin.logger)
        @db_config = db_config
        @logger = logger
        @healthy = false
        @stop = Thread::Queue.new
        @wake, @waker = IO.pipe # a stop interrupts the listener's waits on the socket
      end

      # Starts listening on a thread; returns self.
      def start
        @thread = Thread.new { run }
        @thread.name = "bobbin-listener"
        self
      end

      # True while the connection listens.
      def healthy? = @healthy

      # Stops listening and closes the connection, waiting for the thread at most `within` seconds (nil: PROBE_TIMEOUT
      # and one more). Once called, the listener tells the workers nothing more (a listener still finishing must not hand
      # its last notifications to the workers of the next one).
      def stop(within = nil)
        @stopped = true
        @stop << :stop
        @waker.write_nonblock(".", exception: false)
        return unless @thread.nil? || @thread.join(within || PROBE_TIMEOUT + 1)

        @wake.close
        @waker.close
      end

      # Reconnects at once if it waits to (the process's own sessions reach the database again): announcements reach its
      # workers again as the database comes back, not up to MAX_BACKOFF later (a job enqueued meanwhile waited for it).
      def retry_now = (@stop << :retry if @lost && !@stopped)

      private
        def run
          delay = 0.5
          until stopping?
            begin
              listen
              delay = 0.5
              receive until stopping?
            rescue PG::Error, ActiveRecord::ActiveRecordError, IOError, SystemCallError => error
              deaf(error)
              break if @stop.pop(timeout: delay) == :stop

              delay = [ delay * 2, MAX_BACKOFF ].min
            ensure
              close
            end
          end
        end

        def listen
          @adapter = Store::OwnConnections.open(@db_config, within: connect_wait)
          @connection = @adapter.raw_connection
          @waits_on = [ @connection.socket_io, @wake ].freeze
          # A listening session waits for the server, not for a client: it is exempt from idle_session_timeout
          # (PostgreSQL 14+), which would otherwise close it after each quiet spell (a proxy's idle timeout sees
          # the pings below).
          Listener.answer(@connection, "SET idle_session_timeout = 0") if @connection.server_version >= 140_000
          # What the server says on this idle session as it closes it ("FATAL: terminating connection due to
          # administrator command") went to stderr as a bare line; the "notifications lost" warning that follows says it.
          @connection.set_notice_processor { |message| @logger.debug("bobbin listener: PostgreSQL said: #{message.strip}") }
          # The probe first: through a pooler in transaction mode, a LISTEN stays on whichever server connection ran it,
          # handed to other clients, and every NOTIFY then made PgBouncer log a warning (a trial: 1.7 lines per enqueue).
          return pooled! unless Listener.probe(@connection, @db_config)

          Listener.answer(@connection, "LISTEN #{CHANNEL}")
          Wakeups.note_paused(paused_queues) # later changes are announced
          @logger.info("bobbin: notifications back; idle workers wake on new work again") if @lost
          tell(nil) # work may have arrived while this process was not listening yet (or any more)
          @healthy = true
          @heard_at = Bobbin.monotonic
          @lost = false
        end

        # How long a new session may take to open and be readied: Active Record's two connects (connect_timeout each)
        # and its statements on connect, which a session accepted by a frozen server, pooler or proxy never answers: a
        # reconnecting listener waited on them for ever, deaf even once the server was back.
        def connect_wait
          timeout = @db_config.configuration_hash[:connect_timeout].to_f # 0: none, as libpq reads it
          2 * (timeout.positive? ? timeout : Store::OwnConnections::KEEPALIVE[:connect_timeout]) + PING_TIMEOUT
        end

        def receive
          half = Wakeups.polling_interval.clamp(QUIET) / 2
          @heard_at = Bobbin.monotonic if notified?(half)
          ping(half) if Bobbin.monotonic - @heard_at >= half
        end

        # True when notifications came within `timeout` seconds (or were read before); delivers them. Returns early,
        # false, when other data came or the listener is stopped.
        def notified?(timeout)
          return true if take_notifications
          return false unless readable?(timeout)

          @connection.consume_input
          take_notifications
        end

        def take_notifications
          heard = false
          while (notification = @connection.notifies)
            heard = true
            deliver(notification[:extra]) if notification[:relname] == CHANNEL
          end
          heard
        end

        # Waits up to `timeout` seconds for the socket to be readable; false on a stop or a timeout.
        def readable?(timeout)
          ready, = IO.select(@waits_on, nil, nil, timeout)
          ready&.include?(@connection.socket_io) && !stopping?
        end

        # Sends `SELECT 1`; an answer not back after `half` seconds makes the listener unhealthy (idle workers poll)
        # until it comes; none within PING_TIMEOUT (or `half`, if longer) raises PG::ConnectionBad. Notifications
        # read meanwhile stay queued in libpq for the next wait.
        def ping(half)
          @connection.send_query(PING)
          sent = Bobbin.monotonic
          late_at = sent + half
          deadline = sent + [ PING_TIMEOUT, half ].max
          until answered? || stopping?
            now = Bobbin.monotonic
            late if now >= late_at
            raise PG::ConnectionBad, "PostgreSQL did not answer within #{(deadline - sent).round(1)}s (a network cut that dropped the connection silently?)" if now >= deadline

            readable?((now < late_at ? late_at : deadline) - now)
          end
          return if stopping?

          @connection.get_last_result&.clear # as the store's results are: see Store::PostgreSQL#exec
          @heard_at = Bobbin.monotonic
          @healthy = true
        end

        def answered?
          @connection.consume_input
          !@connection.is_busy
        end

        # The ping's answer is late: idle workers poll at polling_interval from now (and at once) until it comes.
        def late
          return unless @healthy

          @healthy = false
          tell(nil)
        end

        # Jobs enqueued one by one to a queue all send the same payload: the last one's notice is read once.
        def deliver(payload)
          @notice = Notice.parse(payload) unless payload == @payload
          @payload = payload
          @notice.paused.nil? ? tell(@notice.queues, @notice.at) : read_paused(@notice)
        end

        # A pause or resume is announced after its commit, so two of one queue can be heard in the other order than
        # they committed: the notice is a cue to read the paused queues again, and the table decides. A resume wakes
        # its queues' workers (those still paused ignore it), and so does a pause that is no longer in the table.
        def read_paused(notice)
          Wakeups.paused_now(paused_queues, resumed: notice.paused ? [] : notice.queues) unless stopping?
        end

        # Every result is cleared once read: libpq's memory (~3 KB for the ping's) is counted towards Ruby's malloc
        # limit but freed only by a collection, and an idle thread-pool worker, allocating little, went half an hour
        # without one while its ping results (two a second) added ~0.4 MB a minute to its RSS (a trial).
        def paused_queues = Listener.answer(@connection, PAUSED) { |result| result.column_values(0) }

        def tell(queues, at = nil) = (Wakeups.deliver(queues, at) unless stopping?)

        def pooled!
          @logger.warn("bobbin: a NOTIFY did not come back within #{PROBE_TIMEOUT}s (a pooler such as PgBouncer in transaction " \
                       "mode?); notifications are off for this process and idle workers poll every polling_interval. " \
                       "Point workers at PostgreSQL directly, or set notifications: false to skip this check")
          @stopped = true
          @stop << :stop
        end

        def deaf(error)
          @logger.warn("bobbin: notifications lost (#{Store.reason(error)}); idle workers poll every " \
                       "polling_interval until the listener reconnects") unless @lost
          @healthy = false
          @lost = true
          tell(nil)
        end

        def close
          @healthy = false
          @adapter&.disconnect!
        rescue StandardError
          nil
        ensure
          @adapter = @connection = nil
        end

        def stopping? = @stopped == true
    end
  end
end
