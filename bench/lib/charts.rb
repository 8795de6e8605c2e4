# frozen_string_literal: true

require "erb"

# Horizontal bar charts as SVG, written by hand: one chart, one metric, one bar per system.
module Charts
  COLORS = { "bobbin" => "#2b6cb0", "solid_queue" => "#c05621", "good_job" => "#2f855a", "sidekiq" => "#b83280" }.freeze

  module_function

  # Writes an SVG of `values` ({ label => number }) to `path`.
  def bars(path, title, unit, values)
    max = [ values.values.compact.max.to_f, 1e-9 ].max
    rows = values.each_with_index.map do |(label, value), i|
      y = 40 + i * 28
      width = value ? (value / max * 420).round(1) : 0
      color = COLORS.find { |prefix, _| label.start_with?(prefix) }&.last || "#718096"
      %(<text x="170" y="#{y + 15}" text-anchor="end">#{ERB::Util.h(label)}</text>) +
        %(<rect x="180" y="#{y}" width="#{width}" height="20" fill="#{color}"/>) +
        %(<text x="#{186 + width}" y="#{y + 15}">#{value ? format_value(value) : 'failed'} #{unit}</text>)
    end
    height = 50 + values.size * 28
    File.write(path, <<~SVG)
      <svg xmlns="http://www.w3.org/2000/svg" width="720" height="#{height}" font-family="sans-serif" font-size="13">
      <text x="10" y="22" font-size="15" font-weight="bold">#{ERB::Util.h(title)}</text>
      #{rows.join("\n")}
      </svg>
    SVG
  end

  def format_value(value) = value >= 100 ? value.round.to_s.reverse.scan(/\d{1,3}/).join(",").reverse : value.round(2).to_s
end
