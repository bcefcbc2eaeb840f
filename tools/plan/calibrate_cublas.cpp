// cairn-plan calibrate on a GPU: bf16 cuBLAS GEMM throughput and device-memory bandwidth (built with CUDA only).
// cuBLAS is loaded (dlopen) when calibrate first measures a GEMM and the CUDA runtime is linked statically, so
// cairn-plan's other commands start without loading either (tens of ms against hundreds; bench/startup_bench.sh).
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <chrono>
#include <string>

#include "cairn/device_binding.h"
#include "cairn/error.h"
#include "cairn/kernels/gpu_check.h"  // header only: the check macros without linking the kernels (or cuBLAS)
#include "cairn/log.h"
#include "plan.h"

namespace cairn::plan {

namespace {

// Makes calibrate's GPU current, once: cairn's rank-to-GPU rule (cairn/device_binding.h) for local rank 0, since
// calibrate runs one process per node (no MPI) and measures one GPU: the first one CUDA_VISIBLE_DEVICES leaves.
int bind_calibrate_gpu() {
  static const int device = [] {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      (void)cudaGetLastError();  // no driver: not sticky
      count = 0;
    }
    const int d = device_for_local_rank(0, count, "calibrate --device gpu");
    CAIRN_CUDA_CHECK(cudaSetDevice(d));
    return d;
  }();
  return device;
}

// The three cuBLAS entry points calibrate uses, from the library loaded on first use.
struct CublasApi {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  // the C (32-bit int) signature; C++ also sees an overload, so spell the type out
  using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                    const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                                    cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
  GemmEx gemm_ex = nullptr;
};

const CublasApi& cublas() {
  static const CublasApi api = [] {
    const std::string versioned = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
    void* lib = dlopen(versioned.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) lib = dlopen("libcublas.so", RTLD_NOW | RTLD_LOCAL);
    if (!lib) throw RuntimeError("calibrate: cannot load cuBLAS (" + versioned + "): " + dlerror());
    CublasApi a;
    auto sym = [&](const char* name) {
      void* f = dlsym(lib, name);
      if (!f) throw RuntimeError(std::string("calibrate: cuBLAS has no ") + name);
      return f;
    };
    a.create = reinterpret_cast<decltype(a.create)>(sym("cublasCreate_v2"));
    a.destroy = reinterpret_cast<decltype(a.destroy)>(sym("cublasDestroy_v2"));
    a.gemm_ex = reinterpret_cast<decltype(a.gemm_ex)>(sym("cublasGemmEx"));
    return a;
  }();
  return api;
}

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

bool cublas_available(std::string* why) {
  int n = 0;
  const cudaError_t rc = cudaGetDeviceCount(&n);
  if (rc != cudaSuccess || n == 0) {
    if (why) *why = rc != cudaSuccess ? cudaGetErrorString(rc) : "no CUDA device";
    return false;
  }
  return true;
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
  const CublasApi& api = cublas();
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

double measure_hbm_cuda_gbps(size_t bytes, double seconds) {
  bind_calibrate_gpu();
  DeviceBuffer src(bytes), dst(bytes);
  auto call = [&]() { CAIRN_CUDA_CHECK(cudaMemcpyAsync(dst.p, src.p, bytes, cudaMemcpyDeviceToDevice)); };
  return calls_per_second(call, seconds) * 2.0 * double(bytes) / 1e9;  // read + write
}

}  // namespace cairn::plan
