# frozen_string_literal: true

require "securerandom"
require "roda"

module Bobbin
  # The web dashboard, a Rack app on Roda: `run Bobbin::Dashboard.new(auth: ->(request) { ... })` in config.ru,
  # `bobbin dashboard --port 9292`, or in Rails `mount Bobbin::Dashboard, at: "/jobs"` (inside an `authenticate`
  # block, with `Bobbin::Dashboard.default = Bobbin::Dashboard.new(auth: ->(_) { true })`, or with an auth hook).
  #
  # `auth` receives the Rack::Request and returns false/nil (refused: 403), true, or a String naming the operator
  # (recorded on the jobs they act on). Without `auth` it serves only in development and test (every one of
  # BOBBIN_ENV, RAILS_ENV, RACK_ENV that is set says so), and only this machine when none is set: anywhere else it
  # answers every request with a page saying how to configure one. `read_only: true` shows everything and changes
  # nothing (no forms; every POST refused).
  class Dashboard
    LOCAL = %w[development test].freeze
    LOOPBACK = %w[127.0.0.1 ::1].freeze

    class << self
      # The instance `mount Bobbin::Dashboard` serves; set it to configure auth for a mounted dashboard.
      attr_writer :default

      def default = @default ||= new

      # Rack entry point, so the class itself mounts.
      def call(env) = default.call(env)
    end

    attr_reader :read_only

    # `secret`: 64+ bytes for the session cookie holding the CSRF key (default BOBBIN_DASHBOARD_SECRET or random
    # per process; behind several processes set one, or forms from one are refused by another).
    def initialize(auth: nil, read_only: false, environment: nil, secret: ENV["BOBBIN_DASHBOARD_SECRET"])
      @auth = auth
      @read_only = read_only
      # Not Rails.env: it says "development" when nothing is set.
      @environments = (environment ? [ environment ] : ENV.values_at("BOBBIN_ENV", "RAILS_ENV", "RACK_ENV")).compact.map(&:to_s).reject(&:empty?).uniq
      @app = App.configured(self, secret || SecureRandom.hex(64))
    end

    def call(env) = @app.call(env)

    # Why this request may not see the dashboard (a message), or nil when it may; the operator's name goes into
    # env["bobbin.operator"].
    def refusal(request)
      return auth_missing(request) unless @auth || open_to?(request)

      verdict = @auth ? @auth.call(request) : true
      return "Access denied." unless verdict

      request.env["bobbin.operator"] = verdict.is_a?(String) ? verdict : "dashboard"
      nil
    end

    private
      # Without an auth hook: in development and test (or with no environment set at all), to this machine alone: the
      # peer's own address (not Rack's request.ip, which believes X-Forwarded-For from any private address), and no
      # proxy in between (a proxy on this machine would make every visitor local). Development alone is not enough:
      # rackup sets RACK_ENV=development when nothing is set, and `rackup -o 0.0.0.0` served every visitor.
      def open_to?(request)
        return false unless local_environment?

        LOOPBACK.include?(request.get_header("REMOTE_ADDR")) && !request.has_header?("HTTP_X_FORWARDED_FOR") && !request.has_header?("HTTP_FORWARDED")
      end

      def local_environment? = @environments.all? { |name| LOCAL.include?(name) }

      def auth_missing(request)
        this = @environments.any? ? "this is #{@environments.join(' / ')}" : "no BOBBIN_ENV, RAILS_ENV or RACK_ENV is set"
        why = if local_environment?
          "Without an auth hook the Bobbin dashboard serves only requests from this machine, with no proxy in between (#{this}, and " \
            "the request does not come from this machine)."
        else
          "The Bobbin dashboard needs an auth hook outside development and test (#{this})."
        end
        "#{why} " \
          "Configure one: Bobbin::Dashboard.new(auth: ->(request) { request.env[\"warden\"]&.user&.admin? }), or in Rails mount it inside " \
          "`authenticate :user, ->(user) { user.admin? } do ... end` with Bobbin::Dashboard.default = Bobbin::Dashboard.new(auth: ->(_) { true })."
      end
  end
end

%w[helpers chart app server].each { |part| require_relative "dashboard/#{part}" }
