// CUDA/NCCL implementation of gpu.h (compiled only when the build has CUDA): device binding by local rank, the
// NCCL communicator and its stream, device memory figures.
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <exception>
#include <map>
#include <vector>

#include "cairn/error.h"
#include "cairn/kernels/cuda.h"
#include "cairn/log.h"
#include "cairn/mpi.h"
#include "gpu.h"

namespace cairn::train::gpu {

namespace {

void cuda_check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw RuntimeError(strprintf("CUDA: %s: %s", what, cudaGetErrorString(err)));
}

void nccl_check(ncclResult_t r, const char* what, ncclComm_t comm = nullptr) {
  if (r == ncclSuccess) return;
  const char* detail = comm ? ncclGetLastError(comm) : nullptr;
  throw RuntimeError(strprintf("NCCL: %s: %s%s%s", what, ncclGetErrorString(r), detail && *detail ? ": " : "",
                               detail ? detail : ""));
}

// Peaks (TFLOP/s, dense) of GPUs people train on, matched on the device name in this order (longer names first);
// fp32 is the CUDA-core rate, bf16 the tensor-core rate without sparsity.
struct KnownPeak {
  const char* name_part;
  double fp32, bf16;
};
constexpr KnownPeak kKnownPeaks[] = {
    {"GH200", 67.0, 989.4}, {"H200", 67.0, 989.4},   {"H100 PCIe", 51.2, 756.0}, {"H100 NVL", 60.0, 835.0},
    {"H100", 67.0, 989.4},  {"H800", 67.0, 989.4},   {"A100", 19.5, 312.0},      {"A800", 19.5, 312.0},
    {"L40S", 91.6, 362.1},  {"L40", 90.5, 181.0},    {"B200", 80.0, 2250.0},     {"A10G", 31.2, 70.0},
    {"L4", 30.3, 121.0},
};

}  // namespace

DeviceInfo bind_rank_to_gpu() {
  int count = 0;
  cuda_check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (count <= 0) throw UsageError("[train] backend = \"cuda\": no CUDA device is visible to this rank");
  const mpi::Topology& topo = mpi::topology();
  DeviceInfo info;
  info.ordinal = topo.local_rank % count;
  cuda_check(cudaSetDevice(info.ordinal), "cudaSetDevice");
  cudaDeviceProp prop{};
  cuda_check(cudaGetDeviceProperties(&prop, info.ordinal), "cudaGetDeviceProperties");
  char bus[64] = {0};
  cuda_check(cudaDeviceGetPCIBusId(bus, sizeof bus - 1, info.ordinal), "cudaDeviceGetPCIBusId");
  info.name = prop.name;
  info.pci_bus_id = bus;
  info.total_gib = static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0);
  for (const KnownPeak& k : kKnownPeaks) {
    if (info.name.find(k.name_part) != std::string::npos) {
      info.peak_tflops_fp32 = k.fp32;
      info.peak_tflops_bf16 = k.bf16;
      break;
    }
  }
  // One GPU per rank: Slurm may give each rank its own CUDA_VISIBLE_DEVICES (every rank sees device 0), so
  // compare physical devices (host + PCI bus id), not ordinals. NCCL refuses two ranks on one GPU anyway, with a
  // less helpful message.
  std::vector<std::string> all = mpi::allgather_strings(topo.host + " " + info.pci_bus_id);
  std::map<std::string, int> first_rank;
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    auto [it, fresh] = first_rank.emplace(all[r], r);
    if (!fresh) {
      throw UsageError(strprintf("ranks %d and %d would share GPU %s: cairn-train uses one GPU per rank; start at "
                                 "most as many ranks per node as it has GPUs (this rank sees %d, node has %d ranks)",
                                 it->second, r, all[r].c_str(), count, topo.local_size));
    }
  }
  return info;
}

size_t peak_allocated_bytes() { return kernels::cuda_peak_allocated_bytes(); }
void reset_peak_allocated() { kernels::cuda_reset_peak_allocated_bytes(); }

void set_bf16_matmul(bool on) { kernels::cuda_set_bf16_matmul(on); }

void range_push(const char* name) { nvtxRangePushA(name); }
void range_pop() { nvtxRangePop(); }

size_t device_used_bytes() {
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return 0;
  return total_b - free_b;
}

struct Nccl::Impl {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t compute_done = nullptr;
  int rank = 0, world = 1;

  // The communication stream waits (on the device, not the host) for what is queued on the legacy default
  // stream, where the CUDA backend runs every kernel.
  void after_compute() {
    cuda_check(cudaEventRecord(compute_done, cudaStreamLegacy), "cudaEventRecord");
    cuda_check(cudaStreamWaitEvent(stream, compute_done, 0), "cudaStreamWaitEvent");
  }
};

Nccl::Nccl() : impl_(new Impl) {
  Impl& m = *impl_;
  try {
    m.rank = mpi::rank();
    m.world = mpi::size();
    ncclUniqueId id{};
    if (m.rank == 0) nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    mpi::check(MPI_Bcast(&id, static_cast<int>(sizeof id), MPI_BYTE, 0, MPI_COMM_WORLD), "MPI_Bcast (NCCL id)");
    // Non-blocking: kernels on the legacy default stream must not implicitly wait for communication.
    cuda_check(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    cuda_check(cudaEventCreateWithFlags(&m.compute_done, cudaEventDisableTiming), "cudaEventCreate");
    nccl_check(ncclCommInitRank(&m.comm, m.world, id, m.rank), "ncclCommInitRank");
  } catch (...) {
    if (m.compute_done) cudaEventDestroy(m.compute_done);
    if (m.stream) cudaStreamDestroy(m.stream);
    delete impl_;
    throw;
  }
}

Nccl::~Nccl() {
  Impl& m = *impl_;
  if (m.comm) {
    // Unwinding from an error (maybe on another rank): do not wait for peers that may never come.
    if (std::uncaught_exceptions() > 0) {
      ncclCommAbort(m.comm);
    } else {
      cudaStreamSynchronize(m.stream);
      ncclCommDestroy(m.comm);
    }
  }
  if (m.compute_done) cudaEventDestroy(m.compute_done);
  if (m.stream) cudaStreamDestroy(m.stream);
  delete impl_;
}

void Nccl::all_reduce(float* buf, size_t count) {
  if (count == 0) return;
  impl_->after_compute();
  nccl_check(ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, impl_->comm, impl_->stream), "ncclAllReduce",
             impl_->comm);
}

void Nccl::reduce_to_shards(const float* g, size_t lo, size_t hi, size_t shard, size_t N, float* shard_out) {
  if (hi <= lo) return;
  Impl& m = *impl_;
  m.after_compute();
  nccl_check(ncclGroupStart(), "ncclGroupStart");
  for (int r = 0; r < m.world; ++r) {
    size_t s0 = std::min(N, shard * static_cast<size_t>(r)), s1 = std::min(N, s0 + shard);
    size_t a = std::max(lo, s0), b = std::min(hi, s1);
    if (a >= b) continue;
    // recvbuff is only written on the root; other ranks pass their own (valid, untouched) shard buffer.
    float* recv = r == m.rank ? shard_out + (a - s0) : shard_out;
    ncclResult_t rc = ncclReduce(g + a, recv, b - a, ncclFloat32, ncclSum, r, m.comm, m.stream);
    if (rc != ncclSuccess) {
      ncclGroupEnd();
      nccl_check(rc, "ncclReduce", m.comm);
    }
  }
  nccl_check(ncclGroupEnd(), "ncclGroupEnd (reduce to shards)", m.comm);
}

void Nccl::all_gather_shards(float* p, size_t shard, size_t N) {
  Impl& m = *impl_;
  if (N == 0) return;
  m.after_compute();
  if (shard * static_cast<size_t>(m.world) == N) {
    nccl_check(ncclAllGather(p + shard * static_cast<size_t>(m.rank), p, shard, ncclFloat32, m.comm, m.stream),
               "ncclAllGather", m.comm);
    return;
  }
  nccl_check(ncclGroupStart(), "ncclGroupStart");
  for (int r = 0; r < m.world; ++r) {
    size_t a = std::min(N, shard * static_cast<size_t>(r)), b = std::min(N, a + shard);
    if (a >= b) continue;
    ncclResult_t rc = ncclBroadcast(p + a, p + a, b - a, ncclFloat32, r, m.comm, m.stream);
    if (rc != ncclSuccess) {
      ncclGroupEnd();
      nccl_check(rc, "ncclBroadcast", m.comm);
    }
  }
  nccl_check(ncclGroupEnd(), "ncclGroupEnd (all-gather shards)", m.comm);
}

void Nccl::wait() { cuda_check(cudaStreamSynchronize(impl_->stream), "cudaStreamSynchronize (NCCL stream)"); }

}  // namespace cairn::train::gpu
