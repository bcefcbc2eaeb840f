// Pipeline-parallel schedules (Megatron 1F1B, plain and interleaved) as pure functions, their p2p peers
// and MPI tags, and a deterministic simulator that times them; cairn-train executes, cairn-plan compares.
#pragma once
#include <string>
#include <vector>

namespace cairn::pipeline {

// pp pipeline ranks, v model chunks (virtual stages) per rank, M micro-batches per step. Chunk c of
// rank p is virtual stage s = c*pp + p; stage 0 holds the embedding, stage pp*v-1 the loss. Activations
// flow from stage s to s+1 (owner (s+1) % pp), gradients from s+1 back to s.

enum class Op { Forward, Backward };

// One forward or backward of micro-batch `micro` on this rank's model chunk `chunk`.
struct Action {
  Op op = Op::Forward;
  int micro = 0;
  int chunk = 0;
  bool operator==(const Action&) const = default;
};

// "F3.1" / "B3.1" (micro 3, chunk 1), for messages and test output.
std::string to_string(const Action& a);

// Forwards rank `rank` runs before its first backward becomes due (Megatron's num_warmup_microbatches):
// v == 1: min(pp - rank - 1, M); v > 1: min((pp - rank - 1)*2 + (v - 1)*pp, M*v).
int warmup_forwards(int pp, int v, int rank, int M);

// The ordered actions rank `rank` executes in one training step, M*v forwards and M*v backwards.
//  pp == 1: per micro-batch, its forwards over chunks 0..v-1 then its backwards over v-1..0.
//  v == 1: 1F1B (PipeDream-flush): warm-up forwards, then forward/backward pairs, then cool-down backwards.
//  v > 1: Megatron's interleaved 1F1B; forward k runs chunk (k / pp) % v, backward k chunk
//         v-1 - (k / pp) % v, both on micro-batch (k / (pp*v))*pp + k % pp. Needs M % pp == 0.
// Throws UsageError for pp, v, M < 1, rank outside [0, pp), or M % pp != 0 with v > 1.
std::vector<Action> one_f_one_b(int pp, int v, int rank, int M);

// Virtual stage of (rank, chunk): chunk*pp + rank.
int virtual_stage(int pp, int rank, int chunk);

// Point-to-point traffic of one action: the rank it receives its input from and the rank its output goes
// to, with the MPI tags to use; -1 where there is none (forward of stage 0 and backward of the last stage
// receive nothing, forward of the last stage and backward of stage 0 send nothing). With pp == 1 and
// v > 1 the peer is the rank itself: the executor must hand the tensor over locally.
struct Peers {
  int recv_from = -1;
  int recv_tag = -1;
  int send_to = -1;
  int send_tag = -1;
};
Peers peers(int pp, int v, int rank, const Action& a);

// Tag of the message that action `a` on rank `rank` receives, keyed by the receiving side:
// (a.micro * pp*v + s) * 2 + d, with s = virtual_stage(pp, rank, a.chunk) and d = 0 for activations
// (received by a Forward), 1 for gradients (received by a Backward). It is unique per
// (micro, receiving stage, direction) over the whole step, so matching never depends on MPI's
// message ordering. A sender computes it from the action it feeds (peers() does this).
int message_tag(int pp, int v, int rank, const Action& a);
// Largest tag of a step, 2*M*pp*v - 1: the executor checks it against MPI_TAG_UB (>= 32767 by the
// standard, 2^31-1 in Open MPI). Throws UsageError when it does not fit in an int.
int max_message_tag(int pp, int v, int M);

// Transports without tags (NCCL's point-to-point) match the messages between two ranks in the order they are
// posted, one channel per direction and kind (activations, gradients). That is safe when, on every such channel,
// the sender's order of sends (its action list) equals the receiver's order of receives (its own list). Returns ""
// when that holds for the action lists `ranks` (one per pipeline rank), else the first channel and position that
// differ; the second form checks one_f_one_b(pp, v, *, M).
std::string in_order_mismatch(int pp, int v, const std::vector<std::vector<Action>>& ranks);
std::string in_order_mismatch(int pp, int v, int M);

// Result of simulate(): per rank, per action of its list, start and end times.
struct Simulation {
  bool deadlock = false;
  std::string stuck;                       // on deadlock: each rank's next action and what it waits for
  std::vector<std::vector<double>> start;  // [rank][index in that rank's list]; only finished ones
  std::vector<std::vector<double>> end;
  double makespan = 0;  // latest end over all ranks
  double busy = 0;      // sum of action durations over all ranks
};

// Runs every rank's list strictly in order; an action starts when its rank is free and its input exists:
// forward of stage s needs forward of s-1 (same micro-batch) to have ended, backward of s needs backward
// of s+1 and forward of s itself. Each forward takes tf, each backward tb (per chunk); communication is
// free and sends are non-blocking. Deterministic. `ranks.size()` must be pp; deadlock = no rank can
// proceed before all lists are done (also when an input is never produced).
Simulation simulate(int pp, int v, const std::vector<std::vector<Action>>& ranks, double tf, double tb);

// Idle share of the step from simulating one_f_one_b on all ranks: sum over ranks of
// (makespan - busy_rank) / (pp * makespan). For v == 1 this is (pp-1)/(M+pp-1). cairn-plan's bubble is
// relative to busy time instead ((pp-1)/(v*M)); convert with f / (1 - f).
double simulated_bubble_fraction(int pp, int v, int M, double tf, double tb);

}  // namespace cairn::pipeline
