// Latency/bandwidth fit of one block: time(S) = alpha + S*factor/busbw over the out-of-place rows.
#include <algorithm>
#include <cmath>

#include "cairn/log.h"
#include "sweep.h"

namespace cairn::sweep {

namespace {
constexpr double kMaxFitOverPeak = 2.0;  // a fit's busbw over the largest measured busbw, at most
}  // namespace

Fit fit_block(const Block& b, double factor) {
  Fit f;
  for (const auto& r : b.rows) f.peak_busbw_gbps = std::max(f.peak_busbw_gbps, r.oop.busbw);
  for (const auto& r : b.rows) {
    if (f.peak_busbw_gbps > 0 && r.oop.busbw >= 0.5 * f.peak_busbw_gbps) {
      f.half_peak_bytes = r.size;
      break;
    }
  }
  if (factor <= 0) {
    f.note = "bus-bandwidth factor is 0 for one rank: nothing crosses the fabric";
    return f;
  }
  // Weighted least squares with weights 1/t^2 (relative error): unweighted fits let the largest
  // sizes decide everything and leave alpha meaningless.
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  std::vector<std::pair<double, double>> pts;
  for (const auto& r : b.rows) {
    double t = r.oop.time_us;
    if (r.size == 0 || !(t > 0) || !std::isfinite(t)) continue;  // 0-byte rows carry no bandwidth
    double x = static_cast<double>(r.size) * factor;
    pts.emplace_back(x, t);
  }
  f.points = static_cast<int>(pts.size());
  if (pts.size() < 2) {
    f.note = "fewer than two sizes";
    return f;
  }
  for (auto [x, t] : pts) {
    double w = 1.0 / (t * t);
    sw += w;
    sx += w * x;
    sy += w * t;
    sxx += w * x * x;
    sxy += w * x * t;
  }
  double det = sw * sxx - sx * sx;
  double alpha = 0, beta = 0;  // beta: microseconds per (factor-scaled) byte
  if (det > 0) {
    beta = (sw * sxy - sx * sy) / det;
    alpha = (sy - beta * sx) / sw;
  }
  if (alpha < 0 || det <= 0) {  // no latency term the data supports: fit through the origin
    alpha = 0;
    beta = sxx > 0 ? sxy / sxx : 0;
  }
  if (!(beta > 0)) {
    f.note = "time does not grow with size (latency-bound range only)";
    return f;
  }
  double ybar = sy / sw, ss_res = 0, ss_tot = 0;
  for (auto [x, t] : pts) {
    double w = 1.0 / (t * t);
    double m = alpha + beta * x;
    ss_res += w * (t - m) * (t - m);
    ss_tot += w * (t - ybar) * (t - ybar);
  }
  f.alpha_us = alpha;
  f.busbw_gbps = 1e-3 / beta;  // bytes/us -> GB/s
  f.r2 = ss_tot > 0 ? 1.0 - ss_res / ss_tot : 1.0;
  // A bandwidth the sizes never approached is not written as a fit: cairn-plan would price every collective of the
  // tier with it. The line's busbw is the limit the measured ones rise towards, reaching half of it at the size
  // alpha x busbw; above twice the largest measured, the largest size stopped short of that, and the slope is noise
  // (a latency-bound 8-64 B sweep fitted 14x any measured busbw, a 1-rank broadcast 26x).
  if (f.busbw_gbps > kMaxFitOverPeak * f.peak_busbw_gbps) {
    f.note = strprintf("fitted busbw %.3g GB/s is %.1fx the largest measured (%.3g GB/s): the sizes stop short of "
                       "the bandwidth-bound range; larger sizes (-e)",
                       f.busbw_gbps, f.busbw_gbps / f.peak_busbw_gbps, f.peak_busbw_gbps);
    return f;
  }
  f.valid = true;
  return f;
}

}  // namespace cairn::sweep
