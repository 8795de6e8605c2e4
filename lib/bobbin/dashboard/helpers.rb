# frozen_string_literal: true

require "erb"
require "uri"

module Bobbin
  class Dashboard
    # View helpers. Those returning markup escape every value they put in it (h, also every `<%= %>`'s escaper).
    module Helpers
      NAV = [ [ "Overview", "/" ], [ "Queues", "/queues" ], [ "Ready", "/jobs?state=ready" ], [ "Scheduled", "/jobs?state=scheduled" ],
              [ "Blocked", "/jobs?state=blocked" ], [ "Running", "/jobs?state=running" ], [ "Failed", "/jobs?state=failed" ], [ "Finished", "/jobs?state=succeeded" ],
              [ "All jobs", "/jobs" ], [ "Processes", "/processes" ], [ "Recurring", "/recurring" ] ].freeze

      # HTML-escaped, and valid UTF-8 whatever bytes the row held: one such row failed the whole page; bidi controls
      # shown as `\u202E`, not obeyed.
      def h(value) = ERB::Util.html_escape(Printable.displayable(value))

      # `relative` under the mount point.
      def path(relative) = "#{request.script_name}#{relative}"

      def query(params) = URI.encode_www_form(params.compact)

      def read_only? = opts[:dashboard].read_only

      def notice = flash["notice"]

      def nav_current?(href)
        here = request.path_info.empty? ? "/" : request.path_info
        target_path, target_query = href.split("?", 2)
        return here == target_path && shown_state.to_s.empty? if target_query.nil? || target_path != "/jobs"

        here == "/jobs" && "state=#{shown_state}" == target_query
      end

      # The query's state, nil when the query does not parse: the 400 page saying so is drawn in this layout too.
      def shown_state
        request.params["state"]
      rescue *App::BAD_REQUEST
        nil
      end

      # A one-button POST form with its path-specific CSRF token; `confirm` asks first (app.js).
      def post_button(action, label, style: "", confirm: nil, fields: {})
        return "" if read_only?

        inputs = fields.map { |name, value| %(<input type="hidden" name="#{h(name)}" value="#{h(value)}">) }.join
        %(<form method="post" action="#{h(action)}" class="inline"#{%( data-confirm="#{h(confirm)}") if confirm}>#{csrf_tag(action)}#{inputs}) +
          %(<button type="submit" class="button #{h(style)}">#{h(label)}</button></form>)
      end

      def time(value)
        return "—" unless value

        %(<time datetime="#{h(value.utc.iso8601)}" title="#{h(value.utc.strftime('%Y-%m-%d %H:%M:%S.%L UTC'))}">#{h(ago(value))}</time>)
      end

      def ago(value)
        seconds = Time.now.utc - value
        future = seconds.negative?
        text = duration(seconds.abs)
        future ? "in #{text}" : "#{text} ago"
      end

      def duration(seconds)
        return "#{(seconds * 1000).round} ms" if seconds < 1
        return "#{seconds.round(1)} s" if seconds < 60
        return "#{(seconds / 60).round} min" if seconds < 3600
        return "#{(seconds / 3600).round(1)} h" if seconds < 86_400

        "#{(seconds / 86_400).round(1)} d"
      end

      def number(value) = value.to_i.to_s.reverse.scan(/\d{1,3}/).join(",").reverse

      # A queue's count of `field`, "10,000+" when it stopped at the dashboard's cap.
      def queue_count(queue, field) = "#{number(queue.public_send(field))}#{'+' if queue.capped?(field)}"

      # The queues, each count read up to a cap: a backlog of millions costs a refresh what ten thousand do.
      def capped_queues = Bobbin::Operator.queues(cap: Bobbin::Operator::Stats::EXACT_UP_TO)

      def badge(state) = %(<span class="badge #{h(state)}">#{h(state)}</span>)

      def jobs_path(filter) = path("/jobs?#{query(filter)}")

      # Arguments as indented JSON (the stored text when it does not parse).
      def pretty_arguments(job)
        arguments = Printable.utf8(job.arguments)
        JSON.pretty_generate(JSON.parse(arguments))
      rescue JSON::ParserError
        arguments
      end
    end
  end
end
