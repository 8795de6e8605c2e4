# frozen_string_literal: true

module Bobbin
  class Dashboard
    # The routes. Roda gives routing, the encrypted session that holds the CSRF key (sessions), request- and
    # path-specific CSRF tokens (route_csrf), auto-escaping ERB (render with escape: Erubi, so every `<%= %>` is
    # escaped and only helpers' own markup goes out raw via `<%== %>`), and the Content-Security-Policy header.
    class App < Roda
      DONE = { "retry" => "Retried", "discard" => "Discarded", "release" => "Released" }.freeze
      # Why an action did not apply.
      REFUSED = Hash.new("the job is in a state that does not allow it").merge(
        "release" => "its process is alive by its heartbeat (a job is released only once its process is gone; " \
                     "a dead process's jobs go back by themselves within process_alive_threshold)"
      ).freeze
      ASSETS = { "app.css" => "text/css", "app.js" => "text/javascript" }.freeze
      # What a request asked for that cannot be done as asked (a filter or page cursor the operator layer turns down, a
      # NUL the database's driver refuses, an unknown operation): a 400 saying why.
      class BadRequest < StandardError; end

      # A request the page refuses with a 400 saying why: BadRequest, and a query or form Rack cannot parse (a field sent
      # as both `q=` and `q[]=`, a bad %-escape, too many or too deeply nested fields, a broken multipart body;
      # Rack::BadRequest marks them all from Rack 3.1). Not any ArgumentError: one from an auth hook or a page is
      # unexpected (a plain 500, logged), and its message went to whoever asked, unauthenticated too, and not to the log.
      BAD_REQUEST = [ BadRequest, Rack::QueryParser::ParameterTypeError, Rack::QueryParser::InvalidParameterError,
                      *(Rack::BadRequest if defined?(Rack::BadRequest)) ].freeze

      # The session cookie's path is the mount's (SCRIPT_NAME), not "/": two dashboards in one app (one for admins and
      # one read-only, one per database) replaced each other's cookie, and with it the CSRF key, so the forms of the one
      # visited first were refused (a review). Roda's cookie options are the app's, fixed: the path is set per request.
      module CookiePath
        # What a cookie's path may hold (RFC 6265: no CTL, no ";"); a mount's path with anything else keeps "/".
        PATH = %r{\A/[!-:<-~]*\z}

        module RequestMethods
          def persist_session(headers, session)
            super
            path = script_name
            return unless PATH.match?(path) && (cookies = headers[Roda::RodaResponseHeaders::SET_COOKIE])

            ours = /^(#{Regexp.escape(roda_class.sessions_opts[:key])}=[^;\n]*); path=\/(?=;|$)/
            headers[Roda::RodaResponseHeaders::SET_COOKIE] = cookies.is_a?(Array) ? cookies.map { |cookie| cookie.sub(ours) { "#{$1}; path=#{path}" } } : cookies.gsub(ours) { "#{$1}; path=#{path}" }
          end
        end
      end

      # Why a form was refused: "expired" alone sent the operator of several processes each with its own secret
      # (Falcon forks one per CPU by default) reloading a page whose next form half the processes refused again.
      CSRF_REFUSED = "This form has expired or did not come from the dashboard (CSRF check failed). Reload the page and try again."
      PER_PROCESS_SECRET = " This dashboard's secret is random to its process (BOBBIN_DASHBOARD_SECRET is not set): when several " \
                           "processes serve it (Falcon's forked children, a clustered Puma), each refuses the forms of the others. " \
                           "Set BOBBIN_DASHBOARD_SECRET (64+ bytes: `openssl rand -hex 64`) the same in every process."

      # A subclass bound to `dashboard` (auth, read-only) with its own session secret. Its session is its own, under a
      # key of its own in env: under rack.session, in a Rails app, it took the app's session and wrote all of it into
      # the dashboard's cookie (readable for 30 days with Bobbin's secret; past 4 KB every page failed). `per_process`:
      # the secret is this process's own, random (a refused form then says so).
      def self.configured(dashboard, secret, per_process: false)
        refused = per_process ? CSRF_REFUSED + PER_PROCESS_SECRET : CSRF_REFUSED
        Class.new(self) do
          opts[:dashboard] = dashboard
          plugin :sessions, secret: secret, key: "bobbin.dashboard", env_key: "bobbin.dashboard.session", cookie_options: { same_site: :strict, httponly: true }
          plugin CookiePath
          plugin :flash # what an action did, shown once on the page it redirects to (from a URL, anyone could plant text)
          plugin :route_csrf, require_request_specific_tokens: true do |_request|
            response.status = 403
            view(:refused, locals: { message: refused })
          end
        end.freeze
      end

      # Every `<%= %>` escaped by Helpers#h, which also makes the bytes of a row valid UTF-8.
      plugin :render, views: File.expand_path("views", __dir__), escape: true, layout: "layout", template_opts: { escapefunc: "h" }
      plugin :content_security_policy do |csp|
        csp.default_src :none
        csp.script_src :self
        csp.style_src :self
        csp.connect_src :self
        csp.form_action :self
        csp.base_uri :none
        csp.frame_ancestors :none
      end
      # X-Frame-Options for browsers that predate frame-ancestors: no page of it in another site's frame (clickjacking).
      plugin :default_headers, "X-Content-Type-Options" => "nosniff", "Referrer-Policy" => "same-origin", "Cache-Control" => "no-store",
                               "X-Frame-Options" => "DENY"
      plugin :halt
      # Anything unexpected: a plain page, the details (a backtrace, names of files and tables) in the log only; the
      # server's own error page shows the backtrace to whoever asked, with --auth-token from other hosts too.
      plugin :error_handler do |error|
        Bobbin.logger.error("bobbin dashboard: #{request.request_method} #{Printable.printable(request.path)} failed: " \
                            "#{error.class}: #{Printable.printable(error.message)}\n#{Array(error.backtrace).join("\n")}")
        response["Content-Type"] = "text/plain; charset=utf-8"
        "Something went wrong; the server's log has the details.\n"
      end
      plugin :head # HEAD answers as GET does, without the body (uptime checks)
      include Helpers

      route do |r|
        # Mounted at /jobs by Rack::URLMap or a Roda/Sinatra app, a request for /jobs arrives with no path at all (Rails
        # passes "/"): the pages' links are relative to the mount's "/jobs/".
        r.redirect("#{r.script_name}/") if r.path_info.empty?

        # The gem's own stylesheet and script, the same for everyone: served before the auth check, so the page that
        # refuses someone is styled too.
        r.get("assets", ASSETS.keys) do |name|
          response["Content-Type"] = ASSETS.fetch(name)
          response["Cache-Control"] = "public, max-age=300"
          File.read(File.expand_path("assets/#{name}", __dir__))
        end

        if (message = dashboard.refusal(r))
          response.status = 403
          r.halt(view(:refused, locals: { message: message }))
        end

        # A lock another session holds on Bobbin's tables (a VACUUM FULL, a migration's rewrite) is waited for briefly, then
        # the page says so (see locked_tables): every page waited in silence for the whole lock, and a proxy timed it out.
        Store.waiting_briefly_for_locks do
          r.get("metrics") do
            response["Content-Type"] = Metrics::CONTENT_TYPE
            Metrics.text
          end

          r.is("") { r.get { view(:overview) } }
          r.root { view(:overview) }
          r.get("queues") { view(:queues) }
          r.get("processes") { view(:processes) }
          r.get("recurring") { view(:recurring) }
          r.get("failed") { r.redirect(path("/jobs?state=failed")) }
          r.get("scheduled") { r.redirect(path("/jobs?state=scheduled")) }

          r.on("jobs") do
            r.get(Integer) { |id| (job = Operator.job(id)) ? view(:job, locals: { job: job }) : not_found("No job #{id} (finished jobs are deleted after their retention).") }
            r.get(true) { view(:jobs, locals: { page: asked { Operator.jobs(filter_params, cursor: r.params["after"], limit: 50) } }) }
            r.post("bulk") do
              writable!
              operation = r.params["operation"]
              raise BadRequest, "unknown bulk operation #{operation.inspect} (retry or discard)" unless %w[retry discard].include?(operation)

              filter = asked { Operator::Filter.from(filter_params) }
              count = asked { Operator.public_send(:"#{operation}_all", filter, by: operator) }
              flash["notice"] = "#{DONE[operation]} #{count} jobs"
              r.redirect(path("/jobs?#{query(filter.to_h)}"))
            end
            r.post(Integer, %w[retry discard release]) do |id, operation|
              writable!
              done = Operator.public_send(operation, id, by: operator)
              flash["notice"] = done ? "#{DONE[operation]}." : "Not #{DONE[operation].downcase}: #{REFUSED[operation]}."
              r.redirect(path("/jobs/#{id}"))
            end
          end

          # The queue's name comes in a form field, not the path: a browser resolves a segment "." or ".." (or "%2e")
          # before it sends the request, so a queue so named could not be paused (a trial).
          r.post("queues", %w[pause resume]) do |operation|
            writable!
            queue = r.params["queue"]
            raise BadRequest, "a queue's name must be valid UTF-8" unless queue.is_a?(String) && queue.dup.force_encoding(Encoding::UTF_8).valid_encoding?

            queue = queue.dup.force_encoding(Encoding::UTF_8)
            asked { Operator.public_send(operation, queue) }
            flash["notice"] = "#{operation == 'pause' ? 'Paused' : 'Resumed'} #{queue}."
            r.redirect(path("/queues"))
          end
        end
      rescue *BAD_REQUEST => error
        response.status = 400
        view(:refused, locals: { message: error.message })
      rescue *Store::CONNECTION_ERRORS => error # the details (hosts, sockets) go to the log, not to the page
        Bobbin.logger.warn("bobbin dashboard: database unavailable (#{Store.reason(error)})")
        unavailable("The database is unavailable (#{error.class}). This page works again once it is back.")
      rescue ActiveRecord::StatementInvalid => error
        if DatabaseProblem.read_only_server?(error) # a replica's URL, or a failover's old primary: an action was a plain 500
          next unavailable("The database takes no writes (a replica, or a failover's old primary): nothing was changed. " \
                           "Try again once it is the primary.")
        end
        next locked_tables if Store.locked?(error)

        # Bobbin's tables not made yet (in development after the default production-only install, or before db:prepare)
        # was a plain 500 whose log said "Could not find table 'bobbin_jobs'": the page says so, and what to run. (After
        # the connection errors: NoDatabaseError is a StatementInvalid too.)
        message = Record.with_connection do |connection|
          missing = Boot.tables_missing(connection)
          Boot.missing_tables(missing, connection) if missing.include?("bobbin_jobs") # one table gone is something else
        end
        raise error unless message # not made yet: a plain 500

        response.status = 503
        view(:refused, locals: { message: "#{message}." })
      end

      private
        def dashboard = opts[:dashboard]

        # A page saying the database cannot serve it for now, and when to ask again.
        def unavailable(message)
          response.status = 503
          response["Retry-After"] = "5"
          view(:refused, locals: { message: message })
        end

        # Bobbin's tables locked by another session past Store.lock_wait: who holds it goes to the log (its query may carry
        # data), the page says what it is and when to come back.
        def locked_tables
          Bobbin.logger.warn("bobbin dashboard: #{Printable.printable(request.path)}: #{Store.lock_waited}: #{Store.lock_holders}")
          unavailable("Bobbin's tables are locked by another session (a migration, a VACUUM FULL, a LOCK TABLE). " \
                      "This page works again once the lock is released.")
        end

        # Every POST: refused in read-only mode, else checked for its CSRF token.
        def writable!
          if dashboard.read_only
            response.status = 403
            request.halt(view(:refused, locals: { message: "This dashboard is read-only." }))
          end
          check_csrf!
        end

        def filter_params = request.params.slice(*Operator::Filter::KEYS.map(&:to_s))

        # The block's ArgumentError, raised for what the request asked (the operator layer's word on a filter, a cursor or
        # a queue's name, or the driver's on a NUL in one), as a BadRequest.
        def asked
          yield
        rescue ArgumentError => error
          raise BadRequest, error.message
        end

        def operator = request.env["bobbin.operator"] || "dashboard"

        def not_found(message)
          response.status = 404
          view(:refused, locals: { message: message })
        end
    end
  end
end
