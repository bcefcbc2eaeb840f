// cairn/gpu.h: rank-to-GPU binding and device figures, with CUDA when the kernels were built with it
// (CAIRN_HAVE_CUDA_BACKEND), otherwise stubs that say the build has no CUDA.
#include "cairn/gpu.h"

#include <map>
#include <vector>

#include "cairn/device_binding.h"
#include "cairn/error.h"
#include "cairn/log.h"
#include "cairn/mpi.h"

#ifdef CAIRN_HAVE_CUDA_BACKEND
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include "cairn/kernels/cuda.h"
#endif

namespace cairn::gpu {

#ifdef CAIRN_HAVE_CUDA_BACKEND
namespace {

void cuda_check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw RuntimeError(strprintf("CUDA: %s: %s", what, cudaGetErrorString(err)));
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

DeviceInfo bind_rank_to_gpu(const char* config_key) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count <= 0) {
    cudaGetLastError();  // not sticky: clear it
    throw UsageError(strprintf("%s = \"cuda\": no CUDA device is visible to this rank", config_key));
  }
  const mpi::Topology& topo = mpi::topology();
  DeviceInfo info;
  info.ordinal = device_for_local_rank(topo.local_rank, count, config_key);
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
  // compare physical devices (host + PCI bus id), not ordinals. Two ranks on one GPU would run, slowly and with
  // twice the memory, or fail inside NCCL with a less helpful message.
  std::vector<std::string> all = mpi::allgather_strings(topo.host + " " + info.pci_bus_id);
  std::map<std::string, int> first_rank;
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    auto [it, fresh] = first_rank.emplace(all[r], r);
    if (!fresh) {
      throw UsageError(strprintf("%s = \"cuda\": ranks %d and %d would share GPU %s; cairn uses one GPU per rank, "
                                 "so start at most as many ranks per node as it has GPUs (this rank sees %d, node "
                                 "has %d ranks)",
                                 config_key, it->second, r, all[r].c_str(), count, topo.local_size));
    }
  }
  CAIRN_LOG_DEBUG("rank bound to GPU %d (%s, %s, %.1f GiB)", info.ordinal, info.name.c_str(), info.pci_bus_id.c_str(),
                  info.total_gib);
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

#else  // no CUDA in this build: tools reject backend = "cuda" before they get here; the binding says why anyway.

DeviceInfo bind_rank_to_gpu(const char* config_key) {
  throw UsageError(strprintf("%s = \"cuda\": this build has no CUDA (configure with -DCAIRN_CUDA=ON)", config_key));
}
size_t peak_allocated_bytes() { return 0; }
size_t device_used_bytes() { return 0; }
void reset_peak_allocated() {}
void set_bf16_matmul(bool) {}
void range_push(const char*) {}
void range_pop() {}

#endif

}  // namespace cairn::gpu
