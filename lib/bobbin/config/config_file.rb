# frozen_string_literal: true

require "erb"
require "yaml"

module Bobbin
  # Reads config/bobbin.yml: ERB, then YAML, then the section for the environment; fails fast naming file and key.
  #
  #   production:
  #     shutdown_timeout: 25
  #     workers:
  #       - { queues: [chat], fibers: 100, processes: 2 }
  #       - { queues: [cpu], threads: 2 }
  #
  # A section without `workers:` is settings only: the pools stay as configured otherwise (Bobbin.configure's, else
  # the default, one fiber pool of 100 on every queue).
  module ConfigFile
    KEYS = ([ "workers" ] + Configuration::SETTINGS.map(&:to_s)).freeze

    @loaded = []

    module_function

    # True once `path` was loaded in this process (the Rails app loads config/bobbin.yml at boot; `bobbin start`
    # then does not load it again over config.bobbin's settings).
    def loaded?(path) = @loaded.include?(File.expand_path(path))

    # The environment whose section applies: BOBBIN_ENV, RAILS_ENV, RACK_ENV, else development; an empty variable is
    # not set (`BOBBIN_ENV=` ran the default pool on every queue, its section skipped, under RACK_ENV=production).
    def environment = ENV.values_at("BOBBIN_ENV", "RAILS_ENV", "RACK_ENV").find { |name| name && !name.empty? } || "development"

    # Loads `path` into Bobbin.config (settings, and pools when the section lists them); returns the pools.
    # `optional`: a file without a section for `env` changes nothing (a Rails app boots in every environment; only
    # some run workers).
    def load(path, env: environment, optional: false)
      document = parse(path)
      return if optional && document.is_a?(Hash) && !document.key?("workers") && !document.key?(env)

      @loaded << File.expand_path(path)
      section = section(document, path, env)
      where = "#{path}: #{env}"
      unknown = section.keys - KEYS
      raise ConfigurationError, "#{where}: unknown key #{unknown.first.inspect} (known: #{KEYS.join(', ')})" if unknown.any?

      apply_settings(section, where)
      section.key?("workers") ? Bobbin.config.use_workers(section["workers"], where: "#{where}.workers") : Bobbin.config.pools
    end

    # Raises unless `path` is a file: `bobbin start -c` checks before it boots, so a mistyped path is named first.
    def exists!(path)
      raise ConfigurationError, "config file #{path} not found" unless File.file?(path)
    end

    def parse(path)
      exists!(path)
      text = ERB.new(File.read(path)).result
      once_each_key!(text, path)
      YAML.safe_load(text, aliases: true, filename: path) || {}
    rescue Psych::SyntaxError => error
      raise ConfigurationError, "#{path}: invalid YAML: #{error.problem} at line #{error.line} column #{error.column}"
    rescue ConfigurationError
      raise
    rescue StandardError, ScriptError => error # ScriptError: a SyntaxError in its ERB, or a LoadError from a require there
      raise ConfigurationError, "#{path}: could not be read (#{error.class}: #{error.message})"
    end

    # Raises when a mapping of the file names a key twice: YAML keeps the last and drops the first without a word (a
    # recurring task of the same name as another, pasted below it, replaced it: a trial).
    def once_each_key!(text, path)
      document = Psych.parse(text, filename: path) or return # a file of comments only (the generator's recurring.yml)

      document.each do |node|
        next unless node.is_a?(Psych::Nodes::Mapping)

        node.children.each_slice(2).map(&:first).grep(Psych::Nodes::Scalar).reject { |key| key.value == "<<" }
            .group_by(&:value).each_value do |keys|
          next if keys.one?

          raise ConfigurationError, "#{path}: #{keys.first.value.inspect} is given twice in one mapping (lines " \
                                    "#{keys.map { |key| key.start_line + 1 }.join(' and ')}); YAML would keep only the last"
        end
      end
    end

    def section(document, path, env)
      raise ConfigurationError, "#{path}: expected a mapping at the top, got #{document.class}" unless document.is_a?(Hash)
      return document if document.key?("workers")

      document.fetch(env) do
        raise ConfigurationError, "#{path}: no #{env.inspect} section (found: #{document.keys.join(', ')})"
      end.then { |section| section.is_a?(Hash) ? section : raise(ConfigurationError, "#{path}: #{env} must be a mapping") }
    end

    # All settings at once, so heartbeat_interval and process_alive_threshold are checked as a pair.
    def apply_settings(section, where)
      Bobbin.config.set(where: where, **section.except("workers").transform_keys(&:to_sym))
    end
  end
end
