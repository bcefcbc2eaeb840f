// cairn-plan calibrate on a GPU: bf16 cuBLAS and FP8 cuBLASLt GEMM throughput and device-memory bandwidth (built
// with CUDA only). cuBLAS(Lt) is loaded (dlopen, cairn/kernels/cublas_api.h) when calibrate first measures a GEMM and
// the CUDA runtime is linked statically, so cairn-plan's other commands start without loading either (tens of ms
// against hundreds; bench/startup_bench.sh).
#include <cuda_runtime_api.h>

#include <chrono>
#include <string>

#include "cairn/device_binding.h"
#include "cairn/error.h"
#include "cairn/kernels/cublas_api.h"  // the loader alone (cairn_cublas_api), not the kernels
#include "cairn/kernels/cuda_probe.h"  // the device probe alone (cairn_cuda_probe)
#include "cairn/kernels/gpu_check.h"   // header only: the check macros without linking the kernels
#include "cairn/log.h"
#include "plan.h"

namespace cairn::plan {

namespace {

// Makes calibrate's GPU current, once: cairn's rank-to-GPU rule (cairn/device_binding.h) for local rank 0, since
// calibrate runs one process per node (no MPI) and measures one GPU: the first one CUDA_VISIBLE_DEVICES leaves.
int bind_calibrate_gpu() {
  static const int device = [] {
    const int d = device_for_local_rank(0, kernels::probe_cuda().devices, "calibrate --device gpu");
    CAIRN_CUDA_CHECK(cudaSetDevice(d));
    return d;
  }();
  return device;
}

using kernels::CublasLtApi;

// One FP8 matmul's cuBLASLt objects, destroyed in reverse on scope exit (also when a call throws).
struct LtMatmul {
  const CublasLtApi& lt;
  cublasLtHandle_t handle{};
  cublasLtMatmulDesc_t desc{};
  cublasLtMatrixLayout_t a{}, b{}, c{};
  cublasLtMatmulPreference_t pref{};
  explicit LtMatmul(const CublasLtApi& api) : lt(api) {}
  ~LtMatmul() {
    if (pref) lt.pref_destroy(pref);
    for (auto* l : {c, b, a})
      if (l) lt.layout_destroy(l);
    if (desc) lt.desc_destroy(desc);
    if (handle) lt.destroy(handle);
  }
  LtMatmul(const LtMatmul&) = delete;
  LtMatmul& operator=(const LtMatmul&) = delete;
};

// Device buffer freed on scope exit.
struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) { CAIRN_CUDA_CHECK(cudaMalloc(&p, bytes)); }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

struct Events {
  cudaEvent_t start{}, stop{};
  Events() {
    CAIRN_CUDA_CHECK(cudaEventCreate(&start));
    CAIRN_CUDA_CHECK(cudaEventCreate(&stop));
  }
  ~Events() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
};

// Runs `call` in batches until `seconds` of GPU time; returns calls per second.
template <typename F>
double calls_per_second(F call, double seconds) {
  Events ev;
  call();  // warm-up: heuristics, workspace, clocks
  CAIRN_CUDA_CHECK(cudaDeviceSynchronize());
  int64_t batch = 1, total = 0;
  double elapsed = 0;
  while (elapsed < seconds) {
    CAIRN_CUDA_CHECK(cudaEventRecord(ev.start));
    for (int64_t i = 0; i < batch; ++i) call();
    CAIRN_CUDA_CHECK(cudaEventRecord(ev.stop));
    CAIRN_CUDA_CHECK(cudaEventSynchronize(ev.stop));
    float ms = 0;
    CAIRN_CUDA_CHECK(cudaEventElapsedTime(&ms, ev.start, ev.stop));
    elapsed += ms * 1e-3;
    total += batch;
    if (ms < 20) batch *= 2;
  }
  return double(total) / elapsed;
}

}  // namespace

bool cublas_available(std::string* why, bool* broken) {
  const kernels::CudaProbe& cuda = kernels::probe_cuda();  // the one probe (cairn/kernels/cuda_probe.h)
  if (why) *why = cuda.reason;
  if (broken) *broken = cuda.state == kernels::CudaAvailability::Broken;
  return cuda.usable();
}

std::string cuda_device_name() {
  cudaDeviceProp prop{};
  CAIRN_CUDA_CHECK(cudaGetDeviceProperties(&prop, bind_calibrate_gpu()));
  return prop.name;
}

double measure_gemm_cublas(int64_t m, int64_t n, int64_t k, double seconds) {
  bind_calibrate_gpu();
  DeviceBuffer a(size_t(m * k) * 2), b(size_t(k * n) * 2), c(size_t(m * n) * 2);
  CAIRN_CUDA_CHECK(cudaMemset(a.p, 0, size_t(m * k) * 2));
  CAIRN_CUDA_CHECK(cudaMemset(b.p, 0, size_t(k * n) * 2));
  cublasHandle_t h{};
  const kernels::CublasApi& api = kernels::cublas_api();
  CAIRN_CUBLAS_CHECK(api.create(&h));
  const float one = 1.0f, zero = 0.0f;
  // Row-major C = A B is column-major C^T = B^T A^T: pass B first.
  auto call = [&]() {
    CAIRN_CUBLAS_CHECK(api.gemm_ex(h, CUBLAS_OP_N, CUBLAS_OP_N, int(n), int(m), int(k), &one, b.p, CUDA_R_16BF, int(n),
                                   a.p, CUDA_R_16BF, int(k), &zero, c.p, CUDA_R_16BF, int(n), CUBLAS_COMPUTE_32F,
                                   CUBLAS_GEMM_DEFAULT));
  };
  double rate = 0;
  try {
    rate = calls_per_second(call, seconds) * 2.0 * double(m) * double(n) * double(k);
  } catch (...) {
    api.destroy(h);
    throw;
  }
  api.destroy(h);
  return rate;
}

bool fp8_tensor_cores(std::string* why) {
  cudaDeviceProp prop{};
  CAIRN_CUDA_CHECK(cudaGetDeviceProperties(&prop, bind_calibrate_gpu()));
  if (prop.major * 10 + prop.minor >= 89) return true;
  if (why)
    *why =
        strprintf("%s is compute capability %d.%d; FP8 tensor cores start at 8.9", prop.name, prop.major, prop.minor);
  return false;
}

double measure_gemm_fp8_cublaslt(int64_t m, int64_t n, int64_t k, double seconds) {
  bind_calibrate_gpu();
  if (m % 16 || n % 16 || k % 16)
    throw RuntimeError(strprintf("calibrate: FP8 GEMM %lld x %lld x %lld: cuBLASLt needs multiples of 16", (long long)m,
                                 (long long)n, (long long)k));
  const size_t workspace_bytes = size_t(32) << 20;  // what cuBLASLt's Hopper kernels ask for at most
  DeviceBuffer a(size_t(m * k)), b(size_t(k * n)), c(size_t(m * n) * 2), workspace(workspace_bytes);
  CAIRN_CUDA_CHECK(cudaMemset(a.p, 0, size_t(m * k)));
  CAIRN_CUDA_CHECK(cudaMemset(b.p, 0, size_t(k * n)));
  LtMatmul mm(kernels::cublaslt_api());
  const CublasLtApi& lt = mm.lt;
  CAIRN_CUBLAS_CHECK(lt.create(&mm.handle));
  CAIRN_CUBLAS_CHECK(lt.desc_create(&mm.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  // FP8 kernels take only the "TN" form: column-major D (n x m) = op(A) op(B) with A (k x n) transposed and B
  // (k x m) not, which is the row-major m x n product of an m x k and a k x n matrix. No scale pointers: 1.0.
  const cublasOperation_t transpose = CUBLAS_OP_T, plain = CUBLAS_OP_N;
  CAIRN_CUBLAS_CHECK(lt.desc_set(mm.desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof transpose));
  CAIRN_CUBLAS_CHECK(lt.desc_set(mm.desc, CUBLASLT_MATMUL_DESC_TRANSB, &plain, sizeof plain));
  CAIRN_CUBLAS_CHECK(lt.layout_create(&mm.a, CUDA_R_8F_E4M3, uint64_t(k), uint64_t(n), k));
  CAIRN_CUBLAS_CHECK(lt.layout_create(&mm.b, CUDA_R_8F_E4M3, uint64_t(k), uint64_t(m), k));
  CAIRN_CUBLAS_CHECK(lt.layout_create(&mm.c, CUDA_R_16BF, uint64_t(n), uint64_t(m), n));
  CAIRN_CUBLAS_CHECK(lt.pref_create(&mm.pref));
  CAIRN_CUBLAS_CHECK(
      lt.pref_set(mm.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes, sizeof workspace_bytes));
  cublasLtMatmulHeuristicResult_t best{};
  int found = 0;
  CAIRN_CUBLAS_CHECK(lt.heuristic(mm.handle, mm.desc, mm.a, mm.b, mm.c, mm.c, mm.pref, 1, &best, &found));
  if (found < 1)
    throw RuntimeError(strprintf("calibrate: cuBLASLt has no FP8 kernel for %lld x %lld x %lld", (long long)m,
                                 (long long)n, (long long)k));
  const float one = 1.0f, zero = 0.0f;
  auto call = [&]() {
    CAIRN_CUBLAS_CHECK(lt.matmul(mm.handle, mm.desc, &one, a.p, mm.a, b.p, mm.b, &zero, c.p, mm.c, c.p, mm.c,
                                 &best.algo, workspace.p, workspace_bytes, nullptr));
  };
  return calls_per_second(call, seconds) * 2.0 * double(m) * double(n) * double(k);
}

double measure_hbm_cuda_gbps(size_t bytes, double seconds) {
  bind_calibrate_gpu();
  DeviceBuffer src(bytes), dst(bytes);
  auto call = [&]() { CAIRN_CUDA_CHECK(cudaMemcpyAsync(dst.p, src.p, bytes, cudaMemcpyDeviceToDevice)); };
  return calls_per_second(call, seconds) * 2.0 * double(bytes) / 1e9;  // read + write
}

}  // namespace cairn::plan
