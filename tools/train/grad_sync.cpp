// cairn-train's gradient communication (grad_sync.h): bucketing, and its MPI and NCCL transports.
#include "grad_sync.h"

#include <algorithm>
#include <climits>

#include "cairn/error.h"
#include "cairn/log.h"
#include "cairn/mpi.h"
#include "gpu.h"

namespace cairn::train {

Shards Shards::over(MPI_Comm comm, size_t N, bool zero) {
  Shards s;
  s.N = N;
  mpi::check(MPI_Comm_rank(comm, &s.rank), "MPI_Comm_rank");
  mpi::check(MPI_Comm_size(comm, &s.size), "MPI_Comm_size");
  if (zero && s.size > 1) {
    s.shard = (N + s.size - 1) / s.size;
    s.lo = s.begin(s.rank);
    s.hi = s.end(s.rank);
  } else {
    s.lo = 0;
    s.hi = N;
  }
  return s;
}

void GradSync::flush_bucket() {
  if (pend_hi_ <= pend_lo_) return;
  size_t lo = pend_lo_, hi = pend_hi_;
  pend_lo_ = pend_hi_ = 0;
  launch(lo, hi);
  bucket_starts_.emplace_back(monotonic_seconds(), hi - lo);
}

void GradSync::ready(size_t first, size_t count) {
  covered_ += count;
  if (pend_hi_ > pend_lo_ && (first + count == pend_lo_ || first == pend_hi_)) {
    pend_lo_ = std::min(pend_lo_, first);
    pend_hi_ = std::max(pend_hi_, first + count);
  } else {
    flush_bucket();
    pend_lo_ = first;
    pend_hi_ = first + count;
  }
  if (static_cast<double>(pend_hi_ - pend_lo_) * sizeof(float) >= bucket_bytes_) flush_bucket();
  poll();
}

void GradSync::finish() {
  flush_bucket();
  if (covered_ != sh_.N) {
    // The model did not report every range (or none): reduce what was not covered in one go.
    if (covered_ != 0) {
      throw RuntimeError(strprintf("model reported gradients for %zu of %zu parameters", covered_, sh_.N));
    }
    pend_lo_ = 0;
    pend_hi_ = sh_.N;
    flush_bucket();
  }
  wait();
  // Each bucket on the trace's "comm" row, from launch to the end of the wait (an upper bound).
  double done = monotonic_seconds();
  const char* what = sh_.shard > 0 ? "reduce-scatter bucket" : "all-reduce bucket";
  for (const auto& [t0, n] : bucket_starts_) trace_.event(what, "comm", t0, done, {{"floats", n}}, 1);
  bucket_starts_.clear();
  covered_ = 0;
}

double GradSync::all_gather_params(float* params) {
  if (sh_.shard == 0) return 0.0;
  before_gather();
  double t0 = monotonic_seconds();
  gather(params);
  trace_.event("all-gather params", "comm", t0, monotonic_seconds(), {{"floats", sh_.N}}, 1);
  return monotonic_seconds() - t0;
}

namespace {

class MpiGradSync final : public GradSync {
 public:
  MpiGradSync(MPI_Comm comm, const Shards& sh, float* grads, float* shard_grads, double bucket_bytes, StepTrace& trace)
      : GradSync(sh, grads, shard_grads, bucket_bytes, trace), comm_(comm) {}

 private:
  // MPI counts are ints: a bucket holding one tensor of 2^31 gradients or more (a 256k x 18k embedding) goes as
  // several calls of at most kMaxCall elements, each the same collective over its part of the range.
  static constexpr size_t kMaxCall = size_t{1} << 30;
  void launch(size_t lo, size_t hi) override {
    for (size_t a = lo; a < hi; a += kMaxCall) launch_part(a, std::min(hi, a + kMaxCall));
  }
  void launch_part(size_t lo, size_t hi) {
    MPI_Request req;
    float* g = grads_;
    if (sh_.shard == 0) {
      mpi::check(MPI_Iallreduce(MPI_IN_PLACE, g + lo, static_cast<int>(hi - lo), MPI_FLOAT, MPI_SUM, comm_, &req),
                 "MPI_Iallreduce");
    } else {
      // ZeRO-1: each rank receives the summed part of [lo, hi) that falls in its shard.
      std::vector<int> counts(sh_.size);
      for (int r = 0; r < sh_.size; ++r) {
        size_t a = std::max(lo, sh_.begin(r)), b = std::min(hi, sh_.end(r));
        counts[r] = b > a ? static_cast<int>(b - a) : 0;
      }
      size_t mine = std::max(lo, sh_.lo);
      if (shard_grads_) {
        float* recv = shard_grads_ + (counts[sh_.rank] > 0 ? mine - sh_.lo : 0);
        mpi::check(MPI_Ireduce_scatter(g + lo, recv, counts.data(), MPI_FLOAT, MPI_SUM, comm_, &req),
                   "MPI_Ireduce_scatter");
      } else {
        // In place, as Megatron's distributed optimizer does (no second buffer for the shard): MPI leaves this
        // rank's sum at the start of the bucket; wait() moves it to where the shard lies in the flat gradient.
        mpi::check(MPI_Ireduce_scatter(MPI_IN_PLACE, g + lo, counts.data(), MPI_FLOAT, MPI_SUM, comm_, &req),
                   "MPI_Ireduce_scatter (in place)");
        if (counts[sh_.rank] > 0 && mine != lo) moves_.push_back({lo, mine, static_cast<size_t>(counts[sh_.rank])});
      }
    }
    requests_.push_back(req);
  }
  void poll() override {
    // Open MPI progresses non-blocking collectives only inside MPI calls: poke it.
    if (!requests_.empty()) {
      int done = 0;
      MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &done, MPI_STATUSES_IGNORE);
    }
  }
  void wait() override {
    if (!requests_.empty()) {
      mpi::check(MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
    }
    requests_.clear();
    for (const Move& m : moves_) std::memmove(grads_ + m.to, grads_ + m.from, m.count * sizeof(float));
    moves_.clear();
  }
  void gather(float* p) override {
    if (sh_.end(sh_.size - 1) > static_cast<size_t>(INT_MAX)) {
      // Displacements past 2^31 have no int: each rank's shard is broadcast from it, in parts of kMaxCall.
      for (int r = 0; r < sh_.size; ++r)
        for (size_t a = sh_.begin(r); a < sh_.end(r); a += kMaxCall)
          mpi::check(MPI_Bcast(p + a, static_cast<int>(std::min(sh_.end(r) - a, kMaxCall)), MPI_FLOAT, r, comm_),
                     "MPI_Bcast");
      return;
    }
    std::vector<int> counts(sh_.size), displs(sh_.size);
    for (int r = 0; r < sh_.size; ++r) {
      counts[r] = static_cast<int>(sh_.end(r) - sh_.begin(r));
      displs[r] = static_cast<int>(sh_.begin(r));
    }
    mpi::check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, p, counts.data(), displs.data(), MPI_FLOAT, comm_),
               "MPI_Allgatherv");
  }

  MPI_Comm comm_;
  std::vector<MPI_Request> requests_;
  struct Move {
    size_t from, to, count;
  };
  std::vector<Move> moves_;  // in-place reduce-scatter results still at their bucket's start
};

class NcclGradSync final : public GradSync {
 public:
  NcclGradSync(gpu::Nccl& nccl, const kernels::Backend& backend, const Shards& sh, float* grads, float* shard_grads,
               double bucket_bytes, StepTrace& trace)
      : GradSync(sh, grads, shard_grads, bucket_bytes, trace), backend_(backend), nccl_(nccl) {}

 private:
  // Device memory: NCCL on its own stream, queued behind the backward kernels that produced the bucket.
  void launch(size_t lo, size_t hi) override {
    if (sh_.shard == 0) nccl_.all_reduce(grads_ + lo, hi - lo);
    else nccl_.reduce_to_shards(grads_, lo, hi, sh_.shard, sh_.N, shard_grads_);
  }
  void wait() override { nccl_.wait(); }
  void abort() override { nccl_.abort(); }
  void before_gather() override { backend_.synchronize(); }  // the AdamW kernels count as optimizer time
  void gather(float* p) override {
    nccl_.all_gather_shards(p, sh_.shard, sh_.N);  // after the AdamW kernels just queued
    nccl_.wait();
  }

  const kernels::Backend& backend_;
  gpu::Nccl& nccl_;  // the trainer's one communicator of the group, shared by every chunk
};

}  // namespace

std::unique_ptr<GradSync> make_grad_sync(gpu::Nccl* nccl, MPI_Comm comm, const kernels::Backend& backend,
                                         const Shards& shards, float* grads, float* shard_grads, double bucket_bytes,
                                         StepTrace& trace) {
  if (nccl) return std::make_unique<NcclGradSync>(*nccl, backend, shards, grads, shard_grads, bucket_bytes, trace);
  return std::make_unique<MpiGradSync>(comm, shards, grads, shard_grads, bucket_bytes, trace);
}

}  // namespace cairn::train
