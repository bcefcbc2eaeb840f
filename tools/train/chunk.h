// One model chunk of this rank (a pipeline virtual stage's piece of the model, tensor-parallel or whole) with its
// optimizer state, data-parallel gradient sync and the buffers its pipeline messages travel in.
#pragma once
#include <mpi.h>

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "backend_buffer.h"
#include "cairn/gpt.h"
#include "cairn/parallel.h"
#include "grad_sync.h"
#include "piece_io.h"
#include "zero_units.h"

namespace cairn::train {

struct Chunk {
  int stage = 0;  // virtual stage (chunk c of pipeline rank p is stage c*pp + p)
  gpt::ShardSpec spec;
  std::unique_ptr<gpt::Model> model;
  PieceMap map;  // where its floats lie in the whole model (checkpoints)
  // Data parallelism: this rank's part [shards.lo, shards.hi) of the optimizer state (all of it without ZeRO).
  Shards shards;
  BackendBuffer m, v, shard_grads;
  std::vector<gpt::DecayRange> decay;
  std::unique_ptr<GradSync> sync;  // null when dp == 1; with ZeRO-2 only the parameter all-gather
  // ZeRO-2/3: the model's units borrow their gradient (and, ZeRO-3, parameter) memory here; ZeRO-3's parameters
  // live only as this rank's shard.
  std::unique_ptr<ZeroUnits> zero;
  BackendBuffer param_shard;
  // Parameter ranges whose gradient this rank counts in the global norm: each whole-model parameter once over the
  // TP group (replicated tensors on TP rank 0) and the pipeline (the tied wte copy on the first stage).
  std::vector<std::pair<size_t, size_t>> norm_ranges;
  // wte when its tied copy lives on another stage (pp > 1): summed over the embedding group after backward.
  size_t tied_first = 0, tied_count = 0;

  // Pipeline: activation slots of the micro-batches in flight.
  std::vector<int> slot_of_micro;  // -1: not in flight
  std::vector<int> free_slots;
  int slots_used = 0;
  BackendBuffer grad_in;  // the received gradient of this chunk's output

  size_t num_params() const { return model->num_params(); }
  // The summed gradient of the rank's shard [shards.lo, shards.hi): shard_grads (ZeRO-2/3, and ZeRO-1 over NCCL) or,
  // reduce-scattered in place (ZeRO-1 over MPI) or all-reduced, inside the model's flat gradient.
  const float* grads_of_shard() const { return shard_grads.data() ? shard_grads.data() : model->grads() + shards.lo; }
  // The rank's shard [shards.lo, shards.hi) of the flat parameters: param_shard (ZeRO-3) or inside the model's.
  float* params_of_shard() { return param_shard.data() ? param_shard.data() : model->params() + shards.lo; }
};

// The ranges of `tensors` counted in the global gradient norm on this rank (see Chunk::norm_ranges).
std::vector<std::pair<size_t, size_t>> norm_ranges(const std::vector<gpt::TensorInfo>& tensors,
                                                   const gpt::ShardSpec& spec);

}  // namespace cairn::train
