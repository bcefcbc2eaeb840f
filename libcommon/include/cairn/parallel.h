// cairn-train's parallel layout (dp x cp x tp x pp, virtual stages, ZeRO, sp): rank <-> coordinates, validation, the
// split of layers into pipeline stages and the MPI communicators of one rank.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <mpi.h>

namespace cairn::parallel {

// A validated, complete layout (resolve_layout()); the same on every rank.
struct Layout {
  int world = 1, dp = 1, tp = 1, pp = 1, v = 1, zero = 0;
  int cp = 1;                            // context parallelism: each sequence split over cp ranks
  bool sp = false;                       // effective: false at tp = 1, where sequence parallelism has nothing to split
  int micro_batch = 1, micro_steps = 1;  // sequences per micro-batch; micro-batches per step per dp rank
  // Layers of each virtual stage, pp*v entries in virtual-stage order: virtual stage s = chunk * pp + pipeline
  // rank (Megatron's interleaving), so pipeline rank p holds stages p, p + pp, p + 2pp, ...
  std::vector<int> stage_layers;
  // Things worth a log line that are not errors (e.g. "sp does nothing at tp = 1").
  std::vector<std::string> notes;
};

struct Coords {
  int dp = 0, tp = 0, pp = 0, cp = 0;
  bool operator==(const Coords&) const = default;
};

// Megatron's rank order: tp fastest, then cp, then dp, then pp:
// rank = tp + tp_size * (cp + cp_size * (dp + dp_size * pp)), so a TP group is consecutive ranks (inside a node, where
// its every-layer all-reduces belong) and a CP group (a K/V all-gather per layer) the next closest.
Coords coords_of(const Layout& layout, int rank);
int rank_of(const Layout& layout, const Coords& coords);

// What the config and the model say; resolve_layout() checks it and fills in the derived values.
struct LayoutRequest {
  int world = 1;  // MPI ranks
  int dp = 0;     // 0 = world / (tp*cp*pp)
  int tp = 1, pp = 1, v = 1, zero = 0;
  int cp = 1;  // context parallelism: seq_len must split into 2*cp equal chunks (load-balanced causal attention)
  bool sp = false;
  int64_t micro_batch = 0;   // sequences per micro-batch; 0 = global_batch / dp (no accumulation)
  int64_t global_batch = 1;  // sequences per optimizer step over all dp ranks
  int layers = 1, heads = 1, hidden = 1;
  int kv_heads = 0;    // GQA key/value heads; 0 = heads
  int ffn_hidden = 0;  // the resolved MLP inner size; 0 = not checked
  int vocab = 0;       // padded rows of the embedding; 0 = not known yet, not checked
  int seq_len = 1;
  std::vector<int> stage_layers;  // [parallel] stage_layers; empty = even split
};

// Validates and completes a layout. Every violation is reported in one cairn::UsageError whose message names the
// [parallel] / [model] / [train] keys and the numbers, e.g. "[model] heads = 12 is not divisible by [parallel]
// tp = 8". When layers do not split evenly, the message suggests a `stage_layers = [...]` list.
Layout resolve_layout(const LayoutRequest& request);

// An uneven split of `layers` into `stages` (>= 1 layer each, layers >= stages): as even as possible, the extra
// layers going to the middle stages first, since the first and last carry the embedding and the loss.
std::vector<int> suggest_stage_layers(int layers, int stages);

// First layer and layer count of virtual stage s (0 <= s < pp*v).
std::pair<int, int> stage_layer_range(const Layout& layout, int virtual_stage);
// The virtual stage that pipeline rank `pp_rank` runs as its model chunk `chunk` (0 <= chunk < v).
int virtual_stage(const Layout& layout, int pp_rank, int chunk);

// One line for logs, e.g. "dp2 x tp2 x pp2 (v2, layers 3+3+3+3), micro-batch 2 x 4, ZeRO-1, sp".
std::string describe(const Layout& layout);

// The communicators of one rank, split from `world` (whose size must be layout.world); frees what it created.
//   tp: same (cp, dp, pp), ordered by tp coordinate    cp: same (tp, dp, pp), ordered by cp
//   dp: same (tp, cp, pp), ordered by dp
//   dp_cp: same (tp, pp), ordered by cp + cp_size * dp: every rank holding the same parameters (Megatron's
//          data-parallel group with context parallelism), where gradients are summed and ZeRO shards
//   pp: same (dp, cp, tp), ordered by stage            embedding: when pp > 1, the first and last stage of the same
//   (dp, cp, tp), where the tied input/output embeddings' gradients are summed; MPI_COMM_NULL on the other stages and
//   when pp == 1.
// prev_stage_rank / next_stage_rank: ranks in `world` of the neighbouring pipeline stages of the same (dp, cp, tp),
// wrapping (next of the last stage is stage 0, as interleaving needs); MPI_PROC_NULL when pp == 1.
// Collective over `world`.
struct Groups {
  MPI_Comm tp = MPI_COMM_NULL, dp = MPI_COMM_NULL, pp = MPI_COMM_NULL, embedding = MPI_COMM_NULL;
  MPI_Comm cp = MPI_COMM_NULL, dp_cp = MPI_COMM_NULL;
  int rank = 0;  // in `world`
  Coords coords;
  // Rank 0 of the dp_cp group: the replica that speaks for its (tp, pp) piece (checkpoints, norms without ZeRO).
  bool first_replica() const { return coords.dp == 0 && coords.cp == 0; }
  int prev_stage_rank = MPI_PROC_NULL, next_stage_rank = MPI_PROC_NULL;

  explicit Groups(const Layout& layout, MPI_Comm world = MPI_COMM_WORLD);
  ~Groups();
  Groups(const Groups&) = delete;
  Groups& operator=(const Groups&) = delete;
};

}  // namespace cairn::parallel
