# frozen_string_literal: true

require "ipaddr"
require "openssl"

module Bobbin
  class Dashboard
    # `bobbin dashboard` and `bobbin metrics`: serve the Rack app the block builds (given the auth hook) with Rack's
    # default server (Puma when installed). With `token`, HTTP basic auth whose password is the token is the auth
    # hook (usable outside development); without one it binds only a loopback address.
    class Server
      def initialize(port:, host:, token: nil, name: "dashboard")
        if token&.strip&.empty? # `--auth-token "$TOKEN"` with the variable unset: no credentials at all matched it
          raise ConfigurationError, "bobbin #{name}: --auth-token (or BOBBIN_AUTH_TOKEN) is empty (an unset variable?); give it a secret, " \
                                  "or leave the option out and bind 127.0.0.1"
        end
        if token.nil? && !loopback?(host)
          raise ConfigurationError, "bobbin #{name} on #{host} is reachable from other machines: give it --auth-token TOKEN " \
                                    "(HTTP basic auth), or bind 127.0.0.1 and reach it through a tunnel or an authenticating proxy"
        end

        @port = port
        @host = host
        @name = name
        # OpenSSL's compare hashes both first: Rack's returns at once for a password of another length, telling the token's.
        auth = token && ->(request) { OpenSSL.secure_compare(basic_password(request).to_s, token) && "#{name}:#{basic_user(request)}" }
        @app = yield(auth)
        # Without a token there are no credentials to ask for (a read-only POST is 403), and only this machine's names.
        @app = token ? challenge(@app, auth) : loopback_named(@app)
      end

      # The Rack app it serves.
      attr_reader :app

      def run
        handler = rack_handler
        serving = "bobbin #{@name} on http://#{@host}:#{@port}/"
        Bobbin.logger.info(serving)
        # A Rails app's logger writes to its log file: whoever started it in a terminal is told where it serves.
        unless ActiveSupport::Logger.logger_outputs_to?(Bobbin.logger, $stdout, $stderr)
          $stdout.puts("#{serving} (Ctrl-C stops it)")
          $stdout.flush
        end
        handler.run(@app, Host: @host, Port: @port, Silent: true, **(PUMA_WITHOUT_CONFIG if handler.name.end_with?("::Puma")))
      rescue Errno::EADDRINUSE, Errno::EADDRNOTAVAIL, Errno::EACCES, SocketError => error # was the server's backtrace, after "on http://…"
        instead = case error
        when Errno::EADDRINUSE then "--port"
        when SocketError then "--host (a name this machine resolves, or an address)" # a --host that does not resolve
        else "--port or --host"
        end
        raise ConfigurationError, "bobbin #{@name} cannot listen on #{@host}:#{@port} (#{error.message.sub(/ - bind\(2\).*/, '')}): give it another #{instead}"
      end

      # Puma reads config/puma.rb from the directory it runs in; an app's (`plugin :bobbin` with BOBBIN_IN_PUMA set, as
      # on a Kamal web role) made `bobbin dashboard` start a supervisor and workers of its own. "-" is Puma's "none".
      PUMA_WITHOUT_CONFIG = { config_files: [ "-" ] }.freeze

      private
        # Rack's default server (Puma when installed). With rackup but no server (Rails' own bundle has none: puma comes
        # from the app's Gemfile), rackup's LoadError came with a backtrace, after the line saying where it served.
        def rack_handler
          require "rackup"
          Rackup::Handler.default
        rescue LoadError
          raise ConfigurationError, "bobbin #{@name} needs the rackup gem and a Rack server such as puma in the bundle (bundle add rackup puma)"
        end

        def loopback?(host) = host == "localhost" || (IPAddr.new(host).loopback? rescue false)

        # Bound to loopback without a token: a page on a name rebound to 127.0.0.1 (DNS rebinding) would read it, as it
        # did `bobbin metrics` (a trial), and a proxy on this machine would publish it (an nginx forwarding to
        # `bobbin metrics` did, in a trial); the dashboard's own check refuses them too.
        def loopback_named(app)
          lambda do |env|
            next app.call(env) if Dashboard.from_this_machine?(env)

            [ 403, { "content-type" => "text/plain" },
              [ "bobbin #{@name} without --auth-token answers requests from this machine to localhost, 127.0.0.1 or [::1] only, with no proxy in between.\n" ] ]
          end
        end

        # Asks the browser for credentials (the token) when refused for lack of them, or for wrong ones: a 403 for a
        # mistyped password was never asked again, and the browser kept sending it until restarted (a trial). A 403
        # with the right ones (a read-only dashboard's POST, a form without its CSRF token) stays one.
        def challenge(app, auth)
          lambda do |env|
            status, headers, body = app.call(env)
            return [ status, headers, body ] unless status == 403 && !auth.call(Rack::Request.new(env))

            headers["www-authenticate"] = 'Basic realm="bobbin"'
            [ 401, headers, body ]
          end
        end

        def credentials(request) = request.get_header("HTTP_AUTHORIZATION").to_s[/\ABasic (.+)\z/, 1]&.unpack1("m")&.split(":", 2) || []

        def basic_user(request) = credentials(request)[0]

        def basic_password(request) = credentials(request)[1]
    end
  end
end
