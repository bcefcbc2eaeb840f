// NCCL backend of cairn-sweep: one GPU per rank and the NCCL communicator over the tier's MPI communicator, both
// through libcommon's GPU area (cairn/gpu.h binding, cairn/gpu_nccl.h bootstrap), data filled and checked by kernels
// on the device.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

#include "backend.h"
#include "cairn/device_binding.h"
#include "cairn/error.h"
#include "cairn/gpu.h"
#include "cairn/gpu_check.h"
#include "cairn/gpu_nccl.h"
#include "cairn/kernels/cuda_probe.h"

namespace cairn::sweep {

struct BackendComm {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  int device = 0, rank = 0, size = 1;
  unsigned long long* wrong_counter = nullptr;  // device scalar for check kernels
};

namespace {

bool nccl_supports_type(DataType) { return true; }
bool nccl_supports_op(RedOp op) { return op != RedOp::None; }

// The kernels' one CUDA probe (cairn/kernels/cuda_probe.h): 0 devices when CUDA is absent or fails, and why.
int nccl_visible_devices() { return kernels::probe_cuda().devices; }
std::string nccl_device_problem(bool* broken) {
  const kernels::CudaProbe& cuda = kernels::probe_cuda();
  if (broken) *broken = cuda.state == kernels::CudaAvailability::Broken;
  return cuda.reason;
}

ncclDataType_t nccl_type(DataType t) {
  switch (t) {
    case DataType::Int32: return ncclInt32;
    case DataType::Float64: return ncclFloat64;
    case DataType::Float16: return ncclFloat16;
    case DataType::BFloat16: return ncclBfloat16;
    default: return ncclFloat32;
  }
}
ncclRedOp_t nccl_op(RedOp op) {
  switch (op) {
    case RedOp::Max: return ncclMax;
    case RedOp::Min: return ncclMin;
    case RedOp::Avg: return ncclAvg;
    case RedOp::Prod: return ncclProd;
    default: return ncclSum;
  }
}

BackendComm* nccl_open(MPI_Comm comm, int local_rank) {
  // The binding every tool uses (cairn/gpu.h): local rank modulo the visible devices, so that
  // `srun --gpus-per-task=1` (each rank sees one GPU) works, and no two ranks of the tier on one physical GPU.
  const gpu::DeviceInfo dev = gpu::bind_rank_to_gpu("backend nccl", comm, local_rank);
  auto bc = std::make_unique<BackendComm>();
  bc->device = dev.ordinal;
  MPI_Comm_rank(comm, &bc->rank);
  MPI_Comm_size(comm, &bc->size);
  bc->comm = gpu::nccl_comm_from_mpi(comm);
  try {
    CAIRN_CUDA_CHECK(cudaStreamCreateWithFlags(&bc->stream, cudaStreamNonBlocking));
    CAIRN_CUDA_CHECK(cudaMalloc(&bc->wrong_counter, sizeof(unsigned long long)));
  } catch (...) {
    // The communicator exists already: abort it (and drop the stream) rather than leak it with the failed open.
    gpu::nccl_end(bc->comm, /*abort=*/true);
    if (bc->stream) cudaStreamDestroy(bc->stream);
    throw;
  }
  return bc.release();
}

void nccl_close(BackendComm* bc) {
  if (!bc) return;
  cudaStreamSynchronize(bc->stream);
  gpu::nccl_end(bc->comm, /*abort=*/false);
  if (bc->stream) cudaStreamDestroy(bc->stream);
  if (bc->wrong_counter) cudaFree(bc->wrong_counter);
  delete bc;
}

DeviceInfo nccl_device_info(int local_rank) {
  cudaDeviceProp prop;
  DeviceInfo info;
  const int visible = nccl_visible_devices();
  info.device = visible > 0 ? device_for_local_rank(local_rank, visible, "backend nccl") : local_rank;
  if (cudaGetDeviceProperties(&prop, info.device) == cudaSuccess) {
    char bus[64];
    std::snprintf(bus, sizeof bus, "%04x:%02x:%02x", prop.pciDomainID, prop.pciBusID, prop.pciDeviceID);
    info.bus_id = bus;
    info.name = prop.name;
  }
  return info;
}

std::string nccl_version() {
  int v = 0;
  ncclGetVersion(&v);
  return "NCCL " + std::to_string(v / 10000) + "." + std::to_string((v / 100) % 100) + "." + std::to_string(v % 100);
}

void* nccl_alloc(BackendComm* bc, size_t bytes) {
  void* p = nullptr;
  CAIRN_CUDA_CHECK(cudaSetDevice(bc->device));
  if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
    throw RuntimeError("cannot allocate " + std::to_string(bytes) + " bytes on GPU " + std::to_string(bc->device));
  }
  return p;
}
void nccl_release(BackendComm*, void* p) { cudaFree(p); }

template <typename T>
__device__ T from_double(double v) {
  if constexpr (std::is_same_v<T, __half>) return __float2half(static_cast<float>(v));
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16(static_cast<float>(v));
  else return static_cast<T>(v);
}
template <typename T>
__device__ double to_double(T v) {
  if constexpr (std::is_same_v<T, __half>) return static_cast<double>(__half2float(v));
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return static_cast<double>(__bfloat162float(v));
  else return static_cast<double>(v);
}
template <typename T>
__device__ T sentinel_value() {
  if constexpr (std::is_same_v<T, int32_t>) return static_cast<int32_t>(-2147483641);
  else return from_double<T>(__longlong_as_double(0x7ff8000000000000ll));  // quiet NaN
}

template <typename T>
__global__ void fill_kernel(T* p, Segment s, PatternParams pp) {
  for (uint64_t j = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; j < s.count;
       j += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    p[s.offset + j] = s.kind == ValueKind::Sentinel ? sentinel_value<T>() : from_double<T>(segment_value(pp, s, j));
  }
}

template <typename T>
__global__ void check_kernel(const T* p, Segment s, PatternParams pp, unsigned long long* wrong) {
  unsigned long long local = 0;
  for (uint64_t j = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; j < s.count;
       j += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    if (!value_matches(pp, to_double<T>(p[s.offset + j]), segment_value(pp, s, j))) ++local;
  }
  if (local) atomicAdd(wrong, local);
}

unsigned grid_for(uint64_t count) {
  uint64_t blocks = (count + 255) / 256;
  return static_cast<unsigned>(blocks < 4096 ? (blocks ? blocks : 1) : 4096);
}

template <typename F>
void dispatch(DataType t, F&& f) {
  switch (t) {
    case DataType::Int32: f(static_cast<int32_t*>(nullptr)); break;
    case DataType::Float64: f(static_cast<double*>(nullptr)); break;
    case DataType::Float16: f(static_cast<__half*>(nullptr)); break;
    case DataType::BFloat16: f(static_cast<__nv_bfloat16*>(nullptr)); break;
    default: f(static_cast<float*>(nullptr)); break;
  }
}

void nccl_fill(BackendComm* bc, void* view, DataType t, const Segment& s, const PatternParams& pp) {
  if (s.count == 0) return;
  dispatch(t, [&](auto tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    fill_kernel<T><<<grid_for(s.count), 256, 0, bc->stream>>>(static_cast<T*>(view), s, pp);
  });
  CAIRN_CUDA_CHECK_LAUNCH("fill_kernel");
  CAIRN_CUDA_CHECK(cudaStreamSynchronize(bc->stream));
}

int64_t nccl_check_data(BackendComm* bc, const void* view, DataType t, const Segment& s, const PatternParams& pp) {
  if (s.count == 0) return 0;
  CAIRN_CUDA_CHECK(cudaMemsetAsync(bc->wrong_counter, 0, sizeof(unsigned long long), bc->stream));
  dispatch(t, [&](auto tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    check_kernel<T><<<grid_for(s.count), 256, 0, bc->stream>>>(static_cast<const T*>(view), s, pp, bc->wrong_counter);
  });
  CAIRN_CUDA_CHECK_LAUNCH("check_kernel");
  unsigned long long wrong = 0;
  CAIRN_CUDA_CHECK(cudaMemcpyAsync(&wrong, bc->wrong_counter, sizeof wrong, cudaMemcpyDeviceToHost, bc->stream));
  CAIRN_CUDA_CHECK(cudaStreamSynchronize(bc->stream));
  return static_cast<int64_t>(wrong);
}

void nccl_run(BackendComm* bc, CollKind kind, const void* send, void* recv, size_t count, DataType t, RedOp op,
              int root, bool) {
  ncclDataType_t dt = nccl_type(t);
  ncclComm_t c = bc->comm;
  cudaStream_t st = bc->stream;
  switch (kind) {
    case CollKind::AllReduce: CAIRN_NCCL_CHECK(ncclAllReduce(send, recv, count, dt, nccl_op(op), c, st)); break;
    case CollKind::AllGather: CAIRN_NCCL_CHECK(ncclAllGather(send, recv, count, dt, c, st)); break;
    case CollKind::ReduceScatter: CAIRN_NCCL_CHECK(ncclReduceScatter(send, recv, count, dt, nccl_op(op), c, st)); break;
    case CollKind::AlltoAll: {
      size_t bytes = count * type_size(t);
      gpu::nccl_group([&] {  // a failed send/recv still closes the group
        for (int p = 0; p < bc->size; ++p) {
          CAIRN_NCCL_CHECK(ncclSend(static_cast<const char*>(send) + p * bytes, count, dt, p, c, st));
          CAIRN_NCCL_CHECK(ncclRecv(static_cast<char*>(recv) + p * bytes, count, dt, p, c, st));
        }
      });
      break;
    }
    case CollKind::Broadcast: CAIRN_NCCL_CHECK(ncclBroadcast(send, recv, count, dt, root, c, st)); break;
    case CollKind::Reduce: CAIRN_NCCL_CHECK(ncclReduce(send, recv, count, dt, nccl_op(op), root, c, st)); break;
    case CollKind::SendRecv: {
      int next = (bc->rank + 1) % bc->size, prev = (bc->rank - 1 + bc->size) % bc->size;
      gpu::nccl_group([&] {
        CAIRN_NCCL_CHECK(ncclSend(send, count, dt, next, c, st));
        CAIRN_NCCL_CHECK(ncclRecv(recv, count, dt, prev, c, st));
      });
      break;
    }
  }
}

// Polled (gpu::wait_for_stream): a peer or link that fails mid-sweep ends the run with NCCL's error, not a hang.
void nccl_sync(BackendComm* bc) { gpu::wait_for_stream(bc->stream); }

}  // namespace

const Backend* nccl_backend() {
  static const Backend b = {"nccl",
                            nccl_supports_type,
                            nccl_supports_op,
                            false,
                            false,
                            false,
                            nccl_visible_devices,
                            nccl_device_problem,
                            nccl_open,
                            nccl_close,
                            nccl_device_info,
                            nccl_version,
                            nccl_alloc,
                            nccl_release,
                            nccl_fill,
                            nccl_check_data,
                            nccl_run,
                            nccl_sync};
  return &b;
}

}  // namespace cairn::sweep
