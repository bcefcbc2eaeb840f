// The CUDA backend's table (fp32 storage; cuBLAS or, in bf16 mode, cuBLASLt matmuls; deterministic kernels): the ops
// live one family per file (memory.cu, embedding.cu, norm.cu, gemm.cu, attention.cu with the flash kernels of
// flash_attention*.cu, elementwise.cu, loss.cu, argmax.cu, optimizer.cu), declared from CAIRN_KERNEL_OPS in
// cuda_common.cuh and filled in here from the same list. Same semantics as the CPU reference.
#include "cairn/kernels/cublas_api.h"
#include "cairn/kernels/cuda.h"
#include "cairn/kernels/cuda_probe.h"
#include "cuda_common.cuh"

namespace cairn::kernels {
namespace {

Backend make_cuda_backend() {
  Backend b{};
  b.name = "cuda";
  b.device_memory = true;
  b.alloc = cuda::dev_alloc;
  b.free = cuda::dev_free;
  b.copy_to_device = cuda::to_device;
  b.copy_to_host = cuda::to_host;
  b.copy_device = cuda::device_copy;
  b.copy_rows = cuda::copy_rows;
  b.fill_zero = cuda::fill_zero;
  b.synchronize = cuda::synchronize;
#define CAIRN_CUDA_SET_OP(op) b.op = cuda::op;
  CAIRN_KERNEL_OPS(CAIRN_CUDA_SET_OP)
#undef CAIRN_CUDA_SET_OP
  return b;
}

}  // namespace

// nullptr unless a CUDA device is usable (cairn/kernels/cuda_probe.h; backend_unavailable_reason says why).
const Backend* cuda_backend_or_null() {
  if (!probe_cuda().usable()) return nullptr;
  static const Backend backend = make_cuda_backend();
  return &backend;
}

std::string cuda_libraries_error() {
  try {
    (void)cublas_api();
    (void)cublaslt_api();
    return {};
  } catch (const GpuError& e) {
    return e.what();
  }
}

}  // namespace cairn::kernels
