# frozen_string_literal: true

module Bobbin
  class Dashboard
    # Throughput per minute as an inline SVG bar chart (succeeded stacked under failed): no script, no image
    # request, colours from the stylesheet (CSP allows no inline styles).
    module Chart
      WIDTH = 720
      HEIGHT = 160
      module_function

      # `minutes`: [[Time, succeeded, failed], …] oldest first (Operator.throughput).
      def svg(minutes)
        peak = [ minutes.map { |_, succeeded, failed| succeeded + failed }.max.to_i, 1 ].max
        step = WIDTH.to_f / minutes.size
        bars = minutes.each_with_index.map do |(minute, succeeded, failed), i|
          x = (i * step).round(1)
          ok = (succeeded * (HEIGHT - 16) / peak.to_f).round(1)
          bad = (failed * (HEIGHT - 16) / peak.to_f).round(1)
          title = ERB::Util.html_escape("#{minute.strftime('%H:%M')} UTC: #{succeeded} succeeded, #{failed} failed")
          %(<g><title>#{title}</title><rect class="ok" x="#{x}" y="#{(HEIGHT - ok).round(1)}" width="#{(step - 1).round(1)}" height="#{ok}"/>) +
            %(<rect class="bad" x="#{x}" y="#{(HEIGHT - ok - bad).round(1)}" width="#{(step - 1).round(1)}" height="#{bad}"/></g>)
        end
        %(<svg class="chart" viewBox="0 0 #{WIDTH} #{HEIGHT}" preserveAspectRatio="none" role="img" aria-label="jobs finished per minute, last #{minutes.size} minutes">) +
          %(<line class="axis" x1="0" y1="#{HEIGHT - 0.5}" x2="#{WIDTH}" y2="#{HEIGHT - 0.5}"/>) +
          "#{bars.join}</svg>"
      end
    end
  end
end
