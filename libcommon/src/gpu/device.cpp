// cairn/gpu.h's device figures (the CUDA backend's allocator high-water mark, memory in use, the bf16 switch) and NVTX
// ranges, with CUDA when the kernels were built with it (CAIRN_HAVE_CUDA_BACKEND), otherwise zeros and no-ops. The
// binding is binding.cpp, NCCL communicators nccl.cpp.
#include "cairn/gpu.h"

#ifdef CAIRN_HAVE_CUDA_BACKEND
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include "cairn/kernels/cuda.h"
#endif

namespace cairn::gpu {

#ifdef CAIRN_HAVE_CUDA_BACKEND

size_t peak_allocated_bytes() { return kernels::cuda_peak_allocated_bytes(); }
void reset_peak_allocated() { kernels::cuda_reset_peak_allocated_bytes(); }
void set_bf16_matmul(bool on) { kernels::cuda_set_bf16_matmul(on); }
void range_push(const char* name) { nvtxRangePushA(name); }
void range_pop() { nvtxRangePop(); }

size_t device_used_bytes() {
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return 0;  // a figure for reports, never worth failing over
  return total_b - free_b;
}

#else

size_t peak_allocated_bytes() { return 0; }
size_t device_used_bytes() { return 0; }
void reset_peak_allocated() {}
void set_bf16_matmul(bool) {}
void range_push(const char*) {}
void range_pop() {}

#endif

}  // namespace cairn::gpu
