# frozen_string_literal: true

require "securerandom"
require "roda"

module Bobbin
  # The web dashboard, a Rack app on Roda: `run Bobbin::Dashboard.new(auth: ->(request) { ... })` in config.ru,
  # `bobbin dashboard --port 9292`, or in Rails `mount Bobbin::Dashboard, at: "/jobs"` (inside an `authenticate`
  # block, with `Bobbin::Dashboard.default = Bobbin::Dashboard.new(auth: ->(_) { true })`, or with an auth hook).
  #
  # `auth` receives the Rack::Request and returns false/nil (refused: 403), true, or a String naming the operator
  # (recorded on the jobs they act on). Without `auth` it serves only in development and test: anywhere else it
  # answers every request with a page saying how to configure one. `read_only: true` shows everything and changes
  # nothing (no forms; every POST refused).
  class Dashboard
    LOCAL = %w[development test].freeze

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
      @environment = (environment || ENV["RAILS_ENV"] || ENV["RACK_ENV"] || (defined?(::Rails.env) && ::Rails.env) || "development").to_s
      @app = App.configured(self, secret || SecureRandom.hex(64))
    end

    def call(env) = @app.call(env)

    # Why this request may not see the dashboard (a message), or nil when it may; the operator's name goes into
    # env["bobbin.operator"].
    def refusal(request)
      return auth_missing unless @auth || LOCAL.include?(@environment)

      verdict = @auth ? @auth.call(request) : true
      return "Access denied." unless verdict

      request.env["bobbin.operator"] = verdict.is_a?(String) ? verdict : "dashboard"
      nil
    end

    private
      def auth_missing
        "The Bobbin dashboard needs an auth hook outside development and test (this is #{@environment}). " \
          "Configure one: Bobbin::Dashboard.new(auth: ->(request) { request.env[\"warden\"]&.user&.admin? }), or in Rails mount it inside " \
          "`authenticate :user, ->(user) { user.admin? } do ... end` with Bobbin::Dashboard.default = Bobbin::Dashboard.new(auth: ->(_) { true })."
      end
  end
end

%w[helpers chart app server].each { |part| require_relative "dashboard/#{part}" }
