// cairn-train's GPU plumbing beyond the kernel table: one GPU per rank, NCCL gradient communication on its own
// stream, device memory figures. gpu_cuda.cpp implements it in CUDA builds; gpu_none.cpp in CPU-only builds, where
// the trainer never reaches it (find_backend("cuda") does not exist there).
#pragma once
#include <cstddef>
#include <string>

namespace cairn::train::gpu {

struct DeviceInfo {
  int ordinal = -1;           // CUDA device index within this process's visible devices
  std::string name;           // e.g. "NVIDIA H100 80GB HBM3"
  std::string pci_bus_id;
  double total_gib = 0;
  double peak_tflops_fp32 = 0;  // non-tensor-core fp32 peak from a table of known GPUs; 0 if unknown
  double peak_tflops_bf16 = 0;  // dense bf16 tensor-core peak from the same table; 0 if unknown
};

// Makes GPU (local_rank % visible GPUs) current for this rank; must run before the CUDA backend allocates.
// Collective over MPI_COMM_WORLD: throws UsageError naming the ranks when two ranks of a node would share a GPU.
DeviceInfo bind_rank_to_gpu();

// High-water mark of device memory allocated through cairn's CUDA backend (what PyTorch calls
// max_memory_allocated), and device memory in use on the current GPU as cudaMemGetInfo sees it (context, cuBLAS
// and NCCL buffers included).
size_t peak_allocated_bytes();
size_t device_used_bytes();
void reset_peak_allocated();  // the high-water mark restarts at what is allocated now

// precision = "bf16": the CUDA backend's GEMMs take bf16 copies of their inputs (fp32 accumulation and output).
void set_bf16_matmul(bool on);

// NVTX ranges (Nsight Systems timelines); free when no profiler is attached.
void range_push(const char* name);
void range_pop();

// An NCCL communicator over all ranks (bootstrapped over MPI: ncclGetUniqueId on rank 0, MPI_Bcast,
// ncclCommInitRank) with its own non-blocking stream. Every call first makes that stream wait for the work already
// queued on the compute (default) stream, so a call right after a layer's backward overlaps the next layers.
class Nccl {
 public:
  Nccl();  // collective
  ~Nccl();
  Nccl(const Nccl&) = delete;
  Nccl& operator=(const Nccl&) = delete;

  // buf[0, count) summed over all ranks, in place.
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
