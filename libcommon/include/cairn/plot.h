// Small self-contained SVG plotting: line/point/area/bar charts with units, nice ticks, log scales,
// legends, stacked areas and bars, and min/max-preserving downsampling (spikes stay visible).
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cairn::plot {

enum class Scale { Linear, Log };

// One axis. Tick labels carry SI prefixes chosen per axis (k, M, G / m, µ, n); unit "B" uses binary
// prefixes (KiB, MiB, ...) and, on a log axis, ticks at powers of two.
struct Axis {
  std::string label;  // "step", "message size"
  std::string unit;   // "B", "GB/s", "s", "tok/s", "%", "" (shown as "label [unit]")
  Scale scale = Scale::Linear;
  std::optional<double> min, max;  // fixed range; otherwise from the data
  bool include_zero = false;       // linear axes: extend the range to 0
};

enum class Style { Line, Points, LinePoints };

// One data series. Non-finite y values break a line; on a log axis values <= 0 are skipped.
struct Series {
  std::string name;
  std::vector<double> x, y;
  std::string color;  // "" = palette colour of the series' index
  Style style = Style::Line;
  bool dashed = false;
  double width = 1.6;
  double opacity = 1.0;
  bool in_legend = true;      // false for e.g. the raw curve behind a smoothed one
  std::vector<double> y_err;  // optional symmetric error bars (Points/LinePoints)
};

// A horizontal (y = value) or vertical (x = value) reference line with a label, e.g. a peak.
struct RefLine {
  bool vertical = false;
  double value = 0;
  std::string label;
  std::string color = "#555555";
  bool dashed = true;
};

// Small triangles pinned to the bottom edge at given x (e.g. skipped steps); one legend entry.
struct Markers {
  std::string name;
  std::vector<double> x;
  std::string color = "#d62728";
};

// Layers stacked on top of each other over a common x (e.g. step-time breakdown).
struct Stack {
  std::vector<double> x;
  std::vector<std::string> names;
  std::vector<std::vector<double>> layers;  // layers[i][j] is layer i at x[j]
  std::vector<std::string> colors;          // optional, per layer
};

struct Chart {
  std::string id;  // HTML id (letters, digits, '-')
  std::string title;
  std::string subtitle;           // one line under the title, e.g. "smoothed, raw faint"
  int width = 620, height = 340;  // of the plot including axes; the legend adds rows below
  Axis x, y;
  std::vector<Series> series;
  std::vector<RefLine> refs;
  std::vector<Markers> markers;
  std::optional<Stack> stack;        // drawn below the series
  size_t max_points_per_series = 0;  // 0 = about 4 per horizontal pixel
};

// Categorical bars: one bar per category per group, side by side or stacked.
struct BarGroup {
  std::string name;
  std::vector<double> values;  // one per category
  std::string color;           // "" = palette
};
struct BarChart {
  std::string id;
  std::string title;
  std::string subtitle;
  int width = 620, height = 340;
  std::vector<std::string> categories;
  std::string category_label;
  std::vector<BarGroup> groups;
  bool stacked = false;
  bool horizontal = false;  // categories on the y axis (long names, many runs)
  Axis value_axis;
};

// Renders a chart as one <svg> element (no XML declaration), XHTML-embeddable, with
// data-points="N" on the root telling how many data points (after downsampling) it draws.
std::string render_svg(const Chart& chart);
std::string render_svg(const BarChart& chart);

// --- building blocks (exposed for tests and for the report's tables) ---

// "Nice" tick positions (1, 2, 5 x 10^k steps) covering [lo, hi] with about `target` ticks.
struct Ticks {
  std::vector<double> values;
  double step = 0;  // linear step; 0 for log ticks
};
Ticks linear_ticks(double lo, double hi, int target = 6);
// Log ticks: powers of `base` (10, or 2 for bytes) in [lo, hi], thinned to at most `max_ticks`.
Ticks log_ticks(double lo, double hi, double base = 10, int max_ticks = 10);
// Tick labels for one axis, sharing one SI prefix and just enough decimals to tell them apart.
std::vector<std::string> tick_labels(const Ticks& ticks, const std::string& unit, Scale scale);
// A value with an SI prefix and `digits` significant digits: 1234567 "tok/s" -> "1.23 Mtok/s",
// 0.0021 "s" -> "2.1 ms", 65536 "B" -> "64 KiB", 0.52 "%" -> "0.52%".
std::string format_value(double v, const std::string& unit, int digits = 3);

// Indices of the points to draw so that at most ~4 per bucket remain (first, min, max, last of
// each of `buckets` equal x ranges): the drawn curve keeps every spike. x must be non-decreasing;
// otherwise buckets are by index. Returns all indices when there are few points.
std::vector<size_t> downsample_minmax(const std::vector<double>& x, const std::vector<double>& y, size_t buckets);

// The i-th colour of a palette of distinguishable colours (cycles).
const std::string& palette_color(size_t i);
// Escapes &, <, >, " and ' for XML text and attributes; drops control characters and replaces
// invalid UTF-8 with U+FFFD, so any text (even quoted from a binary file) stays well-formed.
std::string xml_escape(std::string_view text);
// `text` with invalid UTF-8 bytes replaced by U+FFFD (for Markdown and logs).
std::string valid_utf8(std::string_view text);

}  // namespace cairn::plot
