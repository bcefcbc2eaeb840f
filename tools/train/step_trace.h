// cairn-train's clocks and Chrome trace of selected steps ([train] trace_steps -> <run>/train/trace.json).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cairn/clock.h"
#include "cairn/metrics.h"
#include "settings.h"

namespace cairn::train {

// This rank's trace events of steps a..b-1 ([train] trace_steps = "a:b"), numbered from 1 like every other step
// number (metrics.jsonl, TensorBoard, the progress line, checkpoints step_%08d = after that many steps): "10:12"
// traces steps 10 and 11, plus the validation pass after a traced step.
//
// The trace is well-formed for Perfetto and Chrome DevTools: integer microseconds since the trace's first event;
// pid = rank; tid 0 = compute, where events nest strictly ("step N" > phases data/forward/backward/comm
// (exposed)/optimizer > per-layer events; "validation" > its forwards > their layers) and siblings never overlap;
// tid 1 = comm (pipeline waits, tensor-parallel collectives, bucket all-reduces, parameter all-gathers). Comm
// events in flight at the same time (asynchronous buckets) each go to the first comm row (tid 1, 2, ...) where they
// overlap nothing, so no comm row has overlapping or nested events.
class StepTrace {
 public:
  // Parses [train] trace_steps (empty: no trace; a bad range is a UsageError).
  void init(const Settings& s);
  // Names this rank's process and its rows.
  void name_rows();
  // Takes now as the trace's time zero (ranks call it together, after a barrier). `resumed_at`: the step the run
  // resumed from (0 for a fresh run); a resumed run keeps the steps an earlier run already traced (flush()).
  void start_clock(int64_t resumed_at = 0) {
    epoch_ = monotonic_seconds();
    resumed_at_ = resumed_at;
  }
  // Decides whether step (1-based) is traced, a <= step < b, and takes now as the step's start; returns that.
  bool begin_step(int64_t step) {
    active_ = step >= a_ && step < b_;
    step_t0_ = monotonic_seconds();
    if (active_) {
      if (first_traced_ < 0) first_traced_ = step;
      last_traced_ = step;
      // The earlier steps' comm events ended before this one began: only this step's can overlap (keeping them made
      // placing an event cost O(every event traced so far): 8,000 traced steps took +51 s).
      for (auto& row : comm_rows_) row.clear();
    }
    return active_;
  }
  bool active() const { return active_; }
  // Start of the current step (begin_step): its "step N" event begins here, before any of its phases.
  double step_start() const { return step_t0_; }
  // True after the last traced step (and its validation): time to flush().
  bool range_done(int64_t step) const { return active_ && step == b_ - 1; }
  bool has_events() const { return events_ > 0; }
  // An event from t0 to t1 (monotonic_seconds() seconds) on the compute row (tid 0) or, with tid >= 1, on a comm row.
  void event(const std::string& name, const std::string& cat, double t0, double t1,
             const nlohmann::json& args = nullptr, int tid = 0);
  // Collective: every rank's events to rank 0, which writes trace.json; tracing is then over. The file says which
  // steps it holds (first_step, last_step: those traced, not those asked for, when a stop signal cut the range).
  // A resumed run keeps the earlier run's events of the steps before the ones it traced (a requeued job's trace
  // would otherwise lose them); its own follow them after a 1 s gap, and otherData.segments lists each run's steps.
  void flush();

 private:
  // The first comm row (tid 1, 2, ...) where [ts, ts + dur] overlaps no event; opens a new row if none.
  int comm_row(int64_t ts, int64_t dur);

  metrics::Trace trace_;
  int rank_ = 0, world_ = 1;
  std::string steps_, train_dir_;
  int64_t a_ = -1, b_ = -1;
  int64_t resumed_at_ = 0, first_traced_ = -1, last_traced_ = -1;
  bool active_ = false;
  size_t events_ = 0;
  double epoch_ = 0, step_t0_ = 0;
  std::vector<std::vector<std::pair<int64_t, int64_t>>> comm_rows_;  // [start, end] us of each comm row's events
};

}  // namespace cairn::train
