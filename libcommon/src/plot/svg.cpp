// SVG rendering of cairn charts (lines, points, stacked areas, bars) with axes, grid and legend.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "cairn/plot.h"

namespace cairn::plot {
namespace {

constexpr double kFont = 11.0;      // tick and legend font size (px)
constexpr double kCharWidth = 6.4;  // approximate glyph width at kFont, for layout
constexpr double kLegendRow = 18.0;
constexpr double kInf = std::numeric_limits<double>::infinity();

void num(std::string& out, double v) {
  // One decimal is plenty at screen resolution and keeps big charts small.
  if (!std::isfinite(v)) v = 0;
  v = std::clamp(v, -1e6, 1e6);
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed, 1);
  out.append(buf, r.ptr);
}

std::string n2s(double v) {
  std::string s;
  num(s, v);
  return s;
}

std::string axis_title(const Axis& a) {
  std::string t = a.label;
  if (!a.unit.empty()) t += " [" + a.unit + "]";
  if (a.scale == Scale::Log) t += ", log";
  return t;
}

// The data-to-pixel map of one axis and its ticks.
struct Domain {
  Scale scale = Scale::Linear;
  double lo = 0, hi = 1;
  Ticks ticks;
  std::vector<std::string> labels;
  double p0 = 0, p1 = 1;  // pixel ends (p0 maps lo)

  bool valid(double v) const { return std::isfinite(v) && (scale == Scale::Linear || v > 0); }
  double operator()(double v) const {
    double t;
    if (scale == Scale::Log) t = (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo));
    else t = (v - lo) / (hi - lo);
    return p0 + t * (p1 - p0);
  }
};

// Range of the values an axis has to show.
struct Extent {
  double lo = kInf, hi = -kInf;
  void add(double v, Scale s) {
    if (!std::isfinite(v) || (s == Scale::Log && v <= 0)) return;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  bool empty() const { return lo > hi; }
};

Domain make_domain(const Axis& axis, Extent e, int target_ticks) {
  Domain d;
  d.scale = axis.scale;
  if (axis.scale == Scale::Log) {
    if (axis.min && *axis.min > 0) e.lo = *axis.min;
    if (axis.max && *axis.max > 0) e.hi = *axis.max;
    if (e.empty()) e = {1, 10};
    if (e.lo == e.hi) {
      e.lo /= 2;
      e.hi *= 2;
    }
    double pad = std::pow(e.hi / e.lo, 0.03);
    d.lo = axis.min ? e.lo : e.lo / pad;
    d.hi = axis.max ? e.hi : e.hi * pad;
    d.ticks = log_ticks(d.lo, d.hi, axis.unit == "B" ? 2 : 10, target_ticks + 3);
  } else {
    if (axis.include_zero && !e.empty()) {
      e.lo = std::min(e.lo, 0.0);
      e.hi = std::max(e.hi, 0.0);
    }
    if (axis.min) e.lo = *axis.min;
    if (axis.max) e.hi = *axis.max;
    if (e.empty()) e = {0, 1};
    if (e.lo == e.hi) {
      double delta = e.lo == 0 ? 1 : std::fabs(e.lo) * 0.1;
      e.lo -= delta;
      e.hi += delta;
    }
    Ticks t = linear_ticks(e.lo, e.hi, target_ticks);
    d.lo = axis.min ? e.lo : std::floor(e.lo / t.step + 1e-9) * t.step;
    d.hi = axis.max ? e.hi : std::ceil(e.hi / t.step - 1e-9) * t.step;
    d.ticks = linear_ticks(d.lo, d.hi, target_ticks);
    d.ticks.step = t.step;
    std::vector<double> kept;
    for (double v : d.ticks.values)
      if (v >= d.lo - t.step * 1e-6 && v <= d.hi + t.step * 1e-6) kept.push_back(v);
    d.ticks.values = kept;
  }
  d.labels = tick_labels(d.ticks, axis.unit, axis.scale);
  return d;
}

double text_width(const std::string& s, double font = kFont) {
  // Count UTF-8 code points, not bytes.
  size_t n = 0;
  for (unsigned char c : s)
    if ((c & 0xC0) != 0x80) ++n;
  return static_cast<double>(n) * kCharWidth * font / kFont;
}

std::string truncate_label(const std::string& s, double max_px) {
  if (text_width(s) <= max_px) return s;
  size_t keep = static_cast<size_t>(std::max(1.0, max_px / kCharWidth - 1));
  // Cut on a code point boundary.
  size_t bytes = 0, cps = 0;
  while (bytes < s.size() && cps < keep) {
    ++bytes;
    while (bytes < s.size() && (static_cast<unsigned char>(s[bytes]) & 0xC0) == 0x80) ++bytes;
    ++cps;
  }
  return s.substr(0, bytes) + "\xE2\x80\xA6";
}

enum class SwatchKind { Line, Box, Triangle };
struct LegendItem {
  std::string label, color;
  SwatchKind kind = SwatchKind::Line;
  bool dashed = false;
};

// Lays legend items out in rows under the plot; returns the rows' total height.
double legend_height(const std::vector<LegendItem>& items, double width) {
  if (items.empty()) return 0;
  double x = 0;
  int rows = 1;
  for (const auto& it : items) {
    double w = 26 + text_width(truncate_label(it.label, 260)) + 14;
    if (x > 0 && x + w > width) {
      ++rows;
      x = 0;
    }
    x += w;
  }
  return rows * kLegendRow + 6;
}

void draw_legend(std::string& o, const std::vector<LegendItem>& items, double x0, double y0, double width) {
  if (items.empty()) return;
  o += "<g class=\"legend\" font-size=\"11\">";
  double x = 0, y = y0 + kLegendRow / 2 + 4;
  for (const auto& it : items) {
    std::string label = truncate_label(it.label, 260);
    double w = 26 + text_width(label) + 14;
    if (x > 0 && x + w > width) {
      x = 0;
      y += kLegendRow;
    }
    double sx = x0 + x;
    std::string c = xml_escape(it.color);
    switch (it.kind) {
      case SwatchKind::Line:
        o += "<line x1=\"" + n2s(sx) + "\" y1=\"" + n2s(y) + "\" x2=\"" + n2s(sx + 20) + "\" y2=\"" + n2s(y) +
             "\" stroke=\"" + c + "\" stroke-width=\"2.5\"" + (it.dashed ? " stroke-dasharray=\"5 3\"" : "") + "/>";
        break;
      case SwatchKind::Box:
        o += "<rect x=\"" + n2s(sx + 3) + "\" y=\"" + n2s(y - 6) + "\" width=\"14\" height=\"12\" fill=\"" + c + "\"/>";
        break;
      case SwatchKind::Triangle:
        o += "<path d=\"M" + n2s(sx + 5) + " " + n2s(y + 5) + "L" + n2s(sx + 15) + " " + n2s(y + 5) + "L" +
             n2s(sx + 10) + " " + n2s(y - 5) + "Z\" fill=\"" + c + "\"/>";
        break;
    }
    o += "<text x=\"" + n2s(sx + 26) + "\" y=\"" + n2s(y + 4) + "\">" + xml_escape(label) + "</text>";
    x += w;
  }
  o += "</g>";
}

void svg_open(std::string& o, const std::string& id, const std::string& title, double w, double h) {
  o += "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\"";
  if (!id.empty()) o += " id=\"" + xml_escape(id) + "\"";
  o += " viewBox=\"0 0 " + n2s(w) + " " + n2s(h) + "\" width=\"" + n2s(w) + "\" height=\"" + n2s(h) +
       "\" role=\"img\" aria-label=\"" + xml_escape(title) +
       "\" font-family=\"sans-serif\" data-points=\"@@POINTS@@\">";
  o += "<title>" + xml_escape(title) + "</title>";
  o += "<rect x=\"0\" y=\"0\" width=\"" + n2s(w) + "\" height=\"" + n2s(h) + "\" fill=\"#ffffff\"/>";
}

void draw_titles(std::string& o, const std::string& title, const std::string& subtitle, double x) {
  o += "<text x=\"" + n2s(x) + "\" y=\"18\" font-size=\"14\" font-weight=\"bold\" fill=\"#222\">" + xml_escape(title) +
       "</text>";
  if (!subtitle.empty())
    o += "<text x=\"" + n2s(x) + "\" y=\"33\" font-size=\"11\" fill=\"#666\">" + xml_escape(subtitle) + "</text>";
}

void finish_points(std::string& o, size_t points) {
  auto pos = o.find("@@POINTS@@");
  if (pos != std::string::npos) o.replace(pos, 10, std::to_string(points));
}

// Horizontal grid lines and labels of a y domain; vertical ones of an x domain.
void draw_y_grid(std::string& o, const Domain& y, double px0, double px1) {
  o += "<g class=\"y-axis\" font-size=\"11\" fill=\"#444\" text-anchor=\"end\">";
  for (size_t i = 0; i < y.ticks.values.size(); ++i) {
    double py = y(y.ticks.values[i]);
    o += "<line x1=\"" + n2s(px0) + "\" y1=\"" + n2s(py) + "\" x2=\"" + n2s(px1) + "\" y2=\"" + n2s(py) +
         "\" stroke=\"#e4e4e4\"/>";
    o += "<text x=\"" + n2s(px0 - 6) + "\" y=\"" + n2s(py + 4) + "\">" + xml_escape(y.labels[i]) + "</text>";
  }
  o += "</g>";
}

void draw_x_grid(std::string& o, const Domain& x, double py0, double py1) {
  // Thin out labels that would overlap.
  double maxw = 0;
  for (const auto& l : x.labels) maxw = std::max(maxw, text_width(l));
  size_t n = x.ticks.values.size();
  size_t stride = 1;
  if (n > 1) {
    double spacing = std::fabs(x(x.ticks.values[1]) - x(x.ticks.values[0]));
    while (spacing * static_cast<double>(stride) < maxw + 8 && stride < n) ++stride;
  }
  o += "<g class=\"x-axis\" font-size=\"11\" fill=\"#444\" text-anchor=\"middle\">";
  for (size_t i = 0; i < n; ++i) {
    double px = x(x.ticks.values[i]);
    o += "<line x1=\"" + n2s(px) + "\" y1=\"" + n2s(py0) + "\" x2=\"" + n2s(px) + "\" y2=\"" + n2s(py1) +
         "\" stroke=\"#eeeeee\"/>";
    if (i % stride == 0)
      o += "<text x=\"" + n2s(px) + "\" y=\"" + n2s(py1 + 15) + "\">" + xml_escape(x.labels[i]) + "</text>";
  }
  o += "</g>";
}

double max_label_width(const std::vector<std::string>& labels) {
  double w = 0;
  for (const auto& l : labels) w = std::max(w, text_width(l));
  return w;
}

// Bucket means of a stack's layers (a stack shows totals, so means are the honest reduction).
Stack reduce_stack(const Stack& s, size_t buckets) {
  size_t n = s.x.size();
  if (n <= buckets * 2 || buckets == 0) return s;
  Stack r;
  r.names = s.names;
  r.colors = s.colors;
  r.layers.assign(s.layers.size(), {});
  double x0 = s.x.front(), x1 = s.x.back();
  bool by_x = x1 > x0;
  size_t i = 0;
  while (i < n) {
    size_t b = by_x ? std::min(buckets - 1, static_cast<size_t>((s.x[i] - x0) / (x1 - x0) * buckets)) : i * buckets / n;
    double sx = 0;
    std::vector<double> sums(s.layers.size(), 0.0);
    size_t cnt = 0;
    for (; i < n; ++i) {
      size_t bi =
          by_x ? std::min(buckets - 1, static_cast<size_t>((s.x[i] - x0) / (x1 - x0) * buckets)) : i * buckets / n;
      if (bi != b) break;
      sx += s.x[i];
      for (size_t l = 0; l < s.layers.size(); ++l) {
        double v = i < s.layers[l].size() ? s.layers[l][i] : 0;
        sums[l] += std::isfinite(v) ? v : 0;
      }
      ++cnt;
    }
    r.x.push_back(sx / cnt);
    for (size_t l = 0; l < s.layers.size(); ++l) r.layers[l].push_back(sums[l] / cnt);
  }
  return r;
}

// The plot area's pixel edges: x from px0 (left) to px1, y from py0 (top) to py1 (bottom).
struct PlotArea {
  double px0, px1, py0, py1;
};

// ---- The parts of render_svg(const Chart&).

// Extents of everything a chart draws: series (with error bars), stack totals, reference lines, markers.
void chart_extents(const Chart& c, Extent& ex, Extent& ey) {
  for (const auto& s : c.series) {
    size_t n = std::min(s.x.size(), s.y.size());
    for (size_t i = 0; i < n; ++i) {
      if (!std::isfinite(s.y[i]) || !std::isfinite(s.x[i])) continue;
      if ((c.x.scale == Scale::Log && s.x[i] <= 0) || (c.y.scale == Scale::Log && s.y[i] <= 0)) continue;
      ex.add(s.x[i], c.x.scale);
      ey.add(s.y[i], c.y.scale);
      if (i < s.y_err.size() && std::isfinite(s.y_err[i])) {
        ey.add(s.y[i] + s.y_err[i], c.y.scale);
        ey.add(s.y[i] - s.y_err[i], c.y.scale);
      }
    }
  }
  if (c.stack) {
    for (size_t j = 0; j < c.stack->x.size(); ++j) {
      double total = 0;
      for (const auto& layer : c.stack->layers)
        if (j < layer.size() && std::isfinite(layer[j])) total += layer[j];
      ex.add(c.stack->x[j], c.x.scale);
      ey.add(total, c.y.scale);
      ey.add(0, c.y.scale);
    }
  }
  for (const auto& r : c.refs) (r.vertical ? ex : ey).add(r.value, r.vertical ? c.x.scale : c.y.scale);
  for (const auto& m : c.markers)
    for (double v : m.x) ex.add(v, c.x.scale);
}

// Legend entries: named series, then the stack's layers, then named marker sets.
std::vector<LegendItem> chart_legend(const Chart& c) {
  std::vector<LegendItem> legend;
  for (size_t i = 0; i < c.series.size(); ++i) {
    const auto& s = c.series[i];
    if (s.in_legend && !s.name.empty())
      legend.push_back({s.name, s.color.empty() ? palette_color(i) : s.color, SwatchKind::Line, s.dashed});
  }
  if (c.stack)
    for (size_t l = 0; l < c.stack->names.size(); ++l)
      legend.push_back({c.stack->names[l], l < c.stack->colors.size() ? c.stack->colors[l] : palette_color(l),
                        SwatchKind::Box, false});
  for (const auto& m : c.markers)
    if (!m.name.empty() && !m.x.empty()) legend.push_back({m.name, m.color, SwatchKind::Triangle, false});
  return legend;
}

// Stacked areas, one path per layer from the previous layer's top to its own; returns the points drawn.
size_t draw_stack(std::string& o, const Stack& stack, const Domain& dx, const Domain& dy, const PlotArea& a) {
  Stack st = reduce_stack(stack, static_cast<size_t>(a.px1 - a.px0));
  size_t n = st.x.size();
  size_t points = 0;
  std::vector<double> below(n, 0.0), above(n, 0.0);
  o += "<g class=\"stack\">";
  for (size_t l = 0; l < st.layers.size(); ++l) {
    for (size_t j = 0; j < n; ++j) {
      double v = j < st.layers[l].size() && std::isfinite(st.layers[l][j]) ? st.layers[l][j] : 0;
      above[j] = below[j] + v;
    }
    std::string color = l < st.colors.size() ? st.colors[l] : palette_color(l);
    std::string name = l < st.names.size() ? st.names[l] : "";
    o += "<path class=\"series\" data-points=\"" + std::to_string(n) + "\" fill=\"" + xml_escape(color) +
         "\" fill-opacity=\"0.85\" stroke=\"none\" d=\"";
    auto yv = [&](double v) { return dy.valid(v) ? dy(v) : a.py1; };
    for (size_t j = 0; j < n; ++j) {
      o += j == 0 ? "M" : "L";
      num(o, dx(st.x[j]));
      o += ' ';
      num(o, yv(above[j]));
    }
    for (size_t j = n; j-- > 0;) {
      o += "L";
      num(o, dx(st.x[j]));
      o += ' ';
      num(o, yv(below[j]));
    }
    o += "Z\"><title>" + xml_escape(name) + "</title></path>";
    points += n;
    below = above;
  }
  o += "</g>";
  return points;
}

// One series (downsampled to max_pts / 4 min-max buckets): its line, broken at invalid points, and/or its dots
// with error bars. Returns the points drawn: the line's when it has one, else the dots'.
size_t draw_series(std::string& o, const Series& s, const std::string& color, const Domain& dx, const Domain& dy,
                   const PlotArea& a, size_t max_pts) {
  size_t n = std::min(s.x.size(), s.y.size());
  std::vector<size_t> idx = downsample_minmax(s.x, s.y, max_pts / 4);
  if (idx.size() > n) idx.resize(n);
  std::string body;
  size_t drawn = 0;
  bool lines = s.style != Style::Points;
  bool dots = s.style != Style::Line;
  if (lines) {
    std::string d;
    d.reserve(idx.size() * 14);
    bool pen_down = false;
    for (size_t i : idx) {
      if (!dx.valid(s.x[i]) || !dy.valid(s.y[i])) {
        pen_down = false;
        continue;
      }
      d += pen_down ? 'L' : 'M';
      num(d, dx(s.x[i]));
      d += ' ';
      num(d, dy(s.y[i]));
      pen_down = true;
      ++drawn;
    }
    body +=
        "<path fill=\"none\" stroke=\"" + color + "\" stroke-width=\"" + n2s(s.width) + "\" stroke-linejoin=\"round\"";
    if (s.dashed) body += " stroke-dasharray=\"6 4\"";
    if (s.opacity < 1) body += " stroke-opacity=\"" + n2s(s.opacity) + "\"";
    body += " d=\"" + d + "\"/>";
  }
  if (dots) {
    size_t dots_drawn = 0;
    for (size_t i : idx) {
      if (!dx.valid(s.x[i]) || !dy.valid(s.y[i])) continue;
      double px = dx(s.x[i]), py = dy(s.y[i]);
      if (i < s.y_err.size() && std::isfinite(s.y_err[i]) && s.y_err[i] > 0) {
        double lo = s.y[i] - s.y_err[i], hi = s.y[i] + s.y_err[i];
        double plo = dy.valid(lo) ? dy(lo) : a.py1, phi = dy.valid(hi) ? dy(hi) : a.py0;
        body += "<line x1=\"" + n2s(px) + "\" y1=\"" + n2s(plo) + "\" x2=\"" + n2s(px) + "\" y2=\"" + n2s(phi) +
                "\" stroke=\"" + color + "\" stroke-width=\"1\"/>";
      }
      body += "<circle cx=\"" + n2s(px) + "\" cy=\"" + n2s(py) + "\" r=\"2.6\" fill=\"" + color + "\"";
      if (s.opacity < 1) body += " fill-opacity=\"" + n2s(s.opacity) + "\"";
      body += "/>";
      ++dots_drawn;
    }
    if (!lines) drawn = dots_drawn;
  }
  o += "<g class=\"series\" data-points=\"" + std::to_string(drawn) + "\"><title>" + xml_escape(s.name) + "</title>" +
       body + "</g>";
  return drawn;
}

// Labelled reference lines: vertical ones at an x value, horizontal ones at a y value.
void draw_refs(std::string& o, const std::vector<RefLine>& refs, const Domain& dx, const Domain& dy,
               const PlotArea& a) {
  size_t hrefs = 0;
  for (const auto& r : refs) {
    const Domain& d = r.vertical ? dx : dy;
    if (!d.valid(r.value)) continue;
    double p = d(r.value);
    std::string col = xml_escape(r.color);
    std::string dash = r.dashed ? " stroke-dasharray=\"3 3\"" : "";
    if (r.vertical) {
      o += "<line x1=\"" + n2s(p) + "\" y1=\"" + n2s(a.py0) + "\" x2=\"" + n2s(p) + "\" y2=\"" + n2s(a.py1) +
           "\" stroke=\"" + col + "\" stroke-width=\"1.2\"" + dash + "/>";
      o += "<text x=\"" + n2s(p + 3) + "\" y=\"" + n2s(a.py0 + 11) + "\" font-size=\"10\" fill=\"" + col + "\">" +
           xml_escape(r.label) + "</text>";
    } else {
      o += "<line x1=\"" + n2s(a.px0) + "\" y1=\"" + n2s(p) + "\" x2=\"" + n2s(a.px1) + "\" y2=\"" + n2s(p) +
           "\" stroke=\"" + col + "\" stroke-width=\"1.2\"" + dash + "/>";
      // Alternate labels right/left so two nearby lines stay legible; below the line at the top edge.
      bool right = hrefs++ % 2 == 0;
      double ty = p - 12 < a.py0 ? p + 12 : p - 4;
      o += "<text x=\"" + n2s(right ? a.px1 - 3 : a.px0 + 3) + "\" y=\"" + n2s(ty) +
           "\" font-size=\"10\" text-anchor=\"" + (right ? "end" : "start") + "\" fill=\"" + col + "\">" +
           xml_escape(r.label) + "</text>";
    }
  }
}

// Triangles on the x axis at each marker's x; returns the triangles drawn.
size_t draw_markers(std::string& o, const Markers& m, const Domain& dx, double py1) {
  std::string d;
  double last_px = -1e9;
  size_t drawn = 0;
  for (double v : m.x) {
    if (!dx.valid(v)) continue;
    double px = dx(v);
    if (px - last_px < 1.5) continue;  // one triangle per pixel column is enough
    last_px = px;
    d += "M";
    num(d, px - 4);
    d += ' ';
    num(d, py1);
    d += "L";
    num(d, px + 4);
    d += ' ';
    num(d, py1);
    d += "L";
    num(d, px);
    d += ' ';
    num(d, py1 - 8);
    d += "Z";
    ++drawn;
  }
  o += "<g class=\"series markers\" data-points=\"" + std::to_string(drawn) + "\"><title>" +
       xml_escape(m.name.empty() ? std::string("markers") : m.name) + " (" + std::to_string(m.x.size()) +
       ")</title><path fill=\"" + xml_escape(m.color) + "\" fill-opacity=\"0.8\" d=\"" + d + "\"/></g>";
  return drawn;
}

void draw_frame(std::string& o, const PlotArea& a) {
  o += "<rect x=\"" + n2s(a.px0) + "\" y=\"" + n2s(a.py0) + "\" width=\"" + n2s(a.px1 - a.px0) + "\" height=\"" +
       n2s(a.py1 - a.py0) + "\" fill=\"none\" stroke=\"#999\"/>";
}

// Axis titles: centred under the plot, and rotated left of it.
void draw_x_title(std::string& o, const PlotArea& a, const std::string& title) {
  o += "<text x=\"" + n2s((a.px0 + a.px1) / 2) + "\" y=\"" + n2s(a.py1 + 33) +
       "\" font-size=\"12\" text-anchor=\"middle\" fill=\"#333\">" + xml_escape(title) + "</text>";
}
// x_text: the title's x as written; line charts have always written "13.0" and bar charts "13" (kept, so that
// the output does not change).
void draw_y_title(std::string& o, const PlotArea& a, const std::string& title, const std::string& x_text) {
  o += "<text transform=\"translate(" + x_text + " " + n2s((a.py0 + a.py1) / 2) +
       ") rotate(-90)\" font-size=\"12\" text-anchor=\"middle\" fill=\"#333\">" + xml_escape(title) + "</text>";
}

void draw_no_data(std::string& o, const PlotArea& a) {
  o += "<text x=\"" + n2s((a.px0 + a.px1) / 2) + "\" y=\"" + n2s((a.py0 + a.py1) / 2) +
       "\" font-size=\"13\" text-anchor=\"middle\" fill=\"#999\">no data</text>";
}

// ---- The parts of render_svg(const BarChart&).

// Value extent: every bar, or every stack's total when stacked (from zero on a linear axis).
Extent bar_extent(const BarChart& c) {
  Extent ev;
  Scale vs = c.value_axis.scale;
  if (vs == Scale::Linear) ev.add(0, vs);
  for (size_t k = 0; k < c.categories.size(); ++k) {
    double total = 0;
    for (const auto& g : c.groups) {
      double v = k < g.values.size() ? g.values[k] : NAN;
      if (!std::isfinite(v)) continue;
      if (c.stacked) total += v;
      else ev.add(v, vs);
    }
    if (c.stacked) ev.add(total, vs);
  }
  return ev;
}

// Bars of every group: side by side in each category's band, or stacked; returns the bars drawn.
size_t draw_bars(std::string& o, const BarChart& c, const Domain& dv, const PlotArea& a, double band) {
  const size_t ncat = c.categories.size(), ngroups = c.groups.size();
  const Scale vs = c.value_axis.scale;
  size_t points = 0;
  double bar_total = band * 0.8;
  double base_v = vs == Scale::Log ? dv.lo : 0.0;
  o += "<g class=\"bars\">";
  for (size_t g = 0; g < ngroups; ++g) {
    const auto& grp = c.groups[g];
    std::string color = xml_escape(grp.color.empty() ? palette_color(g) : grp.color);
    size_t drawn = 0;
    std::string body;
    for (size_t k = 0; k < ncat; ++k) {
      double v = k < grp.values.size() ? grp.values[k] : NAN;
      if (!std::isfinite(v) || (vs == Scale::Log && v <= 0)) continue;
      double start_v = base_v;
      if (c.stacked) {
        double acc = 0;
        for (size_t h = 0; h < g; ++h) {
          double u = k < c.groups[h].values.size() ? c.groups[h].values[k] : 0;
          if (std::isfinite(u)) acc += u;
        }
        start_v = vs == Scale::Log ? std::max(acc, dv.lo) : acc;
        v = acc + v;
      }
      double lo_px = dv(start_v), hi_px = dv(v);
      double off = (band - bar_total) / 2;
      double thick = c.stacked ? bar_total : bar_total / static_cast<double>(std::max<size_t>(1, ngroups));
      double pos = (c.horizontal ? a.py0 : a.px0) + band * static_cast<double>(k) + off +
                   (c.stacked ? 0 : thick * static_cast<double>(g));
      std::string tip = xml_escape(c.categories[k] + (grp.name.empty() ? "" : " / " + grp.name) + ": " +
                                   format_value(k < grp.values.size() ? grp.values[k] : NAN, c.value_axis.unit, 4));
      double lo = std::min(lo_px, hi_px), len = std::max(std::fabs(hi_px - lo_px), 0.5);
      if (c.horizontal)
        body += "<rect x=\"" + n2s(lo) + "\" y=\"" + n2s(pos) + "\" width=\"" + n2s(len) + "\" height=\"" +
                n2s(std::max(thick, 0.5)) + "\"><title>" + tip + "</title></rect>";
      else
        body += "<rect x=\"" + n2s(pos) + "\" y=\"" + n2s(lo) + "\" width=\"" + n2s(std::max(thick, 0.5)) +
                "\" height=\"" + n2s(len) + "\"><title>" + tip + "</title></rect>";
      ++drawn;
    }
    o += "<g class=\"series\" fill=\"" + color + "\" data-points=\"" + std::to_string(drawn) + "\">" + body + "</g>";
    points += drawn;
  }
  o += "</g>";
  return points;
}

// Category labels, thinned when crowded: left of horizontal bars, under vertical ones.
void draw_category_labels(std::string& o, const BarChart& c, const PlotArea& a, double band, double cat_label_w) {
  const size_t ncat = c.categories.size();
  double label_room = c.horizontal ? 13 : 0;
  size_t stride = 1;
  if (!c.horizontal) {
    double maxw = cat_label_w;
    while (band * static_cast<double>(stride) < std::min(maxw, 120.0) + 6 && stride < ncat) ++stride;
  } else {
    while (band * static_cast<double>(stride) < label_room && stride < ncat) ++stride;
  }
  o += "<g class=\"categories\" font-size=\"11\" fill=\"#444\"" +
       std::string(c.horizontal ? " text-anchor=\"end\"" : " text-anchor=\"middle\"") + ">";
  for (size_t k = 0; k < ncat; k += stride) {
    double mid = (c.horizontal ? a.py0 : a.px0) + band * (static_cast<double>(k) + 0.5);
    if (c.horizontal)
      o += "<text x=\"" + n2s(a.px0 - 6) + "\" y=\"" + n2s(mid + 4) + "\">" +
           xml_escape(truncate_label(c.categories[k], 200)) + "</text>";
    else
      o += "<text x=\"" + n2s(mid) + "\" y=\"" + n2s(a.py1 + 15) + "\">" +
           xml_escape(truncate_label(c.categories[k], std::max(40.0, band * static_cast<double>(stride) - 4))) +
           "</text>";
  }
  o += "</g>";
}

}  // namespace

std::string render_svg(const Chart& c) {
  const double W = c.width, H = c.height;
  bool has_sub = !c.subtitle.empty();
  double mt = has_sub ? 44 : 32, mb = 42, mr = 20;

  Extent ex, ey;
  chart_extents(c, ex, ey);
  Domain dy = make_domain(c.y, ey, 6);
  double ml = std::max(46.0, max_label_width(dy.labels) + 30);
  Domain dx = make_domain(c.x, ex, 7);
  const PlotArea a{ml, W - mr, mt, H - mb};
  dx.p0 = a.px0;
  dx.p1 = a.px1;
  dy.p0 = a.py1;
  dy.p1 = a.py0;

  std::vector<LegendItem> legend = chart_legend(c);
  double lh = legend_height(legend, W - a.px0 - 4);
  double total_h = H + lh;

  std::string o;
  size_t total_points_est = 0;
  for (const auto& s : c.series) total_points_est += std::min(s.x.size(), static_cast<size_t>(8000));
  o.reserve(4096 + total_points_est * 16);
  svg_open(o, c.id, c.title, W, total_h);
  draw_titles(o, c.title, c.subtitle, a.px0);
  draw_y_grid(o, dy, a.px0, a.px1);
  draw_x_grid(o, dx, a.py0, a.py1);

  std::string clip = (c.id.empty() ? std::string("chart") : c.id) + "-clip";
  // A few pixels of slack so markers on the frame are drawn whole.
  o += "<defs><clipPath id=\"" + xml_escape(clip) + "\"><rect x=\"" + n2s(a.px0 - 4) + "\" y=\"" + n2s(a.py0 - 4) +
       "\" width=\"" + n2s(a.px1 - a.px0 + 8) + "\" height=\"" + n2s(a.py1 - a.py0 + 8) + "\"/></clipPath></defs>";
  o += "<g clip-path=\"url(#" + xml_escape(clip) + ")\">";

  size_t points = 0;
  size_t max_pts = c.max_points_per_series ? c.max_points_per_series : static_cast<size_t>((a.px1 - a.px0) * 4);
  if (c.stack && !c.stack->x.empty()) points += draw_stack(o, *c.stack, dx, dy, a);
  for (size_t si = 0; si < c.series.size(); ++si) {
    const auto& s = c.series[si];
    points += draw_series(o, s, xml_escape(s.color.empty() ? palette_color(si) : s.color), dx, dy, a, max_pts);
  }
  draw_refs(o, c.refs, dx, dy, a);
  for (const auto& m : c.markers)
    if (!m.x.empty()) points += draw_markers(o, m, dx, a.py1);
  o += "</g>";

  draw_frame(o, a);
  draw_x_title(o, a, axis_title(c.x));
  draw_y_title(o, a, axis_title(c.y), n2s(13));
  if (points == 0) draw_no_data(o, a);
  draw_legend(o, legend, a.px0, H - 4, W - a.px0 - 4);
  o += "</svg>";
  finish_points(o, points);
  return o;
}

std::string render_svg(const BarChart& c) {
  const double W = c.width;
  size_t ncat = c.categories.size();
  size_t ngroups = c.groups.size();
  bool has_sub = !c.subtitle.empty();
  double mt = has_sub ? 44 : 32, mr = 20;

  const Extent ev = bar_extent(c);
  std::vector<LegendItem> legend;
  if (ngroups > 1 || c.stacked)
    for (size_t g = 0; g < ngroups; ++g)
      legend.push_back(
          {c.groups[g].name, c.groups[g].color.empty() ? palette_color(g) : c.groups[g].color, SwatchKind::Box, false});

  double H = c.height;
  if (c.horizontal) {
    // Grow with the number of categories so every label stays readable.
    double band_needed = std::max(14.0, (c.stacked ? 1.0 : static_cast<double>(ngroups)) * 9.0 + 6);
    H = std::max<double>(c.height, mt + 44 + band_needed * static_cast<double>(ncat));
  }
  double cat_label_w = 0;
  for (const auto& s : c.categories) cat_label_w = std::max(cat_label_w, text_width(truncate_label(s, 200)));

  // Horizontal bars: categories down the left (room for their labels), values along x. Vertical: values up
  // the left (room for the tick labels), categories along x.
  Domain dv = make_domain(c.value_axis, ev, 6);
  PlotArea a{};
  a.py0 = mt;
  a.py1 = H - 42;
  a.px0 = c.horizontal ? std::max(60.0, cat_label_w + 14) : std::max(46.0, max_label_width(dv.labels) + 30);
  a.px1 = W - mr;
  dv.p0 = c.horizontal ? a.px0 : a.py1;
  dv.p1 = c.horizontal ? a.px1 : a.py0;
  double lh = legend_height(legend, W - a.px0 - 4);
  std::string o;
  o.reserve(4096 + ncat * ngroups * 120);
  svg_open(o, c.id, c.title, W, H + lh);
  draw_titles(o, c.title, c.subtitle, a.px0);
  if (c.horizontal) draw_x_grid(o, dv, a.py0, a.py1);
  else draw_y_grid(o, dv, a.px0, a.px1);

  double span = c.horizontal ? (a.py1 - a.py0) : (a.px1 - a.px0);
  double band = ncat ? span / static_cast<double>(ncat) : span;
  size_t points = draw_bars(o, c, dv, a, band);
  draw_category_labels(o, c, a, band, cat_label_w);
  draw_frame(o, a);
  std::string vt = axis_title(c.value_axis);
  if (c.horizontal) {
    draw_x_title(o, a, vt);
  } else {
    draw_x_title(o, a, c.category_label);
    draw_y_title(o, a, vt, "13");
  }
  if (points == 0) draw_no_data(o, a);
  draw_legend(o, legend, a.px0, H - 4, W - a.px0 - 4);
  o += "</svg>";
  finish_points(o, points);
  return o;
}

}  // namespace cairn::plot
