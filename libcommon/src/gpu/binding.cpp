// Rank-to-GPU binding (cairn/gpu.h bind_rank_to_gpu) for every tool that drives a GPU: the local-rank rule of
// cairn/device_binding.h, then one check that no two ranks share a physical GPU. A file of its own, without the
// kernels' CUDA backend, so cairn-sweep links it without pulling in the backend (and cuBLAS).
#include <map>
#include <string>
#include <vector>

#include "cairn/device_binding.h"
#include "cairn/error.h"
#include "cairn/gpu.h"
#include "cairn/log.h"
#include "cairn/mpi.h"

#ifdef CAIRN_HAVE_CUDA_BACKEND
#include <cuda_runtime.h>

#include "cairn/gpu_check.h"
#include "cairn/kernels/cuda_probe.h"
#endif

namespace cairn::gpu {

#ifdef CAIRN_HAVE_CUDA_BACKEND
namespace {

// Peaks (TFLOP/s, dense) of GPUs people train on, matched on the device name in this order (longer names first);
// fp32 is the CUDA-core rate, bf16 the tensor-core rate without sparsity.
struct KnownPeak {
  const char* name_part;
  double fp32, bf16;
};
constexpr KnownPeak kKnownPeaks[] = {
    {"GH200", 67.0, 989.4}, {"H200", 67.0, 989.4}, {"H100 PCIe", 51.2, 756.0}, {"H100 NVL", 60.0, 835.0},
    {"H100", 67.0, 989.4},  {"H800", 67.0, 989.4}, {"A100", 19.5, 312.0},      {"A800", 19.5, 312.0},
    {"L40S", 91.6, 362.1},  {"L40", 90.5, 181.0},  {"B200", 80.0, 2250.0},     {"A10G", 31.2, 70.0},
    {"L4", 30.3, 121.0},
};

DeviceInfo describe_device(int ordinal) {
  DeviceInfo info;
  info.ordinal = ordinal;
  cudaDeviceProp prop{};
  CAIRN_CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal));
  char bus[64] = {0};
  CAIRN_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus - 1, ordinal));
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
  return info;
}

// One GPU per rank: Slurm may give each rank its own CUDA_VISIBLE_DEVICES (every rank sees device 0), so compare
// physical devices (host + PCI bus id), not ordinals. Two ranks on one GPU would run, slowly and with twice the
// memory, or fail inside NCCL with a less helpful message.
void check_one_rank_per_gpu(const std::string& what, const DeviceInfo& info, MPI_Comm comm, int visible) {
  const mpi::Topology& topo = mpi::topology();
  const std::vector<std::string> all = mpi::allgather_strings(topo.host + " " + info.pci_bus_id, comm);
  std::map<std::string, int> first_rank;
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    auto [it, fresh] = first_rank.emplace(all[r], r);
    if (!fresh) {
      throw UsageError(strprintf("%s: ranks %d and %d would share GPU %s; cairn uses one GPU per rank, so start at "
                                 "most as many ranks per node as it has GPUs (this rank sees %d, node has %d ranks)",
                                 what.c_str(), it->second, r, all[r].c_str(), visible, topo.local_size));
    }
  }
}

}  // namespace

DeviceInfo bind_rank_to_gpu(const char* what, MPI_Comm comm, int local_rank) {
  // The kernels' one probe (cairn/kernels/cuda_probe.h): no GPU or driver is a usage error (exit 2, as
  // device_for_local_rank says for zero devices), a driver that fails a runtime failure (exit 1), both with the CUDA
  // error and the driver/runtime versions.
  const kernels::CudaProbe& cuda = kernels::probe_cuda();
  if (cuda.state == kernels::CudaAvailability::Broken)
    throw RuntimeError(strprintf("%s: %s", what, cuda.reason.c_str()));
  if (!cuda.usable()) throw UsageError(strprintf("%s: %s", what, cuda.reason.c_str()));
  const int count = cuda.devices;
  const int ordinal = device_for_local_rank(local_rank, count, what);
  CAIRN_CUDA_CHECK(cudaSetDevice(ordinal));
  const DeviceInfo info = describe_device(ordinal);
  check_one_rank_per_gpu(what, info, comm, count);
  CAIRN_LOG_DEBUG("rank bound to GPU %d (%s, %s, %.1f GiB)", info.ordinal, info.name.c_str(), info.pci_bus_id.c_str(),
                  info.total_gib);
  return info;
}

#else  // no CUDA in this build: tools reject GPU backends before they get here; the binding says why anyway.

DeviceInfo bind_rank_to_gpu(const char* what, MPI_Comm, int) {
  throw UsageError(strprintf("%s: this build has no CUDA (configure with -DCAIRN_CUDA=ON)", what));
}

#endif

DeviceInfo bind_rank_to_gpu(const char* config_key) {
  const std::string what = strprintf("%s = \"cuda\"", config_key);
  return bind_rank_to_gpu(what.c_str(), MPI_COMM_WORLD, mpi::topology().local_rank);
}

}  // namespace cairn::gpu
