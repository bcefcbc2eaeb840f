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

// Adds values[i] of piece positions lo + i (i < hi - lo) into `full` (count_params floats) at their whole-model
// positions, for the runs this rank speaks for.
void add_to_full(const PieceMap& map, size_t lo, size_t hi, const float* values, float* full);
// values[i] = full[whole-model position of piece position lo + i], for i < hi - lo (every run, spoken or not).
void take_from_full(const PieceMap& map, size_t lo, size_t hi, const float* full, float* values);
// Sums `buf` over `comm` into rank 0's copy (others keep theirs), in slices MPI's int counts can hold.
void reduce_to_root(std::vector<float>& buf, MPI_Comm comm);

}  // namespace cairn::train
