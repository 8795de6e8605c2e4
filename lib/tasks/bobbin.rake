# frozen_string_literal: true

# Bobbin's tasks in a Rails app (the Railtie loads this file): `bin/rails bobbin:start`, … Each runs the same
# command as `bin/bobbin`, inside the app's environment.
namespace :bobbin do
  run = ->(*argv) { exit(Bobbin::CLI.start(argv.map(&:to_s))) }
  # The task's queue argument; without one, how to give one in rake's syntax (not the CLI's), and exit 64 as `bobbin pause`.
  queue = lambda do |task, args|
    next args[:queue] if args[:queue]

    warn("bobbin: #{task.name} needs a queue: bin/rails '#{task.name}[QUEUE]'")
    exit(64)
  end

  desc "Install Bobbin: config/bobbin.yml, the schema, bin/bobbin, the Active Job adapter (bin/rails generate bobbin:install)"
  task :install do
    Rails::Command.invoke(:generate, [ "bobbin:install" ])
  end

  desc "Run the configured worker pools under a supervisor (config/bobbin.yml); TERM/INT stop gracefully"
  task start: :environment do
    run.call("start")
  end

  desc "Check config/bobbin.yml against the database before deploy (exit 1 when a check fails, 78 when it cannot check)"
  task doctor: :environment do
    run.call("doctor")
  end

  desc "Create or upgrade Bobbin's tables (in the queue database when config.bobbin.connects_to says so)"
  task migrate: :environment do
    run.call("migrate")
  end

  desc "Print job counts by state"
  task counts: :environment do
    run.call("counts")
  end

  desc "List recurring tasks with their last and next runs"
  task recurring: :environment do
    run.call("recurring")
  end

  desc "Stop workers from claiming jobs of QUEUE: bin/rails 'bobbin:pause[QUEUE]'"
  task :pause, [ :queue ] => :environment do |task, args|
    run.call("pause", queue.call(task, args))
  end

  desc "Let workers claim jobs of QUEUE again: bin/rails 'bobbin:resume[QUEUE]'"
  task :resume, [ :queue ] => :environment do |task, args|
    run.call("resume", queue.call(task, args))
  end
end
