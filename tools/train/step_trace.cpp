// cairn-train's Chrome trace of selected steps (step_trace.h).
#include "step_trace.h"

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

void StepTrace::event(const std::string& name, const std::string& cat, double t0, double t1,
                      const nlohmann::json& args, int tid) {
  if (!active_) return;
  trace_.add(name, cat, rank_, tid, (t0 - epoch_) * 1e6, (t1 - t0) * 1e6, args);
  ++events_;
}

void StepTrace::flush() {
  // Every rank's events go to rank 0, which writes one trace (pid = rank) once the range is over.
  auto all = mpi::allgather_strings(trace_.events().dump());
  if (rank_ == 0) {
    metrics::Trace merged;
    for (const auto& txt : all) merged.append(nlohmann::json::parse(txt));
    std::string path = join_path(train_dir_, "trace.json");
    atomic_write(path, merged.to_json({{"steps", steps_}, {"world_size", world_},
                                       {"provenance", provenance().to_json()}}));
    CAIRN_LOG_INFO("trace of steps %s written to \"%s\"", steps_.c_str(), path.c_str());
  }
  trace_.clear();
  events_ = 0;
  active_ = false;
  a_ = b_ = -1;
}

}  // namespace cairn::train
