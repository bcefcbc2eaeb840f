// cairn-train's NaN/spike policy (step_guard.h): the z-score window, the skip decision, too many skips in a row.
#include "step_guard.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "cairn/error.h"
#include "cairn/log.h"

namespace cairn::train {

double SpikeWindow::zscore(const std::deque<double>& w, double x) {
  if (w.size() < 2) return 0;
  double mean = 0, var = 0;
  for (double v : w) mean += v;
  mean /= static_cast<double>(w.size());
  for (double v : w) var += (v - mean) * (v - mean);
  double sd = std::sqrt(var / static_cast<double>(w.size() - 1));
  if (sd <= 1e-12 * std::max(1.0, std::fabs(mean))) return x > mean * (1 + 1e-6) + 1e-12 ? 1e9 : 0;
  return (x - mean) / sd;
}

void SpikeWindow::push(double l, double n, size_t cap) {
  loss.push_back(l);
  norm.push_back(n);
  while (loss.size() > cap) loss.pop_front();
  while (norm.size() > cap) norm.pop_front();
}

// Calibrated on healthy curves (tools/train/README.md, "Spike rule"): a step's loss is close to normal around the
// window, its gradient norm is heavy-tailed (healthy steps reach 11 sigma and 4x the window mean on small batches).
// So the loss is judged by its z-score; the gradient norm by the z-score of its logarithm and, as published
// gradient-norm spikes are an order of magnitude or more, only from kNormSpikeRatio x the window mean on.
constexpr double kNormSpikeRatio = 10.0;

static double log_zscore(const std::deque<double>& w, double x) {
  std::deque<double> logs;
  for (double v : w) logs.push_back(std::log(std::max(v, 1e-30)));
  return SpikeWindow::zscore(logs, std::log(std::max(x, 1e-30)));
}

std::string skip_reason(const Settings& s, const SpikeWindow& window, float loss, double norm) {
  if (!std::isfinite(loss) || !std::isfinite(norm)) return "non-finite loss or gradient";
  if (s.spike_z > 0 && static_cast<int>(window.loss.size()) >= s.spike_min_steps) {
    const double zl = SpikeWindow::zscore(window.loss, loss);
    if (zl > s.spike_z) return strprintf("loss spike (z = %.1f)", zl);
    double mean = 0;
    for (double v : window.norm) mean += v;
    mean /= static_cast<double>(std::max<size_t>(window.norm.size(), 1));
    if (norm > kNormSpikeRatio * mean) {
      const double zn = log_zscore(window.norm, norm);
      if (zn > s.spike_z)
        return strprintf("gradient-norm spike (%.1fx the window mean, z of log = %.1f)", norm / mean, zn);
    }
  }
  return "";
}

void StepGuard::accepted(float loss, double norm, const Settings& s) {
  spikes.push(loss, norm, static_cast<size_t>(s.spike_window));
  consecutive = 0;
}

bool StepGuard::must_restore(const Settings& s, int64_t step, const std::string& reason,
                             const std::string& last_ckpt) const {
  if (consecutive <= s.max_skips) return false;
  if (!s.restore_on_skips) {
    throw RuntimeError(strprintf("%d consecutive steps skipped (last at step %lld: %s); stopping as "
                                 "[train] on_too_many_skips = \"stop\"",
                                 consecutive, static_cast<long long>(step), reason.c_str()));
  }
  if (restores_since_checkpoint >= 3) {
    throw RuntimeError(strprintf("%d consecutive steps skipped at step %lld after %d restores of \"%s\" without "
                                 "progress: the model itself diverges (lower [train] lr?)",
                                 consecutive, static_cast<long long>(step), restores_since_checkpoint,
                                 last_ckpt.c_str()));
  }
  if (last_ckpt.empty()) {
    throw RuntimeError(strprintf("%d consecutive steps skipped at step %lld and no checkpoint to restore yet",
                                 consecutive, static_cast<long long>(step)));
  }
  return true;
}

}  // namespace cairn::train
