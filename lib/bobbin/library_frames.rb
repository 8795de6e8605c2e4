# frozen_string_literal: true

module Bobbin
  # Which lines of a backtrace are a library's (an installed gem's, Ruby's own, Bobbin's) rather than the app's: the
  # stored backtrace keeps the app's frames, the stall detector and error logs point at the first of them.
  module LibraryFrames
    # Where Bobbin's own files are (installed as a gem, they are under a gem path too).
    LIB = File.expand_path("..", __dir__)
    PATTERN = Regexp.union([ *Gem.path, RbConfig::CONFIG["rubylibdir"], LIB, "<internal:" ].uniq.map { |dir| /\A#{Regexp.escape(dir)}/ })

    def self.library?(line) = PATTERN.match?(line)

    # The first line of the app's code in `backtrace`; with `bobbin: true`, of Bobbin's or the app's (not a driver's).
    def self.first_own(backtrace, bobbin: false)
      backtrace&.find { |line| (bobbin && line.start_with?(LIB)) || !library?(line) }
    end
  end
end
