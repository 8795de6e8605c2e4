# frozen_string_literal: true

require "socket"

# A TCP proxy on loopback in front of PostgreSQL that can cut connections silently: `cut_listeners` stops forwarding
# the connections that sent `LISTEN bobbin_jobs` (`cut_all`: every connection open then) but closes nothing — bytes
# either way stay unread and no reset is sent, as when a NAT or firewall forgets an idle flow. Other connections, and any opened later
# (a reconnecting listener's), are forwarded as before. Never cut, it is a plain forwarder (e.g. on an address another
# network namespace reaches).
class SilentProxy
  Pair = Struct.new(:client, :server, :listening, :silent)

  # The port clients connect to (127.0.0.1).
  attr_reader :port

  # Forwards connections to `bind` to the database of `config` (an Active Record configuration hash): its socket
  # directory or host (nil: /var/run/postgresql) and port.
  def initialize(config, bind: "127.0.0.1")
    host, port = config[:host], config[:port] || 5432
    @upstream = host.nil? || host.start_with?("/") ? [ UNIXSocket, File.join(host || "/var/run/postgresql", ".s.PGSQL.#{port}") ] : [ TCPSocket, host, port ]
    @config = config
    @bind = bind
    @server = TCPServer.new(bind, 0)
    @port = @server.addr[1]
    @lock = Mutex.new
    @pairs = {}
    @thread = Thread.new { run }
  end

  # A database URL through this proxy, with the config's user and database, naming its sessions `application_name`.
  def url(application_name)
    user = [ @config[:username], @config[:password] ].compact.map { |part| URI.encode_www_form_component(part.to_s) }.join(":")
    "postgres://#{user}#{'@' unless user.empty?}#{@bind}:#{port}/#{@config[:database]}?sslmode=disable&pool=25&application_name=#{application_name}"
  end

  # Makes the listening connections silent from now on; returns how many there were.
  def cut_listeners
    @lock.synchronize { @pairs.values.uniq.select(&:listening).each { |pair| pair.silent = true }.size }
  end

  # Makes every connection open now silent (a frozen pooler or proxy); returns how many there were. Connections
  # opened later are forwarded.
  def cut_all
    @lock.synchronize { @pairs.values.uniq.each { |pair| pair.silent = true }.size }
  end

  # Makes the next connection whose client sends `text` silent from then on, that message included: a server, pooler
  # or proxy that accepted a session and then stopped answering. Connections opened later are forwarded.
  def cut_next(text)
    @lock.synchronize { @cut_next = text }
  end

  # True until a connection was cut for cut_next.
  def cutting? = @lock.synchronize { !@cut_next.nil? }

  # Stops forwarding and closes every socket.
  def close
    @thread.kill.join
    @lock.synchronize { @pairs.values.uniq.each { |pair| shut(pair) } }
    @server.close
  end

  private
    # One thread: a silent pair's sockets are left out of the select, so nothing is read from them.
    def run
      loop do
        watched = @lock.synchronize { [ @server ] + @pairs.reject { |_io, pair| pair.silent }.keys }
        ready, = IO.select(watched, nil, nil, 0.05)
        ready&.each { |io| io == @server ? accept : forward(io) }
      end
    end

    def accept
      client = @server.accept
      server = @upstream.first.new(*@upstream.drop(1))
      pair = Pair.new(client, server, false, false)
      @lock.synchronize { @pairs[client] = @pairs[server] = pair }
    end

    def forward(io)
      pair = @lock.synchronize { @pairs[io] }
      return if pair.nil? || pair.silent

      data = io.read_nonblock(65_536, exception: false)
      return if data == :wait_readable
      return drop(pair) if data.nil?
      return if io == pair.client && cut?(pair, data)

      pair.listening ||= io == pair.client && data.include?("LISTEN bobbin_jobs")
      (io == pair.client ? pair.server : pair.client).write(data)
    rescue IOError, SystemCallError
      drop(pair)
    end

    def cut?(pair, data)
      @lock.synchronize do
        next false unless @cut_next && data.include?(@cut_next)

        @cut_next = nil
        pair.silent = true
      end
    end

    def drop(pair)
      @lock.synchronize { [ pair.client, pair.server ].each { |socket| @pairs.delete(socket) } }
      shut(pair)
    end

    def shut(pair)
      [ pair.client, pair.server ].each { |socket| socket.close unless socket.closed? }
    end
end
