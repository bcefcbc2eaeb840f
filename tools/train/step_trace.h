// cairn-train's clocks and Chrome trace of selected steps ([train] trace_steps -> <run>/train/trace.json).
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "cairn/metrics.h"
#include "settings.h"

namespace cairn::train {

// Monotonic seconds (phase and step times).
inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
// Seconds since the Unix epoch (metrics' wall_time).
inline double wall_clock() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// This rank's trace events of steps a..b-1 (0-based); rows (tid) 0 = compute, 1 = comm, pid = rank.
class StepTrace {
 public:
  // Parses [train] trace_steps (empty: no trace; a bad range is a UsageError).
  void init(const Settings& s);
  // Names this rank's process and its rows.
  void name_rows();
  // Takes now as the trace's time zero.
  void start_clock() { epoch_ = now_s(); }
  // Decides whether step (1-based) is traced; returns that.
  bool begin_step(int64_t step) {
    active_ = step - 1 >= a_ && step - 1 < b_;
    return active_;
  }
  bool active() const { return active_; }
  // True after the last traced step: time to flush().
  bool range_done(int64_t step) const { return active_ && step == b_; }
  bool has_events() const { return events_ > 0; }
  void event(const std::string& name, const std::string& cat, double t0, double t1,
             const nlohmann::json& args = nullptr, int tid = 0);
  // Collective: every rank's events to rank 0, which writes trace.json; tracing is then over.
  void flush();

 private:
  metrics::Trace trace_;
  int rank_ = 0, world_ = 1;
  std::string steps_, train_dir_;
  int64_t a_ = -1, b_ = -1;
  bool active_ = false;
  size_t events_ = 0;
  double epoch_ = 0;
};

}  // namespace cairn::train
