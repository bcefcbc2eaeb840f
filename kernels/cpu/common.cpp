// Host memory hooks, the element-wise optimizer reference loops and the backend registry.
#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "cairn/kernels/backend.h"
#ifdef CAIRN_HAVE_CUDA_BACKEND
#include "cairn/kernels/cuda.h"
#include "cairn/kernels/cuda_probe.h"
#endif
#include "cpu_common.h"

// Weak: a build against another BLAS still links, and then only OpenMP's count is set.
extern "C" void openblas_set_num_threads(int) __attribute__((weak));

namespace cairn::kernels {
namespace {

void* host_alloc(size_t bytes) {
  // 64-byte aligned for SIMD loads; zeroed like the contract says
  size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, rounded == 0 ? 64 : rounded);
  return p;
}
void host_free(void* p) { std::free(p); }
void host_copy(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memmove(dst, src, bytes);
}
void host_copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes, size_t rows) {
  for (size_t i = 0; i < rows; i++)
    std::memcpy(static_cast<char*>(dst) + i * dst_pitch, static_cast<const char*>(src) + i * src_pitch, row_bytes);
}
void host_fill_zero(void* p, size_t bytes) {
  if (bytes) std::memset(p, 0, bytes);
}
void host_synchronize() {}

// Both CPU backends share this loop: it is already as fast as reading the logits once.
void argmax_rows_host(int32_t* out, const float* x, int N, int V, int Vp) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* row = x + (size_t)n * Vp;
    int32_t best = 0;
    for (int j = 1; j < V && !std::isnan(row[best]); j++)
      if (std::isnan(row[j]) || row[j] > row[best]) best = j;
    out[n] = best;
  }
}

}  // namespace

Backend host_memory_backend(const char* name) {
  Backend b{};
  b.name = name;
  b.device_memory = false;
  b.alloc = host_alloc;
  b.free = host_free;
  b.copy_to_device = host_copy;
  b.copy_to_host = host_copy;
  b.copy_device = host_copy;
  b.copy_rows = host_copy_rows;
  b.fill_zero = host_fill_zero;
  b.synchronize = host_synchronize;
  b.argmax_rows = argmax_rows_host;
  return b;
}

void attention_merge_host(float* out, float* lse, const float* part_out, const float* part_lse, int B, int T, int C,
                          int NH) {
  const int hd = C / NH;
#pragma omp parallel for schedule(static)
  for (int idx = 0; idx < B * NH * T; idx++) {  // idx = (b * NH + h) * T + i, lse's order
    const int i = idx % T, h = (idx / T) % NH, b = idx / (T * NH);
    const size_t at = ((size_t)b * T + i) * C + (size_t)h * hd;
    merge_attention_row(out + at, lse[idx], part_out + at, part_lse[idx], hd);
  }
}

void adamw_update_reference(float* params, const float* grads, float* m, float* v, size_t n, const AdamWParams& hp) {
  const AdamWStep step(hp);
  for (size_t i = 0; i < n; i++) step.apply(params[i], grads[i], m[i], v[i]);
}

double squared_norm_reference(const float* x, size_t n) {
  double sum = 0.0;
  for (size_t i = 0; i < n; i++) sum += (double)x[i] * x[i];
  return sum;
}

void scale_reference(float* x, float s, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] *= s;
}

void set_cpu_threads(int threads) {
  if (threads < 1) threads = 1;
  omp_set_num_threads(threads);
  if (openblas_set_num_threads) openblas_set_num_threads(threads);
}

const Backend* find_backend(const char* name) {
  if (!name) return nullptr;
  if (std::strcmp(name, "cpu") == 0) return &cpu_backend();
  if (std::strcmp(name, "cpu-ref") == 0) return &cpu_reference_backend();
#ifdef CAIRN_HAVE_CUDA_BACKEND
  if (std::strcmp(name, "cuda") == 0) return cuda_backend_or_null();
#endif
  return nullptr;
}

const char* backend_names() {
#ifdef CAIRN_HAVE_CUDA_BACKEND
  return "cpu, cpu-ref, cuda";
#else
  return "cpu, cpu-ref";
#endif
}

const char* backend_unavailable_reason(const char* name) {
  static thread_local std::string message;
#ifdef CAIRN_HAVE_CUDA_BACKEND
  if (name && std::strcmp(name, "cuda") == 0) {
    if (!find_backend(name)) {  // no GPU, or a driver that fails: the probe's reason names the CUDA error
      message = "backend \"cuda\": " + probe_cuda().reason;
      return message.c_str();
    }
    // cuBLAS is loaded on the first GEMM; a run that chose the GPU learns here, before it loads data or builds
    // the model, that the library is missing
    message = cuda_libraries_error();
    if (message.empty()) return nullptr;
    message = "backend \"cuda\": " + message;
    return message.c_str();
  }
#endif
  if (find_backend(name)) return nullptr;
  message = std::string("unknown backend \"") + (name ? name : "") + "\" (this build has " + backend_names() + ")";
  return message.c_str();
}

bool backend_unavailable_is_failure(const char* name) {
#ifdef CAIRN_HAVE_CUDA_BACKEND
  if (name && std::strcmp(name, "cuda") == 0) return probe_cuda().state == CudaAvailability::Broken;
#endif
  (void)name;
  return false;
}

}  // namespace cairn::kernels
