// Whole-model tensors to and from this rank's model pieces (see piece_io.h).
#include "piece_io.h"

#include "chunk.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>

#include "cairn/error.h"
#include "cairn/log.h"
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

std::vector<Segment> segments(const PieceMap& map, size_t lo, size_t hi, bool spoken_only) {
  std::vector<Segment> out;
  for_each_overlap(map, lo, hi, [&](size_t i, size_t first, size_t count) {
    if (spoken_only && !map.speaks[i]) return;
    const gpt::FlatRun& r = map.runs[i];
    out.push_back({r.full + (first - r.local), first, count});
  });
  return out;
}

namespace {

int int_count(size_t n, const char* what) { return mpi::int_count(n, std::string("checkpoint assembly: ") + what); }

}  // namespace

void gather_to_root(const std::vector<Contribution>& mine, size_t first, size_t size, std::vector<float>& out,
                    MPI_Comm comm) {
  int rank = 0, ranks = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &ranks);
  // This rank's part: (position in the tensor, length) pairs and the values, in the same order.
  std::vector<uint64_t> where;
  std::vector<float> values;
  for (const Contribution& c : mine)
    for (const Segment& s : c.segs) {
      where.push_back(s.full - first);
      where.push_back(s.count);
      values.insert(values.end(), c.values + (s.local - c.base), c.values + (s.local - c.base) + s.count);
    }
  const int sizes[2] = {int_count(where.size(), "segment list"), int_count(values.size(), "values")};
  std::vector<int> all(rank == 0 ? 2 * static_cast<size_t>(ranks) : 0);
  mpi::check(MPI_Gather(sizes, 2, MPI_INT, all.data(), 2, MPI_INT, 0, comm), "MPI_Gather (checkpoint assembly)");
  std::vector<int> n_where, n_values, d_where, d_values;
  size_t total_where = 0, total_values = 0;
  if (rank == 0) {
    for (int r = 0; r < ranks; ++r) {
      n_where.push_back(all[2 * static_cast<size_t>(r)]);
      n_values.push_back(all[2 * static_cast<size_t>(r) + 1]);
      d_where.push_back(int_count(total_where, "segment lists"));
      d_values.push_back(int_count(total_values, "values"));
      total_where += static_cast<size_t>(n_where.back());
      total_values += static_cast<size_t>(n_values.back());
    }
  }
  std::vector<uint64_t> got_where(total_where);
  std::vector<float> got_values(total_values);
  mpi::check(MPI_Gatherv(where.data(), sizes[0], MPI_UINT64_T, got_where.data(), n_where.data(), d_where.data(),
                         MPI_UINT64_T, 0, comm),
             "MPI_Gatherv (checkpoint assembly)");
  mpi::check(MPI_Gatherv(values.data(), sizes[1], MPI_FLOAT, got_values.data(), n_values.data(), d_values.data(),
                         MPI_FLOAT, 0, comm),
             "MPI_Gatherv (checkpoint assembly)");
  if (rank != 0) return;
  out.assign(size, 0.0f);
  size_t covered = 0, v = 0;
  for (size_t i = 0; i + 1 < got_where.size(); i += 2) {
    const size_t at = got_where[i], n = got_where[i + 1];
    if (at + n > size) throw RuntimeError("checkpoint assembly: a piece lies outside its tensor");
    std::copy_n(got_values.data() + v, n, out.data() + at);
    v += n;
    covered += n;
  }
  if (covered != size)
    throw RuntimeError(
        strprintf("checkpoint assembly: the ranks' pieces cover %zu of the tensor's %zu values", covered, size));
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
