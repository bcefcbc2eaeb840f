// cairn-train's GPU plumbing beyond the kernel table and libcommon's cairn/gpu.h: NCCL gradient communication on its
// own stream, the model's tensor-parallel collectives over NCCL, and the pipeline's messages over NCCL. gpu_cuda.cpp
// implements it in CUDA builds; gpu_none.cpp in CPU-only builds, where the trainer never reaches it
// (find_backend("cuda") does not exist there).
#pragma once
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cairn/gpt.h"
#include "cairn/gpu.h"
#include "pipe_transport.h"

namespace cairn::train::gpu {

// Device binding, memory figures, bf16 switch and NVTX ranges are libcommon's (cairn/gpu.h), shared with cairn-eval.
using cairn::gpu::device_used_bytes;
using cairn::gpu::DeviceInfo;
using cairn::gpu::peak_allocated_bytes;
using cairn::gpu::range_pop;
using cairn::gpu::range_push;
using cairn::gpu::reset_peak_allocated;
using cairn::gpu::set_bf16_matmul;
inline DeviceInfo bind_rank_to_gpu() { return cairn::gpu::bind_rank_to_gpu("[train] backend"); }

// An NCCL communicator over the ranks of an MPI communicator (libcommon's bootstrap, cairn/gpu_nccl.h: NCCL ranks are
// its ranks) with its own non-blocking stream. Every call first makes
// that stream wait for the work already queued on the compute (default) stream, so a call right after a layer's
// backward overlaps the next layers.
class Nccl {
 public:
  explicit Nccl(MPI_Comm comm = MPI_COMM_WORLD);  // collective over comm
  ~Nccl();  // NOLINT(performance-trivially-destructible): gpu_cuda.cpp destroys the NCCL communicator
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
  // ZeRO-2/3 units, uneven pieces: piece r is counts[r] floats at displs[r] of a unit.
  // gather_pieces: every rank's `mine` (its piece) into piece r of `unit` on all ranks (one ncclBroadcast per rank in
  // one group). reduce_pieces: `unit` summed over the ranks, piece r into rank r's `mine` (one ncclReduce per rank).
  void gather_pieces(const float* mine, float* unit, const std::vector<size_t>& counts,
                     const std::vector<size_t>& displs);
  void reduce_pieces(const float* unit, float* mine, const std::vector<size_t>& counts,
                     const std::vector<size_t>& displs);
  // A point on the communication stream (everything queued on it so far), and the compute stream's later work waiting
  // for it on the device, so the host never blocks. Points live in a small ring of events: a point older than the
  // ring is waited for as a later one (never less).
  uint64_t mark();
  void compute_waits(uint64_t point);
  // The host waits until everything queued on the communication stream has finished; a communicator NCCL reports
  // failed (a peer gone, a network error) throws instead of waiting forever.
  void wait();
  // Waits for the communication stream, then reports the timed tensor-parallel calls since the last settle to their
  // on_call (nccl_tp_comm), oldest first.
  void settle_timings();
  // Unwinding after an error: ncclCommAbort now, so that operations still waiting for peers end before any device
  // memory they use is freed (cudaFree waits for every stream). Idempotent; the destructor then has nothing to do.
  void abort();

 private:
  friend gpt::TpComm nccl_tp_comm(Nccl& comm, std::function<void(double seconds, double end)> on_call);
  struct Impl;
  Impl* impl_;
};

// The model's tensor-parallel collectives (gpt::TpComm) over `comm`, the TP group's communicator (which must outlive
// the returned table and every model holding it; give the TP group its own Nccl, not the data-parallel one):
// all_reduce = ncclAllReduce (sum, in place), all_gather = ncclAllGather, reduce_scatter = ncclReduceScatter, and the
// context-parallel ring (ring_start = ncclSend to the next rank + ncclRecv from the previous one in one group,
// ring_wait = the compute stream waits for them), on device memory, counts as size_t (no INT_MAX limit). Each call runs
// on `comm`'s stream between two CUDA events: it starts after the work already queued on the compute (legacy default)
// stream and the compute stream's later work waits for it, so the model can use the result right after the call, and
// the host never waits.
// `on_call(seconds, end)` (optional) is told each call's time, measured on the device between timing events (no host
// synchronization, so the host keeps queueing kernels ahead): a collective from the moment the compute stream reached
// it to its end on the communication stream (waiting for the slowest peer included, like MPI's); a ring exchange, the
// part of it the compute stream waited for (its exposed part). `end` is the host clock (monotonic_seconds) at the
// call's end on the device. The reports come at Nccl::settle_timings(), which the trainer calls once per step.
gpt::TpComm nccl_tp_comm(Nccl& comm, std::function<void(double seconds, double end)> on_call);

// The pipeline's messages over NCCL, device memory to device memory (no host copy), for the ranks of `pp_group` (one
// pipeline: parallel::Groups::pp, ordered by stage). NCCL's point-to-point has no tags, so each direction and kind of
// message gets its own two-rank communicator and stream (this rank sends activations to the next stage and gradients
// to the previous one, and receives the reverse: up to four channels), and on each channel messages match in the
// order they are posted: the trainer checks that its schedule keeps that order (pipeline::in_order_mismatch) before
// it uses this. `wraps`: the last stage also sends activations to the first (interleaved schedules, v > 1).
//   send: the floats are copied (on the compute stream, so later kernels may overwrite the source) into a buffer of
//     the transport, which its channel's stream then sends; the host never waits.
//   recv: the host waits for the work queued so far on the compute stream, then for the message (the seconds of the
//     latter are returned: the pipeline wait), so the next kernel can read dst.
// A channel NCCL reports failed (a peer gone) throws instead of waiting forever. Collective over pp_group.
std::unique_ptr<PipeTransport> nccl_pipe(MPI_Comm pp_group, bool wraps);

}  // namespace cairn::train::gpu
