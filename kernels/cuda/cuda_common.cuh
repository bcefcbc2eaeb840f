// What the CUDA backend's files share (one file per op family, the table in cuda_backend.cu): the op declarations
// (generated from CAIRN_KERNEL_OPS, so the list stays single), the memory hooks, launch sizes, warp/block reductions,
// the device scratch and allocation tracking, and the column sums both layernorm and matmul backward use.
// Every op runs on the legacy default stream.
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <type_traits>

#include "../cpu/cpu_common.h"
#include "cairn/kernels/backend.h"
#include "cairn/kernels/gpu_check.h"

namespace cairn::kernels::cuda {

// One declaration per op of CAIRN_KERNEL_OPS, typed by its Backend field: each op family's file defines its ops here
// under the field's name, and a signature that drifts from the table fails to compile.
#define CAIRN_CUDA_DECLARE_OP(op) extern std::remove_pointer_t<decltype(Backend::op)> op;
CAIRN_KERNEL_OPS(CAIRN_CUDA_DECLARE_OP)
#undef CAIRN_CUDA_DECLARE_OP

// Memory hooks of the table (memory.cu).
void* dev_alloc(size_t bytes);
void dev_free(void* p);
void to_device(void* dst, const void* src, size_t bytes);
void to_host(void* dst, const void* src, size_t bytes);
void device_copy(void* dst, const void* src, size_t bytes);
void copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes, size_t rows);
void fill_zero(void* p, size_t bytes);
void synchronize();

// Allocation tracking behind cuda_allocated_bytes / cuda_peak_allocated_bytes (memory.cu): every cudaMalloc of the
// backend, its own buffers included, is reported here.
void track_alloc(void* p, size_t bytes);
void track_free(void* p);
// A grow-only device buffer (scratch, the bf16 GEMM copies): at_least(bytes) returns one of at least that size,
// reallocated (contents dropped) when the current one is smaller, stream-ordered on the legacy stream (cudaFreeAsync /
// cudaMallocAsync: no device-wide synchronization inside a step; memory.cu). Only for buffers that the backend's
// kernels on the legacy stream use.
struct GrowBuffer {
  void* ptr = nullptr;
  size_t capacity = 0;  // bytes
  void* at_least(size_t bytes);
};
// Grows-only device scratch for ops that need temporaries (attention's D, the squared norm's partials).
float* scratch(size_t floats);

// out[c] += sum_n f(n, c) over N rows, deterministic (fixed-order combine): f = in (mode 0, bias gradients) or
// in * (x - mean[n]) * rstd[n] (mode 1, layernorm's weight gradient). norm.cu: two passes, S splits of R rows each
// writing partial sums [S][C] to scratch(), then a fixed-order sum of the S partials per column. S and R depend on N
// and C only (column_splits): about kColumnTargetBlocks blocks of 32 columns, each split at least
// kColumnMinRowsPerSplit rows (8 per row lane).
constexpr int kColumnTargetBlocks = 1024, kColumnMinRowsPerSplit = 64;
struct ColumnSplits {
  int splits = 1, rows = 0;  // S, R: split s sums rows [s * R, min(N, (s + 1) * R))
};
ColumnSplits column_splits(int N, int C);
void column_sums(float* out, const float* in, const float* x, const float* mean, const float* rstd, int N, int C,
                 int mode);

constexpr int kThreads = 256;

inline unsigned blocks_for(size_t n, int threads = kThreads) { return (unsigned)((n + threads - 1) / threads); }

__device__ inline float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ inline float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Block-wide reduction (kThreads threads), same order every launch; result valid in every thread.
template <bool kMax>
__device__ float block_reduce(float v) {
  __shared__ float partial[kThreads / 32];
  __shared__ float result;
  v = kMax ? warp_max(v) : warp_sum(v);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    float w = threadIdx.x < kThreads / 32 ? partial[threadIdx.x] : (kMax ? -INFINITY : 0.0f);
    w = kMax ? warp_max(w) : warp_sum(w);
    if (threadIdx.x == 0) result = w;
  }
  __syncthreads();
  const float r = result;
  __syncthreads();
  return r;
}

}  // namespace cairn::kernels::cuda
