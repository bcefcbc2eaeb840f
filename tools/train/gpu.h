// cairn-train's GPU plumbing beyond the kernel table and libcommon's cairn/gpu.h: NCCL gradient communication on its
// own stream. gpu_cuda.cpp implements it in CUDA builds; gpu_none.cpp in CPU-only builds, where
// the trainer never reaches it (find_backend("cuda") does not exist there).
#pragma once
#include <mpi.h>

#include <cstddef>
#include <string>

#include "cairn/gpu.h"

namespace cairn::train::gpu {

// Device binding, memory figures, bf16 switch and NVTX ranges are libcommon's (cairn/gpu.h), shared with cairn-eval.
using cairn::gpu::DeviceInfo;
using cairn::gpu::device_used_bytes;
using cairn::gpu::peak_allocated_bytes;
using cairn::gpu::range_pop;
using cairn::gpu::range_push;
using cairn::gpu::reset_peak_allocated;
using cairn::gpu::set_bf16_matmul;
inline DeviceInfo bind_rank_to_gpu() { return cairn::gpu::bind_rank_to_gpu("[train] backend"); }

// An NCCL communicator over the ranks of an MPI communicator (bootstrapped over it: ncclGetUniqueId on its rank 0,
// MPI_Bcast, ncclCommInitRank; NCCL ranks are its ranks) with its own non-blocking stream. Every call first makes
// that stream wait for the work already queued on the compute (default) stream, so a call right after a layer's
// backward overlaps the next layers.
class Nccl {
 public:
  explicit Nccl(MPI_Comm comm = MPI_COMM_WORLD);  // collective over comm
  ~Nccl();
  Nccl(const Nccl&) = delete;
  Nccl& operator=(const Nccl&) = delete;

  // buf[0, count) summed over the ranks, in place.
  void all_reduce(float* buf, size_t count);
  // ZeRO-1 gradient bucket: g[lo, hi) summed over ranks, each rank receiving the part inside its shard
  // [r*shard, min(N, (r+1)*shard)) at shard_out[i - r*shard]. Uneven pieces, so one ncclReduce per owning rank in
  // one NCCL group (a reduce-scatter with per-rank counts, like MPI_Ireduce_scatter).
  void reduce_to_shards(const float* g, size_t lo, size_t hi, size_t shard, size_t N, float* shard_out);
  // ZeRO-1 parameters: every rank's shard of p[0, N) to all ranks, in place (ncclAllGather when N divides evenly,
  // else one ncclBroadcast per rank in a group).
  void all_gather_shards(float* p, size_t shard, size_t N);
  // The host waits until everything queued on the communication stream has finished.
  void wait();

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace cairn::train::gpu
