# frozen_string_literal: true

require "securerandom"
require "roda"
require_relative "config/boot" # Boot.tables_missing and missing_tables: the page a database without Bobbin's tables gets

module Bobbin
  # The web dashboard, a Rack app on Roda: `run Bobbin::Dashboard.new(auth: ->(request) { ... })` in config.ru,
  # `bobbin dashboard --port 9292`, or in Rails `mount Bobbin::Dashboard, at: "/jobs"` (inside an `authenticate`
  # block, with `Bobbin::Dashboard.default = Bobbin::Dashboard.new(auth: ->(_) { true })`, or with an auth hook).
  #
  # `auth` receives the Rack::Request and returns false/nil or a blank String (refused: 403), true, or a String naming the operator
  # (recorded on the jobs they act on). Without `auth` it serves only in development and test (every one of
  # BOBBIN_ENV, RAILS_ENV, RACK_ENV that is set says so), and only this machine when none is set: anywhere else it
  # answers every request with a page saying how to configure one. `read_only: true` shows everything and changes
  # nothing (no forms; every POST refused).
  class Dashboard
    LOCAL = %w[development test].freeze
    LOOPBACK = %w[127.0.0.1 ::1].freeze
    # The names a browser on this machine reaches a loopback server by; another name is a proxy's or a rebinding one's.
    LOOPBACK_HOSTS = %w[localhost 127.0.0.1 [::1]].freeze
    # Headers a proxy adds to say whom it forwards for: X-Forwarded-*, Forwarded, X-Real-IP, Via, and the CDNs' and
    # others' own (X-Forwarded: for=…, X-Original-Forwarded-For, Forwarded-For, X-Originating-IP).
    PROXY_HEADER = /\AHTTP_(\w*FORWARDED\w*|\w*REAL_IP|VIA|CF_CONNECTING_IP|\w*CLIENT_IP|\w*ORIGINATING_IP)\z/

    class << self
      # True when a request's Host (nil: none sent) names this machine by a loopback name.
      def loopback_host?(host) = host.nil? || LOOPBACK_HOSTS.include?(host.downcase.sub(/:\d+\z/, ""))

      # True when a request (its Rack env) comes from this machine straight: the peer's own address (not Rack's
      # request.ip, which believes X-Forwarded-For from any private address) is loopback, no proxy is in between (a proxy
      # on this machine would make every visitor local: nginx's common `X-Real-IP` alone did), and Host is a loopback
      # name (a page on a name rebound to 127.0.0.1 would otherwise read and act on it).
      def from_this_machine?(env)
        LOOPBACK.include?(env["REMOTE_ADDR"]) && loopback_host?(env["HTTP_HOST"]) && env.each_key.none? { |key| PROXY_HEADER.match?(key) }
      end

      # The instance `mount Bobbin::Dashboard` serves; set it to configure auth for a mounted dashboard.
      attr_writer :default

      def default = @default ||= new

      # Rack entry point, so the class itself mounts.
      def call(env) = default.call(env)
    end

    attr_reader :read_only

    # `secret`: 64+ bytes for the session cookie holding the CSRF key. By default BOBBIN_DASHBOARD_SECRET, else in a
    # Rails app one derived from its secret_key_base, else random per process: behind several processes without either,
    # forms from one are refused by another (a clustered Puma's workers, each making its own, refused half the actions).
    def initialize(auth: nil, read_only: false, environment: nil, secret: ENV["BOBBIN_DASHBOARD_SECRET"])
      @auth = auth
      @read_only = read_only
      # Not Rails.env: it says "development" when nothing is set.
      @environments = (environment ? [ environment ] : ENV.values_at("BOBBIN_ENV", "RAILS_ENV", "RACK_ENV")).compact.map(&:to_s).reject(&:empty?).uniq
      if secret && secret.bytesize < 64 # Roda's own error, a backtrace, said nothing of where the secret came from
        raise ConfigurationError, "the dashboard's secret (BOBBIN_DASHBOARD_SECRET) must be at least 64 bytes, got #{secret.bytesize}: " \
                                  "`openssl rand -hex 64` makes one"
      end
      secret ||= rails_secret
      @app = App.configured(self, secret || SecureRandom.hex(64), per_process: secret.nil?)
    end

    # Why it would refuse every request, with no auth hook outside development and test, or nil.
    def unguarded = (@auth || local_environment?) ? nil : "the dashboard needs an auth hook outside development and test (#{environment_said})"

    def call(env) = @app.call(env)

    # Why this request may not see the dashboard (a message), or nil when it may; the operator's name goes into
    # env["bobbin.operator"].
    def refusal(request)
      return auth_missing(request) unless @auth || open_to?(request)

      verdict = @auth ? @auth.call(request) : true
      return "Access denied." if Metrics.refused?(verdict) # "": a header or name left empty

      request.env["bobbin.operator"] = verdict.is_a?(String) ? verdict : "dashboard"
      nil
    end

    private
      # Without an auth hook: in development and test (or with no environment set at all), to this machine alone
      # (from_this_machine?). Development alone is not enough: rackup sets RACK_ENV=development when nothing is set,
      # and `rackup -o 0.0.0.0` served all.
      def open_to?(request) = local_environment? && Dashboard.from_this_machine?(request.env)

      def local_environment? = @environments.all? { |name| LOCAL.include?(name) }

      # The Rails app's own, as Rails derives its cookies' keys: every process and host that shares the app's
      # secret_key_base reads the others' sessions. Nil outside Rails, or in an app that has no secret_key_base.
      def rails_secret
        return unless defined?(::Rails) && ::Rails.respond_to?(:application) && ::Rails.application.respond_to?(:key_generator)

        ::Rails.application.key_generator.generate_key("bobbin/dashboard session", 64)
      rescue ArgumentError # Rails' "Missing secret_key_base"
        nil
      end

      def environment_said = @environments.any? ? "this is #{@environments.join(' / ')}" : "no BOBBIN_ENV, RAILS_ENV or RACK_ENV is set"

      def auth_missing(request)
        why = if local_environment?
          "Without an auth hook the Bobbin dashboard serves only requests from this machine to localhost, with no proxy in between " \
            "(#{environment_said}, and the request does not come from this machine, or names another host, or came through a proxy)."
        else
          "The Bobbin #{unguarded.delete_prefix("the ")}." # "the dashboard needs …"
        end
        "#{why} " \
          "Configure one: Bobbin::Dashboard.new(auth: ->(request) { request.env[\"warden\"]&.user&.admin? }), or in Rails mount it inside " \
          "`authenticate :user, ->(user) { user.admin? } do ... end` with Bobbin::Dashboard.default = Bobbin::Dashboard.new(auth: ->(_) { true })."
      end
  end
end

%w[helpers chart app server].each { |part| require_relative "dashboard/#{part}" }
