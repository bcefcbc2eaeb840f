// cairn-train's data-parallel gradient communication: bucketed all-reduce (or ZeRO-1 reduce-scatter into this
// rank's shard) overlapped with backward, and the all-gather of the updated parameter shards; over MPI or NCCL.
#pragma once
#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "cairn/kernels/backend.h"
#include "gpu.h"
#include "step_trace.h"

namespace cairn::train {

// How the flat parameter range [0, N) is split over a data-parallel group: rank r owns [begin(r), end(r)) and
// updates the optimizer state of [lo, hi) = its own. shard == 0: not split (no ZeRO, or a group of one), lo = 0, hi =
// N.
struct Shards {
  size_t N = 0, shard = 0, lo = 0, hi = 0;
  int rank = 0, size = 1;  // in the group's communicator

  // ZeRO-1 (zero) splits into ceil(N / size) pieces when the group has more than one rank.
  static Shards over(MPI_Comm comm, size_t N, bool zero);
  size_t begin(int r) const { return std::min(N, shard * static_cast<size_t>(r)); }
  size_t end(int r) const { return std::min(N, begin(r) + shard); }
  size_t count() const { return hi - lo; }
};

// Gradient communication of one data-parallel group, used by the step:
//   ready(first, count) each time the model reports a parameter range's gradient final during the last micro-batch's
//     backward: adjacent ranges merge into a bucket, launched (non-blocking) once it reaches bucket_bytes;
//   finish() after backward: launches the rest, waits; then the gradient (shard == 0: grads[0, N) on every rank) or
//     this rank's shard of it (shard_grads[0, hi - lo), or grads[lo, hi) itself when shard_grads is null: MPI
//     reduce-scatters in place) is summed over the group;
//   all_gather_params(params) after the optimizer updated [lo, hi) (ZeRO-1 only; returns the seconds it took).
// Buckets and the all-gather appear on the trace's "comm" row. Sums, not means: the optimizer scales.
class GradSync {
 public:
  GradSync(const Shards& shards, float* grads, float* shard_grads, double bucket_bytes, StepTrace& trace)
      : sh_(shards), grads_(grads), shard_grads_(shard_grads), bucket_bytes_(bucket_bytes), trace_(trace) {}
  virtual ~GradSync() = default;
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;

  const Shards& shards() const { return sh_; }
  // Unwinding after an error: stop the transport's outstanding operations (NCCL: abort the communicator) before the
  // buffers they use are freed.
  virtual void abort() {}
  void ready(size_t first, size_t count);
  void finish();
  double all_gather_params(float* params);

 protected:
  // What a transport implements. launch: start summing grads_[lo, hi) over the group, in place (shard == 0) or into
  // shard_grads_ (the part inside this rank's shard). poll: let launched work progress. wait: until all launched work
  // is done. gather: params' shards to every rank, in place, blocking. before_gather: settle what must not count as
  // all-gather time.
  virtual void launch(size_t lo, size_t hi) = 0;
  virtual void poll() {}
  virtual void wait() = 0;
  virtual void gather(float* params) = 0;
  virtual void before_gather() {}

  Shards sh_;
  float* grads_;
  float* shard_grads_;

 private:
  void flush_bucket();

  double bucket_bytes_;
  StepTrace& trace_;
  size_t pend_lo_ = 0, pend_hi_ = 0, covered_ = 0;
  std::vector<std::pair<double, size_t>> bucket_starts_;  // launch time and size of each bucket (trace)
};

// MPI (host buffers): MPI_Iallreduce / MPI_Ireduce_scatter per bucket, MPI_Allgatherv for the parameters.
// NCCL (device buffers, backend "cuda", `nccl` given): that communicator of the same group (one per group and rank,
// shared by every chunk: each NCCL communicator holds its own device buffers), on its stream behind the compute
// stream. comm: the data-parallel group (its rank and size are those of shards).
std::unique_ptr<GradSync> make_grad_sync(gpu::Nccl* nccl, MPI_Comm comm, const kernels::Backend& backend,
                                         const Shards& shards, float* grads, float* shard_grads, double bucket_bytes,
                                         StepTrace& trace);

}  // namespace cairn::train
