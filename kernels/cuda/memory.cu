// The CUDA backend's memory: the table's hooks (zeroed allocations, copies, synchronize), allocation tracking for the
// peak-memory figures (cuda_allocated_bytes, cuda_peak_allocated_bytes in cairn/kernels/cuda.h) and the device scratch.
#include <atomic>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>

#include "cairn/kernels/cuda.h"
#include "cuda_common.cuh"

namespace cairn::kernels {
namespace cuda {
namespace {

// Bytes held through this backend now and at most (trainers report the high-water mark, like PyTorch's
// max_memory_allocated); the size of each live allocation is kept so frees can be subtracted.
std::mutex g_mem_mutex;
std::unordered_map<void*, size_t> g_mem_sizes;
std::atomic<size_t> g_mem_current{0}, g_mem_peak{0};

std::atomic<void (*)()> g_wait_poll{nullptr};  // cuda_set_wait_poll

}  // namespace

void track_alloc(void* p, size_t bytes) {
  std::lock_guard<std::mutex> lk(g_mem_mutex);
  g_mem_sizes[p] = bytes;
  const size_t now = g_mem_current += bytes;
  if (now > g_mem_peak) g_mem_peak = now;
}
void track_free(void* p) {
  std::lock_guard<std::mutex> lk(g_mem_mutex);
  auto it = g_mem_sizes.find(p);
  if (it == g_mem_sizes.end()) return;
  g_mem_current -= it->second;
  g_mem_sizes.erase(it);
}

// Stream-ordered on the legacy stream, where every op of the backend runs: cudaFreeAsync releases the old buffer once
// the kernels queued before it (the last users of its contents) are done, and cudaMallocAsync's new one is ready for
// the kernels queued after it, with no host wait. Not cudaFree: it synchronizes the whole device, so a buffer that
// grows inside a step would wait for a trainer's NCCL sends in flight on their own stream, which finish only when
// their receivers post (a stall, or with pipeline interleaving a deadlock; tools/train/gpu_cuda.cpp free_buffer).
// A device without memory pools (cudaDevAttrMemoryPoolsSupported 0: old drivers, some vGPUs) falls back to
// cudaFree / cudaMalloc.
void* GrowBuffer::at_least(size_t bytes) {
  if (bytes <= capacity) return ptr;
  static const bool stream_ordered = [] {
    int device = 0, pools = 0;
    CAIRN_CUDA_CHECK(cudaGetDevice(&device));
    CAIRN_CUDA_CHECK(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device));
    return pools != 0;
  }();
  if (ptr) {
    // Forget the old buffer before anything can throw: a failed allocation below must not leave a freed pointer
    // that a later, smaller request would be handed.
    void* old = ptr;
    ptr = nullptr;
    capacity = 0;
    track_free(old);
    CAIRN_CUDA_CHECK(stream_ordered ? cudaFreeAsync(old, cudaStreamLegacy) : cudaFree(old));
  }
  void* fresh = nullptr;
  CAIRN_CUDA_CHECK(stream_ordered ? cudaMallocAsync(&fresh, bytes, cudaStreamLegacy) : cudaMalloc(&fresh, bytes));
  ptr = fresh;
  track_alloc(ptr, bytes);
  capacity = bytes;
  return ptr;
}

float* scratch(size_t floats) {
  static GrowBuffer buf;
  return static_cast<float*>(buf.at_least(floats * sizeof(float)));
}

void* dev_alloc(size_t bytes) {
  void* p = nullptr;
  const size_t n = bytes == 0 ? 256 : bytes;
  cudaError_t err = cudaMalloc(&p, n);
  if (err != cudaSuccess) {
    cudaGetLastError();  // an allocation failure is not sticky: clear it so the next launch check does not report it
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    // Not CAIRN_CUDA_CHECK: the user needs the sizes and what to change, not the call.
    throw GpuError("CUDA: out of device memory allocating " + std::to_string(n >> 20) + " MiB (" +
                   std::to_string(free_b >> 20) + " MiB free of " + std::to_string(total_b >> 20) +
                   " MiB; cairn holds " + std::to_string(g_mem_current.load() >> 20) +
                   " MiB): lower the micro-batch or sequence length");
  }
  CAIRN_CUDA_CHECK(cudaMemset(p, 0, n));
  track_alloc(p, n);
  return p;
}
void dev_free(void* p) {
  if (p) {
    track_free(p);
    cudaFree(p);
  }
}
void to_device(void* dst, const void* src, size_t bytes) {
  if (bytes) CAIRN_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}
void to_host(void* dst, const void* src, size_t bytes) {
  if (bytes) CAIRN_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}
void device_copy(void* dst, const void* src, size_t bytes) {
  if (bytes) CAIRN_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
}
void copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes, size_t rows) {
  if (row_bytes && rows)
    CAIRN_CUDA_CHECK(cudaMemcpy2D(dst, dst_pitch, src, src_pitch, row_bytes, rows, cudaMemcpyDeviceToDevice));
}
void fill_zero(void* p, size_t bytes) {
  if (bytes) CAIRN_CUDA_CHECK(cudaMemset(p, 0, bytes));
}
// Every op of this backend runs on the legacy default stream, so waiting for that stream is waiting for the backend.
// Not cudaDeviceSynchronize: a trainer's communication on its own non-blocking stream (NCCL) keeps running, which
// is what lets the model's per-layer synchronize during backward overlap with gradient all-reduces.
// With a wait poll set (cuda_set_wait_poll) the host polls instead of blocking, so that a failed communicator the
// stream waits on ends the wait in the poll's error.
void synchronize() {
  void (*poll)() = g_wait_poll.load();
  if (!poll) {
    CAIRN_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
    return;
  }
  cuda_wait_for_stream(cudaStreamLegacy, poll);
}

}  // namespace cuda

// Device bytes allocated through this backend now / at most since the process started or the last reset (declared
// where used: tools/train/gpu_cuda.cpp, bench/kernels_gpu_gpt_bench.cpp).
size_t cuda_allocated_bytes() { return cuda::g_mem_current.load(); }
size_t cuda_peak_allocated_bytes() { return cuda::g_mem_peak.load(); }
void cuda_set_wait_poll(void (*poll)()) { cuda::g_wait_poll.store(poll); }
void cuda_wait_for_stream(CUstream_st* stream, void (*poll)()) {
  for (;;) {
    const cudaError_t q = cudaStreamQuery(stream);
    if (q == cudaSuccess) return;
    if (q != cudaErrorNotReady) CAIRN_CUDA_CHECK(q);
    poll();
    std::this_thread::yield();
  }
}
void cuda_reset_peak_allocated_bytes() {
  std::lock_guard<std::mutex> lk(cuda::g_mem_mutex);
  cuda::g_mem_peak = cuda::g_mem_current.load();
}

}  // namespace cairn::kernels
