// Entry points of the CUDA backend beyond the op table (defined only in builds with CAIRN_HAVE_CUDA_BACKEND).
#pragma once
#include <cstddef>
#include <string>

#include "cairn/kernels/backend.h"

struct CUstream_st;  // cudaStream_t, without the CUDA headers

namespace cairn::kernels {
// The CUDA op table, or nullptr when no usable GPU is present (find_backend("cuda") returns this).
const Backend* cuda_backend_or_null();
// Loads cuBLAS and cuBLASLt now (cairn/kernels/cublas_api.h; normally the first GEMM does) and returns "" or the
// loader's error (the library, the places tried, the reason). backend_unavailable_reason("cuda") includes it.
std::string cuda_libraries_error();
// Bytes currently allocated through the backend, and the high-water mark (like PyTorch's
// memory_allocated / max_memory_allocated), for peak-memory metrics.
size_t cuda_allocated_bytes();
size_t cuda_peak_allocated_bytes();
void cuda_reset_peak_allocated_bytes();
// precision = "bf16": matmuls round their inputs to bf16 and run on tensor cores through cuBLASLt with
// fp32 accumulation; everything else stays fp32 except attention (cuda_set_bf16_attention below).
void cuda_set_bf16_matmul(bool on);
bool cuda_bf16_matmul();
// Attention kernels: true (the default) runs the tiled flash kernels (kernels/cuda/flash_attention.cu) for head dims
// <= 128, false the simple one-query-row-per-thread kernels (kept for comparison). The initial choice comes from the
// environment: CAIRN_CUDA_ATTENTION=flash|flash-fp32|simple (another value: the first attention call throws).
void cuda_set_flash_attention(bool on);
bool cuda_flash_attention();
// In bf16 mode (cuda_set_bf16_matmul(true)), flash attention with head dim 64 or 128 runs the bf16 tensor-core kernels
// (kernels/cuda/flash_attention_bf16.cu: tiles rounded to bf16, fp32 accumulation and softmax) when this is true (the
// default), the fp32 flash kernels when false; CAIRN_CUDA_ATTENTION=flash-fp32 makes false the initial choice.
void cuda_set_bf16_attention(bool on);
bool cuda_bf16_attention();
// The backend's synchronize waits for the legacy stream. Kernels there may wait on another library's work (NCCL
// events), which can fail without the stream ever finishing: with a `poll` set, synchronize waits as
// cuda_wait_for_stream with it (libcommon sets raise_nccl_async_errors). nullptr: block.
void cuda_set_wait_poll(void (*poll)());
// The host waits until `stream` (a cudaStream_t) has run everything queued on it, polling, and calls `poll` between
// polls: a throw from `poll` ends the wait.
void cuda_wait_for_stream(CUstream_st* stream, void (*poll)());
}  // namespace cairn::kernels
