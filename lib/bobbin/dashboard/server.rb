# frozen_string_literal: true

module Bobbin
  class Dashboard
    # `bobbin dashboard`: serves a Dashboard with Rack's default server (Puma when installed). With `token`, HTTP
    # basic auth whose password is the token is the auth hook (usable outside development).
    class Server
      def initialize(port:, host:, token: nil, read_only: false)
        @port = port
        @host = host
        auth = token && ->(request) { Rack::Utils.secure_compare(basic_password(request).to_s, token) && "dashboard:#{basic_user(request)}" }
        @app = Dashboard.new(auth: auth, read_only: read_only)
      end

      def run
        begin
          require "rackup"
        rescue LoadError
          raise ConfigurationError, "bobbin dashboard needs the rackup gem (and a server such as puma) in the bundle"
        end
        Bobbin.logger.info("bobbin dashboard on http://#{@host}:#{@port}/")
        app = challenge(@app)
        Rackup::Handler.default.run(app, Host: @host, Port: @port, Silent: true)
      end

      private
        # Asks the browser for credentials when refused for lack of them.
        def challenge(app)
          lambda do |env|
            status, headers, body = app.call(env)
            return [ status, headers, body ] unless status == 403 && !env["HTTP_AUTHORIZATION"]

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
