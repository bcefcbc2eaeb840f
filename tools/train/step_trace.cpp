// cairn-train's Chrome trace of selected steps (step_trace.h).
#include "step_trace.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
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

namespace {

// The events of an earlier run's trace.json worth keeping in a resumed run's: those before the first step traced
// again (steps after the checkpoint it resumed from ran again, so their old events are superseded), and that run's
// segments cut the same way. Empty when there is no earlier trace or it cannot be read (then it is replaced, with a
// warning: a trace is a diagnostic, and a broken one must not stop training).
struct EarlierTrace {
  nlohmann::json events = nlohmann::json::array();
  nlohmann::json segments = nlohmann::json::array();
  int64_t end_us = 0;  // the end of its last kept event
};

EarlierTrace read_earlier_trace(const std::string& path, int64_t first_traced) {
  EarlierTrace out;
  if (!path_exists(path)) return out;
  nlohmann::json old;
  try {
    old = nlohmann::json::parse(read_file(path));
  } catch (const std::exception& e) {
    CAIRN_LOG_WARN("cannot read the earlier trace \"%s\" (%s); replacing it", path.c_str(), e.what());
    return out;
  }
  const nlohmann::json* events =
      old.is_object() && old.contains("traceEvents") && old["traceEvents"].is_array() ? &old["traceEvents"] : nullptr;
  if (!events) return out;
  // The old run's clock is one for all its ranks: cut at the start of its first step that ran again.
  int64_t cut = std::numeric_limits<int64_t>::max();
  for (const auto& e : *events) {
    if (!e.is_object() || e.value("cat", "") != "step" || !e.contains("ts") || !e["ts"].is_number_integer()) continue;
    const std::string name = e.value("name", "");
    if (name.rfind("step ", 0) == 0 && std::atoll(name.c_str() + 5) >= first_traced)
      cut = std::min(cut, e["ts"].get<int64_t>());
  }
  for (const auto& e : *events) {
    if (!e.is_object()) continue;
    if (e.contains("ts")) {
      if (!e["ts"].is_number_integer() || e["ts"].get<int64_t>() >= cut) continue;
      out.end_us = std::max(out.end_us, e["ts"].get<int64_t>() + e.value("dur", int64_t{0}));
    }
    out.events.push_back(e);
  }
  const nlohmann::json other = old.value("otherData", nlohmann::json::object());
  nlohmann::json segments = other.contains("segments") && other["segments"].is_array()
                                ? other["segments"]
                                : nlohmann::json::array({{{"first_step", other.value("first_step", int64_t{-1})},
                                                          {"last_step", other.value("last_step", int64_t{-1})},
                                                          {"world_size", other.value("world_size", 0)},
                                                          {"ts_offset_us", 0}}});
  for (auto seg : segments) {
    if (!seg.is_object() || seg.value("first_step", first_traced) >= first_traced) continue;
    seg["last_step"] = std::min(seg.value("last_step", first_traced - 1), first_traced - 1);
    out.segments.push_back(seg);
  }
  return out;
}

}  // namespace

void StepTrace::flush() {
  // Every rank's events go to rank 0 (only), which writes one trace (pid = rank) once the range is over, its time zero
  // moved to the first event of any rank. Ranks send their events as text, already moved in time, and rank 0 joins
  // the texts: no JSON tree of the whole trace is built (it took ~50x the file's size).
  const int64_t first_ts = mpi::allreduce<int64_t>(trace_.first_ts(), MPI_MIN);
  const std::string path = join_path(train_dir_, "trace.json");
  EarlierTrace earlier;
  if (rank_ == 0 && resumed_at_ > 0 && first_traced_ > 0) earlier = read_earlier_trace(path, first_traced_);
  const int64_t offset = mpi::broadcast_value<int64_t>(earlier.events.empty() ? 0 : earlier.end_us + 1000000, 0);
  const int64_t shift = first_ts == std::numeric_limits<int64_t>::max() ? offset : offset - first_ts;
  auto all = mpi::gather_strings(trace_.events_text(shift), 0);
  if (rank_ == 0) {
    std::string events;
    for (const auto& e : earlier.events) {
      if (!events.empty()) events += ',';
      events += e.dump();
    }
    for (auto& txt : all) {
      if (txt.empty()) continue;
      if (!events.empty()) events += ',';
      events += txt;
      std::string().swap(txt);  // each rank's text freed as it is copied
    }
    nlohmann::json segments = earlier.segments;
    segments.push_back({{"first_step", first_traced_},
                        {"last_step", last_traced_},
                        {"world_size", world_},
                        {"ts_offset_us", offset},
                        {"resumed_at", resumed_at_}});
    const int64_t first = segments.front().value("first_step", first_traced_);
    atomic_write(path, metrics::Trace::document(events, {{"steps", steps_},
                                                         {"first_step", first},
                                                         {"last_step", last_traced_},
                                                         {"segments", segments},
                                                         {"step_numbering", "1-based, half-open a:b = steps a..b-1"},
                                                         {"time_unit", "integer microseconds"},
                                                         {"world_size", world_},
                                                         {"provenance", provenance().to_json()}}));
    if (segments.size() > 1)
      CAIRN_LOG_INFO("trace of steps %lld..%lld written to \"%s\" (steps %lld..%lld kept from the run before the "
                     "resume)",
                     static_cast<long long>(first), static_cast<long long>(last_traced_), path.c_str(),
                     static_cast<long long>(first), static_cast<long long>(first_traced_ - 1));
    else
      CAIRN_LOG_INFO("trace of steps %lld..%lld written to \"%s\"", static_cast<long long>(first_traced_),
                     static_cast<long long>(last_traced_), path.c_str());
  }
  trace_.clear();
  comm_rows_.clear();
  events_ = 0;
  active_ = false;
  a_ = b_ = -1;
}

}  // namespace cairn::train
