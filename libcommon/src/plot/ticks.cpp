// Axis arithmetic for cairn's SVG charts: nice ticks, SI-prefixed labels, min/max downsampling.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <deque>
#include <limits>
#include <mutex>

#include "cairn/plot.h"

namespace cairn::plot {
namespace {

// Units whose values must not get a k/M/G prefix (already prefixed, or a percentage).
bool unit_takes_large_prefix(const std::string& unit) {
  return !(unit == "%" || unit == "GB/s" || unit == "GiB" || unit == "TFLOP/s" || unit == "x");
}
// Only seconds read naturally with m/µ/n.
bool unit_takes_small_prefix(const std::string& unit) { return unit == "s"; }

std::string join_unit(const std::string& number, const std::string& prefix, const std::string& unit) {
  if (unit.empty()) return number + prefix;
  if (unit == "%") return number + prefix + "%";
  return number + " " + prefix + unit;
}

// `v` with `decimals` digits after the point, trailing zeros kept (ticks line up).
std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", std::max(0, decimals), v);
  std::string s = buf;
  if (s == "-0" || s.rfind("-0.", 0) == 0) {
    bool all_zero = s.find_first_not_of("-0.") == std::string::npos;
    if (all_zero) s.erase(0, 1);
  }
  return s;
}

// `v` with `digits` significant digits, trailing zeros dropped.
std::string significant(double v, int digits) {
  char buf[64];
  double a = std::fabs(v);
  if (a != 0 && (a < 1e-3 || a >= 1e15)) {
    std::snprintf(buf, sizeof buf, "%.*e", std::max(0, digits - 1), v);
    std::string s = buf;
    // 3.10e-04 -> 3.1e-4
    auto e = s.find('e');
    std::string mant = s.substr(0, e), ex = s.substr(e + 1);
    if (mant.find('.') != std::string::npos) {
      while (!mant.empty() && mant.back() == '0') mant.pop_back();
      if (!mant.empty() && mant.back() == '.') mant.pop_back();
    }
    int exv = std::atoi(ex.c_str());
    return mant + "e" + std::to_string(exv);
  }
  int decimals = a == 0 ? 0 : digits - 1 - static_cast<int>(std::floor(std::log10(a)));
  std::snprintf(buf, sizeof buf, "%.*f", std::max(0, decimals), v);
  std::string s = buf;
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  if (s == "-0") s = "0";
  return s;
}

struct Prefix {
  double scale;
  const char* name;
};
constexpr std::array<Prefix, 5> kLarge{{{1e15, "P"}, {1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}}};
constexpr std::array<Prefix, 3> kSmall{{{1e-3, "m"}, {1e-6, "\xC2\xB5"}, {1e-9, "n"}}};
constexpr std::array<Prefix, 5> kBinary{
    {{1125899906842624.0, "Pi"}, {1099511627776.0, "Ti"}, {1073741824.0, "Gi"}, {1048576.0, "Mi"}, {1024.0, "Ki"}}};

// The prefix for magnitude `a` under `unit` (scale 1, "" when none applies).
Prefix choose_prefix(double a, const std::string& unit) {
  if (unit == "B") {
    for (const auto& p : kBinary)
      if (a >= p.scale) return p;
    return {1, ""};
  }
  if (a >= 1e3 && unit_takes_large_prefix(unit)) {
    for (const auto& p : kLarge)
      if (a >= p.scale) return p;
  }
  if (a > 0 && a < 1 && unit_takes_small_prefix(unit)) {
    for (const auto& p : kSmall)
      if (a >= p.scale * 0.9999) return p;
    return kSmall.back();
  }
  return {1, ""};
}

}  // namespace

// Length of the valid UTF-8 sequence starting at s[i], or 0 if it is not valid.
static size_t utf8_sequence(std::string_view s, size_t i) {
  auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = b(i);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > s.size() || (n == 2 && c < 0xC2)) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((b(i + k) >> 6) != 0x2) return 0;
  if (n == 3) {
    unsigned cp = ((c & 0x0Fu) << 12) | ((b(i + 1) & 0x3Fu) << 6) | (b(i + 2) & 0x3Fu);
    if (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF) || cp == 0xFFFE || cp == 0xFFFF) return 0;
  }
  if (n == 4) {
    unsigned cp = ((c & 0x07u) << 18) | ((b(i + 1) & 0x3Fu) << 12) | ((b(i + 2) & 0x3Fu) << 6) | (b(i + 3) & 0x3Fu);
    if (cp < 0x10000 || cp > 0x10FFFF) return 0;
  }
  return n;
}

std::string valid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    size_t n = static_cast<unsigned char>(text[i]) < 0x80 ? 1 : utf8_sequence(text, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
    } else {
      out.append(text.substr(i, n));
      i += n - 1;
    }
  }
  return out;
}

std::string xml_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 8);
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (static_cast<unsigned char>(c) >= 0x80) {
      // Invalid UTF-8 (e.g. a binary file quoted in an error) would make the document ill-formed.
      size_t n = utf8_sequence(text, i);
      if (n == 0) {
        out += "\xEF\xBF\xBD";
      } else {
        out.append(text.substr(i, n));
        i += n - 1;
      }
      continue;
    }
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default:
        // Control characters are not allowed in XML 1.0; drop them.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t' && c != '\r') continue;
        out += c;
    }
  }
  return out;
}

const std::string& palette_color(size_t i) {
  // Tableau 10, reordered so neighbours contrast; readable on white and for most colour vision.
  static const std::array<std::string, 10> kPalette{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                                    "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"};
  if (i < kPalette.size()) return kPalette[i];
  // Past ten series (a nightly comparing a month of runs) the colours must not repeat, or runs 1 and 11 read as one:
  // hues a golden angle apart, at a saturation and lightness that stay readable on white. A deque keeps the
  // references handed out valid as it grows.
  static std::mutex mu;
  static std::deque<std::string> more;
  std::lock_guard<std::mutex> lock(mu);
  while (more.size() <= i - kPalette.size()) {
    const double h = std::fmod(double(kPalette.size() + more.size()) * 137.508, 360.0) / 60.0, s = 0.65, l = 0.42;
    const double c = (1 - std::fabs(2 * l - 1)) * s, x = c * (1 - std::fabs(std::fmod(h, 2.0) - 1)), m = l - c / 2;
    double r = 0, g = 0, b = 0;
    if (h < 1) r = c, g = x;
    else if (h < 2) r = x, g = c;
    else if (h < 3) g = c, b = x;
    else if (h < 4) g = x, b = c;
    else if (h < 5) r = x, b = c;
    else r = c, b = x;
    char hex[8];
    std::snprintf(hex, sizeof hex, "#%02x%02x%02x", int(std::lround((r + m) * 255)), int(std::lround((g + m) * 255)),
                  int(std::lround((b + m) * 255)));
    more.emplace_back(hex);
  }
  return more[i - kPalette.size()];
}

std::string format_value(double v, const std::string& unit, int digits) {
  if (std::isnan(v)) return "n/a";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  Prefix p = choose_prefix(std::fabs(v), unit);
  return join_unit(significant(v / p.scale, digits), p.name, unit == "B" && p.scale == 1 ? "B" : unit);
}

Ticks linear_ticks(double lo, double hi, int target) {
  Ticks t;
  if (!std::isfinite(lo) || !std::isfinite(hi)) return t;
  if (hi < lo) std::swap(lo, hi);
  if (hi == lo) {
    double d = lo == 0 ? 1 : std::fabs(lo) * 0.1;
    lo -= d;
    hi += d;
  }
  target = std::max(2, target);
  double raw = (hi - lo) / target;
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    step = m * mag;
    if (step >= raw * 0.999) break;
  }
  t.step = step;
  double first = std::ceil(lo / step - 1e-9) * step;
  for (int i = 0; i < 1000; ++i) {
    double v = first + i * step;
    if (v > hi + step * 1e-9) break;
    if (std::fabs(v) < step * 1e-9) v = 0;
    t.values.push_back(v);
  }
  return t;
}

Ticks log_ticks(double lo, double hi, double base, int max_ticks) {
  Ticks t;
  if (!(lo > 0) || !(hi > 0) || !std::isfinite(lo) || !std::isfinite(hi)) return t;
  if (hi < lo) std::swap(lo, hi);
  max_ticks = std::max(2, max_ticks);
  auto in_range = [&](double v) { return v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9); };
  int k0 = static_cast<int>(std::floor(std::log(lo) / std::log(base) + 1e-9));
  int k1 = static_cast<int>(std::ceil(std::log(hi) / std::log(base) - 1e-9));
  std::vector<double> powers;
  for (int k = k0; k <= k1; ++k) {
    double v = std::pow(base, k);
    if (in_range(v)) powers.push_back(v);
  }
  if (base == 10 && powers.size() < 3) {
    // Narrow range (e.g. a loss between 2.5 and 11): use 1..9 x 10^k, or 1, 2, 5 x 10^k.
    for (const std::vector<double>& mults :
         {std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, 9}, std::vector<double>{1, 2, 5}}) {
      std::vector<double> vals;
      for (int k = k0; k <= k1; ++k)
        for (double m : mults) {
          double v = m * std::pow(10.0, k);
          if (in_range(v)) vals.push_back(v);
        }
      if (vals.size() >= 4 && static_cast<int>(vals.size()) <= max_ticks) {
        t.values = vals;
        return t;
      }
    }
    // Less than a decade with few integer multiples (2.4 .. 4.5): linear steps read best.
    if (hi / lo < 10) {
      Ticks lin = linear_ticks(lo, hi, 5);
      for (double v : lin.values)
        if (v > 0) t.values.push_back(v);
      if (t.values.size() >= 3) {
        t.step = 0;  // labelled as values, not as a linear axis
        return t;
      }
      t.values.clear();
    }
  }
  if (powers.size() < 2) {
    // Less than one step of the base: plain linear ticks read best.
    Ticks lin = linear_ticks(lo, hi, 4);
    for (double v : lin.values)
      if (v > 0) t.values.push_back(v);
    t.step = lin.step;
    return t;
  }
  size_t stride = (powers.size() + max_ticks - 1) / max_ticks;
  // Keep ticks at exponents that are multiples of the stride so labels are regular (1K, 1M, 1G).
  for (size_t i = 0; i < powers.size(); ++i) {
    int k = static_cast<int>(std::lround(std::log(powers[i]) / std::log(base)));
    if (stride <= 1 || ((k % static_cast<int>(stride)) + static_cast<int>(stride)) % static_cast<int>(stride) == 0)
      t.values.push_back(powers[i]);
  }
  if (t.values.size() < 2) t.values = {powers.front(), powers.back()};
  return t;
}

std::vector<std::string> tick_labels(const Ticks& ticks, const std::string& unit, Scale scale) {
  std::vector<std::string> out;
  if (scale == Scale::Log || ticks.step == 0) {
    for (double v : ticks.values) out.push_back(format_value(v, unit, 3));
    // Shortened unit in tick labels: the axis title carries it.
    for (auto& s : out)
      if (!unit.empty() && unit != "%" && unit != "B" && s.size() > unit.size() + 1 &&
          s.compare(s.size() - unit.size(), unit.size(), unit) == 0) {
        s.erase(s.size() - unit.size());
        while (!s.empty() && s.back() == ' ') s.pop_back();
      }
    return out;
  }
  double amax = 0;
  for (double v : ticks.values) amax = std::max(amax, std::fabs(v));
  // Up to four digits read fine without a prefix (0, 500, ..., 2000).
  Prefix p = unit != "B" && amax < 1e4 && amax >= 1 ? Prefix{1, ""} : choose_prefix(amax, unit);
  bool scientific = p.scale == 1 && amax > 0 && amax < 1e-2 && !unit_takes_small_prefix(unit);
  if (scientific) {
    // Small unitless values such as learning rates: 1.5e-4.
    int e = static_cast<int>(std::floor(std::log10(amax)));
    double scaled_step = ticks.step / std::pow(10.0, e);
    int decimals = std::max(0, -static_cast<int>(std::floor(std::log10(scaled_step) + 1e-9)));
    for (double v : ticks.values) {
      if (v == 0) {
        out.emplace_back("0");
        continue;
      }
      out.push_back(fixed(v / std::pow(10.0, e), decimals) + "e" + std::to_string(e));
    }
    return out;
  }
  double scaled_step = ticks.step / p.scale;
  int decimals = std::max(0, -static_cast<int>(std::floor(std::log10(scaled_step) + 1e-9)));
  if (std::fabs(scaled_step * std::pow(10.0, decimals) - std::round(scaled_step * std::pow(10.0, decimals))) > 1e-6)
    ++decimals;  // steps like 2.5
  for (double v : ticks.values) {
    if (v == 0) {
      out.emplace_back("0");
      continue;
    }
    std::string num = fixed(v / p.scale, decimals);
    std::string suffix = p.name;
    // Bytes, percent and prefixed seconds keep their unit on the tick ("64KiB", "5%", "100 ms").
    if (unit == "B" || unit == "%") suffix += unit;
    else if (unit == "s" && !suffix.empty()) suffix = " " + suffix + "s";
    out.push_back(num + suffix);
  }
  return out;
}

std::vector<size_t> downsample_minmax(const std::vector<double>& x, const std::vector<double>& y, size_t buckets) {
  size_t n = std::min(x.size(), y.size());
  std::vector<size_t> keep;
  if (buckets == 0 || n <= buckets * 4) {
    keep.resize(n);
    for (size_t i = 0; i < n; ++i) keep[i] = i;
    return keep;
  }
  bool sorted = true;
  for (size_t i = 1; i < n && sorted; ++i)
    if (!(x[i] >= x[i - 1])) sorted = false;
  double x0 = x[0], x1 = x[n - 1];
  bool by_x = sorted && std::isfinite(x0) && std::isfinite(x1) && x1 > x0;
  auto bucket_of = [&](size_t i) -> size_t {
    if (!by_x) return i * buckets / n;
    auto b = static_cast<size_t>((x[i] - x0) / (x1 - x0) * static_cast<double>(buckets));
    return std::min(b, buckets - 1);
  };
  keep.reserve(buckets * 4 + 2);
  size_t i = 0;
  while (i < n) {
    size_t b = bucket_of(i);
    size_t first = i, last = i, lo = n, hi = n;
    for (; i < n && bucket_of(i) == b; ++i) {
      last = i;
      if (!std::isfinite(y[i])) {
        // A gap: keep it so the line breaks where the data does.
        if (lo == n) lo = i;
        continue;
      }
      if (lo == n || !std::isfinite(y[lo]) || y[i] < y[lo]) lo = i;
      if (hi == n || y[i] > y[hi]) hi = i;
    }
    size_t picks[4] = {first, lo, hi, last};
    std::sort(picks, picks + 4);
    for (size_t k = 0; k < 4; ++k) {
      if (picks[k] >= n) continue;
      if (!keep.empty() && keep.back() == picks[k]) continue;
      keep.push_back(picks[k]);
    }
  }
  return keep;
}

}  // namespace cairn::plot
