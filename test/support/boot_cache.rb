# frozen_string_literal: true

# Loaded first (`ruby -r`) by the Ruby processes the tests start (`bobbin`, the dummy Rails app's commands):
# Bootsnap, as in every Rails app, caches the compiled Ruby of the gems and of lib/ in tmp/, so each of the suite's
# hundreds of process boots skips recompiling Active Record (≈ 0.5 s of a ≈ 1.3 s boot here). Only stable files pass
# through it: the tests write their Ruby files to fresh temporary paths.
require "bundler/setup"
require "bootsnap"

Bootsnap.setup(cache_dir: File.expand_path("../../tmp/cache", __dir__), development_mode: false,
               load_path_cache: true, compile_cache_iseq: true, compile_cache_yaml: false)
