# frozen_string_literal: true

require_relative "lib/bobbin/version"

Gem::Specification.new do |spec|
  spec.name = "bobbin"
  spec.version = Bobbin::VERSION
  spec.authors = [ "Bobbin contributors" ]
  spec.summary = "SQL-backed background jobs that run as fibers or threads"
  spec.description = "Every job persisted in PostgreSQL or SQLite; workers run hundreds of I/O-bound jobs " \
                     "per thread as fibers, or in thread pools, with DB connections sized to DB work."
  spec.license = "MIT"
  spec.required_ruby_version = ">= 3.3"
  spec.files = Dir["lib/**/*.rb", "lib/bobbin/dashboard/views/*", "lib/bobbin/dashboard/assets/*", "lib/generators/**/*", "exe/*", "README.md"]
  spec.bindir = "exe"
  spec.executables = [ "bobbin" ]
  spec.require_paths = [ "lib" ]

  spec.add_dependency "activerecord", ">= 7.2"
  spec.add_dependency "async", ">= 2.27" # Task#stop(cause:)
  spec.add_dependency "fugit", "~> 1.11"
  spec.add_dependency "roda", "~> 3.100"   # the dashboard: routing, CSRF, escaping, rendering (Jeremy Evans; Sequel's author)
  spec.add_dependency "tilt", "~> 2.4"     # templates for Roda's render plugin
  spec.add_dependency "erubi", "~> 1.13"   # auto-escaping ERB for those templates (Rails' own ERB engine)
  spec.add_dependency "prometheus-client", ">= 4.2" # /metrics: the Prometheus project's own Ruby client formats the exposition
end
