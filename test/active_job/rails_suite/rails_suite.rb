# frozen_string_literal: true

require "digest"
require "fileutils"
require "net/http"

# Rails' own Active Job integration suite (activejob/test/integration, which Rails runs against each adapter with
# AJ_ADAPTER) against :bobbin. The suite ships in no gem; Debian's source package of Rails has it, in the same archive
# bin/setup takes Ruby from, so `fetch` takes the tarball from there (checked against its SHA-256) and keeps only what
# the suite needs. `run` copies bobbin.rb in as the suite's adapter and runs it under each of GEMFILES.
module RailsSuite
  VERSION = "7.2.2.2"
  TARBALL = "http://deb.debian.org/debian/pool/main/r/rails/rails_#{VERSION}%2Bdfsg.orig.tar.xz"
  SHA256 = "0fc71b56afdc4721f45bc4c9134f43e71e7a66ea542b674b1f652743da0d760b"
  ROOT = File.expand_path("../../..", __dir__)
  SOURCE = File.join(ROOT, "vendor/rails-#{VERSION}")
  # The suite's helper requires this file of Active Support's own test tree, which the gem leaves out.
  STRICT_WARNINGS = "activesupport/lib/active_support/testing/strict_warnings.rb"
  # The suite runs on the Rails it was written for (the oldest Bobbin supports) and on the one Bobbin's bundle has.
  GEMFILES = %w[rails-7.2.gemfile rails-8.1.gemfile].map { |name| File.join(__dir__, name) }.freeze

  module_function

  # Unpacks the suite into SOURCE unless it is there; returns SOURCE. Raises when the download fails or does not match.
  def fetch
    return SOURCE if File.exist?(File.join(SOURCE, "activejob/test/integration/queuing_test.rb"))

    tarball = download
    FileUtils.mkdir_p(SOURCE)
    system("tar", "-xJf", tarball, "-C", SOURCE, "--strip-components=1", "rails-#{VERSION}/activejob", "rails-#{VERSION}/tools",
           "rails-#{VERSION}/#{STRICT_WARNINGS}", exception: true)
    SOURCE
  ensure
    FileUtils.rm_f(tarball) if tarball
  end

  # Installs the bundle of every gemfile (into Bobbin's vendor/bundle).
  def bundle
    GEMFILES.each { |gemfile| sh(env(gemfile), "bundle", "check", quiet: true) || sh(env(gemfile), "bundle", "install", "--quiet") }
  end

  # Runs the suite against :bobbin under each gemfile, from `source` (a rails/rails checkout or SOURCE); true when
  # every run passed.
  def run(source = fetch)
    activejob = File.join(source, "activejob")
    FileUtils.cp(File.join(__dir__, "bobbin.rb"), File.join(activejob, "test/support/integration/adapters/bobbin.rb"))
    shim = strict_warnings(source)
    GEMFILES.map do |gemfile|
      puts "== Rails' Active Job integration suite (#{File.basename(source)}) on #{File.basename(gemfile, '.gemfile')}"
      sh(env(gemfile).merge("AJ_ADAPTER" => "bobbin", "AJ_INTEGRATION_TESTS" => "1"), "bundle", "exec", "ruby", "-I#{shim}", "-Itest",
         "test/integration/queuing_test.rb", chdir: activejob)
    end.all?
  end

  # A load path holding the source's strict_warnings.rb alone (the source's whole activesupport/lib would shadow the gem's).
  def strict_warnings(source)
    shim = File.join(ROOT, "tmp/rails-suite-shim")
    target = File.join(shim, STRICT_WARNINGS.delete_prefix("activesupport/lib/"))
    FileUtils.mkdir_p(File.dirname(target))
    FileUtils.cp(File.join(source, STRICT_WARNINGS), target)
    shim
  end

  # The suite's dummy app keeps its own SQLite database: a DATABASE_URL the user set for Bobbin's PostgreSQL suite
  # would override its database.yml (and its bundle has no pg).
  def env(gemfile) = { "BUNDLE_GEMFILE" => gemfile, "BUNDLE_PATH" => File.join(ROOT, "vendor/bundle"), "DATABASE_URL" => nil }

  def sh(env, *command, chdir: ROOT, quiet: false)
    Bundler.with_unbundled_env { system(env, *command, chdir: chdir, **(quiet ? { out: File::NULL, err: File::NULL } : {})) }
  end

  def fetch_once(pause:)
    sleep(pause)
    Net::HTTP.get_response(URI(TARBALL))
  rescue SystemCallError, Net::OpenTimeout, Net::ReadTimeout, SocketError => error
    warn("downloading Rails' source: #{error.class}: #{error.message}")
    nil
  end

  def download
    path = File.join(ROOT, "tmp", File.basename(TARBALL))
    FileUtils.mkdir_p(File.dirname(path))
    response = 3.times.lazy.map { |attempt| fetch_once(pause: attempt * 2) }.find { |got| got.is_a?(Net::HTTPSuccess) }
    raise "could not download Rails' source from #{TARBALL} (3 tries)" unless response
    raise "Rails' source from #{TARBALL} does not match its SHA-256" unless Digest::SHA256.hexdigest(response.body) == SHA256

    File.binwrite(path, response.body)
    path
  end
end
