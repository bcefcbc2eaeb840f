// cairn-train's Chrome trace of selected steps (step_trace.h).
#include "step_trace.h"

#include <algorithm>
#include <tuple>

#include "cairn/files.h"
#include "cairn/log.h"
#include "cairn/mpi.h"
#include "cairn/provenance.h"
#include "trainer.h"

namespace cairn::train {

void StepTrace::init(const Settings& s) {
  rank_ = s.rank;
  world_ = s.world;
  steps_ = s.trace_steps;
  train_dir_ = s.train_dir;
  if (!steps_.empty()) std::tie(a_, b_) = parse_step_range(steps_);
}

void StepTrace::name_rows() {
  trace_.name_process(rank_, strprintf("rank %d", rank_));
  trace_.name_thread(rank_, 0, "compute");
  trace_.name_thread(rank_, 1, "comm");
}

void StepTrace::event(const std::string& name, const std::string& cat, double t0, double t1, const nlohmann::json& args,
                      int tid) {
  if (!active_) return;
  // Both ends through the same monotonic conversion: what nests (or touches) in seconds nests in microseconds.
  const int64_t ts = metrics::Trace::to_us(t0, epoch_), end = metrics::Trace::to_us(std::max(t0, t1), epoch_);
  if (tid != 0) tid = comm_row(ts, end - ts);
  trace_.add(name, cat, rank_, tid, ts, end - ts, args);
  ++events_;
}

int StepTrace::comm_row(int64_t ts, int64_t dur) {
  const int64_t end = ts + dur;
  // Intervals conflict when they overlap by any time, or start together (a zero-length event would look nested).
  auto conflicts = [&](const std::pair<int64_t, int64_t>& o) {
    return std::max(ts, o.first) < std::min(end, o.second) || ts == o.first;
  };
  size_t row = 0;
  while (row < comm_rows_.size() && std::any_of(comm_rows_[row].begin(), comm_rows_[row].end(), conflicts)) ++row;
  if (row == comm_rows_.size()) {
    comm_rows_.emplace_back();
    if (row > 0) trace_.name_thread(rank_, static_cast<int>(row) + 1, strprintf("comm %zu", row + 1));
  }
  comm_rows_[row].emplace_back(ts, end);
  return static_cast<int>(row) + 1;
}

void StepTrace::flush() {
  // Every rank's events go to rank 0, which writes one trace (pid = rank) once the range is over, its time zero
  // moved to the first event of any rank.
  auto all = mpi::allgather_strings(trace_.events().dump());
  if (rank_ == 0) {
    metrics::Trace merged;
    for (const auto& txt : all) merged.append(nlohmann::json::parse(txt));
    merged.rebase();
    std::string path = join_path(train_dir_, "trace.json");
    atomic_write(path, merged.to_json({{"steps", steps_},
                                       {"first_step", a_},
                                       {"last_step", b_ - 1},
                                       {"step_numbering", "1-based, half-open a:b = steps a..b-1"},
                                       {"time_unit", "integer microseconds"},
                                       {"world_size", world_},
                                       {"provenance", provenance().to_json()}}));
    CAIRN_LOG_INFO("trace of steps %lld..%lld written to \"%s\"", static_cast<long long>(a_),
                   static_cast<long long>(b_ - 1), path.c_str());
  }
  trace_.clear();
  comm_rows_.clear();
  events_ = 0;
  active_ = false;
  a_ = b_ = -1;
}

}  // namespace cairn::train
