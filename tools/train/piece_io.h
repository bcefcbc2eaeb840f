// Moving whole-model tensors to and from this rank's model pieces (tensor/pipeline parallelism), so checkpoints
// hold whole tensors whatever the layout: a run saved as dp2·tp2·pp2 resumes as dp8 or on one rank.
#pragma once
#include <mpi.h>

#include <cstddef>
#include <vector>

#include "cairn/gpt.h"

namespace cairn::train {

// A piece's floats and their places in the whole model's flat buffer, with the runs this rank speaks for when
// the whole model is assembled: a replicated tensor (norms, row-parallel biases, wpe) has one speaker (TP rank 0),
// and wte's copy on the last pipeline stage none (the first stage speaks for the tied weight).
struct PieceMap {
  std::vector<gpt::FlatRun> runs;  // ordered by local offset
  std::vector<char> speaks;        // per run
};
PieceMap piece_map(const gpt::GptConfig& cfg, const gpt::ShardSpec& spec);

// A stretch of a piece's flat buffer and where it lies in the whole model's: piece positions [local, local + count)
// are whole-model positions [full, full + count).
struct Segment {
  size_t full = 0, local = 0, count = 0;
};
// The parts of piece positions [lo, hi) with their whole-model positions: every run (what a reader fills), or with
// `spoken_only` the runs this rank speaks for (what a writer contributes: each whole-model value has one speaker).
std::vector<Segment> segments(const PieceMap& map, size_t lo, size_t hi, bool spoken_only);

// What one rank contributes to a whole-model tensor: segments and the array their local positions index, shifted by
// base (values[local - base]; e.g. a ZeRO shard starting at piece position lo).
struct Contribution {
  std::vector<Segment> segs;
  const float* values = nullptr;
  size_t base = 0;
};
// Collective over comm: rank 0 gets, in out[0, size), the whole-model positions [first, first + size) from every
// rank's contributions (which must lie inside that range and together cover it once: one speaker per value); the
// others send only their values (memory: one tensor on rank 0, nothing beyond the pieces elsewhere). Errors when a
// rank's part exceeds MPI's int counts.
void gather_to_root(const std::vector<Contribution>& mine, size_t first, size_t size, std::vector<float>& out,
                    MPI_Comm comm);

}  // namespace cairn::train
