# frozen_string_literal: true

require "erb"

# Charts as SVG, written by hand: bars (one metric, one bar per system) and lines (a metric against concurrency).
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

  LINE_COLORS = %w[#2b6cb0 #63b3ed #c05621 #f6ad55 #2f855a #b83280 #f687b3 #805ad5 #718096].freeze

  # Writes an SVG line chart of `series` ({ label => { x => y or nil } }) to `path`: x on a log scale, one line
  # per label, a dashed line for a label starting with "ideal", a cross where y is nil (a failed cell).
  def lines(path, title, series)
    xs = series.values.flat_map(&:keys).uniq.sort
    top = [ series.values.flat_map(&:values).compact.max.to_f, 1e-9 ].max
    left, width, base, height = 70, 460, 330, 280
    x_at = ->(x) { left + (xs.size == 1 ? 0 : (Math.log(x) - Math.log(xs.first)) / (Math.log(xs.last) - Math.log(xs.first)) * width) }
    y_at = ->(y) { base - y / top * height }
    axes = xs.map { |x| %(<text x="#{x_at[x].round(1)}" y="#{base + 18}" text-anchor="middle">#{x}</text>) } +
           [ 0, 0.5, 1 ].map { |f| %(<text x="#{left - 6}" y="#{y_at[top * f].round(1) + 4}" text-anchor="end">#{format_value(top * f)}</text>) }
    lines = series.each_with_index.map do |(label, points), i|
      color = LINE_COLORS[i % LINE_COLORS.size]
      dash = label.start_with?("ideal") ? %( stroke-dasharray="5,4") : ""
      drawn = points.compact.map { |x, y| "#{x_at[x].round(1)},#{y_at[y].round(1)}" }.join(" ")
      crosses = points.select { |_, y| y.nil? }.map { |x, _| %(<text x="#{x_at[x].round(1)}" y="#{base - 4}" fill="#{color}" text-anchor="middle">×</text>) }
      %(<polyline points="#{drawn}" fill="none" stroke="#{color}" stroke-width="2"#{dash}/>) + crosses.join +
        %(<rect x="#{left + width + 20}" y="#{40 + i * 20}" width="12" height="12" fill="#{color}"/>) +
        %(<text x="#{left + width + 38}" y="#{51 + i * 20}">#{ERB::Util.h(label)}</text>)
    end
    File.write(path, <<~SVG)
      <svg xmlns="http://www.w3.org/2000/svg" width="760" height="#{base + 40}" font-family="sans-serif" font-size="12">
      <text x="10" y="22" font-size="15" font-weight="bold">#{ERB::Util.h(title)}</text>
      <line x1="#{left}" y1="#{base}" x2="#{left + width}" y2="#{base}" stroke="#444"/><line x1="#{left}" y1="#{base}" x2="#{left}" y2="#{base - height}" stroke="#444"/>
      #{axes.join("\n")}
      <text x="#{left + width / 2}" y="#{base + 34}" text-anchor="middle">concurrency (log scale); × = cell failed</text>
      #{lines.join("\n")}
      </svg>
    SVG
  end

  def format_value(value) = value >= 100 ? value.round.to_s.reverse.scan(/\d{1,3}/).join(",").reverse : value.round(2).to_s
end
