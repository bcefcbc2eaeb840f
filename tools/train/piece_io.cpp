// Whole-model tensors to and from this rank's model pieces (see piece_io.h).
#include "piece_io.h"

#include "chunk.h"

#include <algorithm>
#include <climits>

#include "cairn/mpi.h"

namespace cairn::train {

PieceMap piece_map(const gpt::GptConfig& cfg, const gpt::ShardSpec& spec) {
  PieceMap m;
  m.runs = gpt::full_model_runs(cfg, spec);
  const std::vector<gpt::TensorInfo> tensors = gpt::piece_tensors(cfg, spec);
  size_t t = 0;
  for (const gpt::FlatRun& r : m.runs) {
    while (r.local >= tensors[t].offset + tensors[t].size) ++t;
    const gpt::TensorInfo& ti = tensors[t];
    bool speaks = ti.split != gpt::Split::None || spec.tp_rank == 0;
    if (ti.name == "wte" && !spec.has_embedding) speaks = false;  // the tied copy of the last stage
    m.speaks.push_back(speaks ? 1 : 0);
  }
  return m;
}

namespace {

// Calls f(run, first, count): the part [first, first + count) of each run (in local positions) inside [lo, hi).
template <typename F>
void for_each_overlap(const PieceMap& map, size_t lo, size_t hi, F&& f) {
  auto it = std::upper_bound(map.runs.begin(), map.runs.end(), lo,
                             [](size_t x, const gpt::FlatRun& r) { return x < r.local; });
  if (it != map.runs.begin()) --it;
  for (; it != map.runs.end() && it->local < hi; ++it) {
    const size_t a = std::max(lo, it->local), b = std::min(hi, it->local + it->count);
    if (a < b) f(static_cast<size_t>(it - map.runs.begin()), a, b - a);
  }
}

}  // namespace

void add_to_full(const PieceMap& map, size_t lo, size_t hi, const float* values, float* full) {
  for_each_overlap(map, lo, hi, [&](size_t i, size_t first, size_t count) {
    if (!map.speaks[i]) return;
    const gpt::FlatRun& r = map.runs[i];
    float* dst = full + r.full + (first - r.local);
    const float* src = values + (first - lo);
    for (size_t k = 0; k < count; ++k) dst[k] += src[k];
  });
}

void take_from_full(const PieceMap& map, size_t lo, size_t hi, const float* full, float* values) {
  for_each_overlap(map, lo, hi, [&](size_t i, size_t first, size_t count) {
    const gpt::FlatRun& r = map.runs[i];
    std::copy_n(full + r.full + (first - r.local), count, values + (first - lo));
  });
}

void reduce_to_root(std::vector<float>& buf, MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  const size_t slice = static_cast<size_t>(1) << 28;
  for (size_t at = 0; at < buf.size(); at += slice) {
    const int n = static_cast<int>(std::min(slice, buf.size() - at));
    mpi::check(MPI_Reduce(rank == 0 ? MPI_IN_PLACE : buf.data() + at, rank == 0 ? buf.data() + at : nullptr, n,
                          MPI_FLOAT, MPI_SUM, 0, comm),
               "MPI_Reduce (checkpoint assembly)");
  }
}

std::vector<std::pair<size_t, size_t>> norm_ranges(const std::vector<gpt::TensorInfo>& tensors,
                                                   const gpt::ShardSpec& spec) {
  std::vector<std::pair<size_t, size_t>> out;
  for (const gpt::TensorInfo& t : tensors) {
    const bool counted =
        (t.split != gpt::Split::None || spec.tp_rank == 0) && !(t.name == "wte" && !spec.has_embedding);
    if (!counted) continue;
    if (!out.empty() && out.back().first + out.back().second == t.offset) out.back().second += t.size;
    else out.emplace_back(t.offset, t.size);
  }
  return out;
}

}  // namespace cairn::train
