// cairn-train's NaN/spike policy: which steps skip their update, and what too many skips in a row lead to.
#pragma once
#include <cstdint>
#include <deque>
#include <string>

#include <nlohmann/json.hpp>

#include "settings.h"

namespace cairn::train {

// Moving statistics of accepted steps, for spike detection (kept in checkpoints for exact resume).
struct SpikeWindow {
  std::deque<double> loss, norm;
  static double zscore(const std::deque<double>& w, double x);
  void push(double l, double n, size_t cap);
};

// Why a step's update must be skipped: a non-finite loss or gradient norm, or a loss / gradient-norm z-score above
// [train] spike_zscore against the window of accepted steps. Empty: apply the update.
std::string skip_reason(const Settings& s, const SpikeWindow& window, float loss, double norm);

// The skip bookkeeping of a run: the spike window and the counters (all but restores_since_checkpoint are kept in
// checkpoints).
struct StepGuard {
  SpikeWindow spikes;
  int64_t skipped_total = 0;
  int consecutive = 0;
  int restores_since_checkpoint = 0;  // restoring over and over means the model, not the data, is bad

  void accepted(float loss, double norm, const Settings& s);
  void skipped() {
    ++skipped_total;
    ++consecutive;
  }
  // After a skip: false while the run may go on; true when the last checkpoint must be restored
  // (on_too_many_skips = "restore"); throws RuntimeError when the run must stop instead.
  bool must_restore(const Settings& s, int64_t step, const std::string& reason, const std::string& last_ckpt) const;
};

}  // namespace cairn::train
