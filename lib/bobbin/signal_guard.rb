# frozen_string_literal: true

module Bobbin
  # The signal handlers a Bobbin process installs, kept in: checked each second (from the heartbeat's thread, the
  # supervisor's loop) and put back, with a warning, when other code replaced them. A job that trapped TERM (or a gem
  # it loaded) took the worker's stop: in a trial TERM printed the job's line, the worker went on claiming, and the
  # supervisor killed it once shutdown_timeout had passed, its running jobs never given their graceful end. A signal
  # that comes before the check still goes to the other handler. Installed from a thread other than the main one (a
  # worker an app starts with `Worker#start` on a thread of its own), the handlers are not kept in: the app's server
  # traps its own signals after them, and putting Bobbin's back would take the app's stop away.
  class SignalGuard
    # Signals left ignored when the process started ignoring them: HUP under `nohup`, which Bobbin's trap took away, so
    # that closing the terminal stopped a `nohup bobbin start` all the same (a review). A forked worker inherits it.
    STAYS_IGNORED = %w[HUP].freeze

    # Installs `handlers` ({ "TERM" => a Proc, ... }); `owner` names the process in the warning.
    def initialize(owner, handlers)
      @owner = owner
      @kept = Thread.current == Thread.main
      @previous = handlers.to_h { |signal, handler| [ signal, Signal.trap(signal, handler) ] }
      ignored = STAYS_IGNORED.select { |signal| @previous[signal] == "IGNORE" }.each { |signal| Signal.trap(signal, "IGNORE") }
      @handlers = handlers.except(*ignored)
    end

    # Puts back any of the handlers that was replaced, saying which.
    def check
      return unless @kept

      replaced = @handlers.filter_map { |signal, handler| signal unless Signal.trap(signal, handler).equal?(handler) }
      return if replaced.empty?

      Bobbin.logger.warn("#{@owner}: its #{replaced.join(', ')} #{replaced.size == 1 ? 'handler was' : 'handlers were'} replaced by other code " \
                         "(a job, or a gem a job loaded: Signal.trap); put back, so that a stop still stops it")
    end

    # Puts back the handlers there were before (the process's own, at a lone worker's end).
    def restore = @previous.each { |signal, handler| Signal.trap(signal, handler || "DEFAULT") }
  end
end
