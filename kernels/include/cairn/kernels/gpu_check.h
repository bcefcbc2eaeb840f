// The one check for failed CUDA-family calls in cairn (kernels, libcommon's GPU area, every tool): CAIRN_CUDA_CHECK,
// CAIRN_CUBLAS_CHECK and CAIRN_CUDA_CHECK_LAUNCH throw with file:line, the call's text and the library's error string.
// It lives in kernels/ because kernels must build without libcommon (CAIRN_KERNELS_ONLY); libcommon's
// cairn/gpu_check.h re-uses it and adds CAIRN_NCCL_CHECK, so there is one message format and one definition.
// Plain C++ without CUDA headers (the macros name CUDA types only where they are expanded), so the message format is
// unit-tested on machines without CUDA (tests/kernels/kernels_gpu_check_test.cpp).
#pragma once
#include <stdexcept>
#include <string>

namespace cairn::kernels {

// A failed GPU library call. A std::runtime_error, not libcommon's cairn::Error (kernels do not depend on libcommon);
// tools report it like any other runtime failure (exit 1).
class GpuError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// "<library> error at <file>:<line>: <call>: <error>", the file shown without its directories (the build's absolute
// source paths say nothing a reader needs).
inline std::string gpu_error_message(const char* library, const char* file, int line, const char* call,
                                     const char* error) {
  std::string path = file ? file : "?";
  const size_t slash = path.find_last_of('/');
  if (slash != std::string::npos) path.erase(0, slash + 1);
  return std::string(library) + " error at " + path + ":" + std::to_string(line) + ": " + call + ": " +
         (error && *error ? error : "unknown error");
}

[[noreturn]] inline void throw_gpu_error(const char* library, const char* file, int line, const char* call,
                                         const char* error) {
  throw GpuError(gpu_error_message(library, file, line, call, error));
}

// cuBLAS's status names without calling into cuBLAS: cairn-plan loads cuBLAS lazily (dlopen) and must be able to
// report a status without linking it (cublasGetStatusString would).
inline std::string cublas_status_text(int status) {
  switch (status) {
    case 1: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case 3: return "CUBLAS_STATUS_ALLOC_FAILED";
    case 7: return "CUBLAS_STATUS_INVALID_VALUE";
    case 8: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case 11: return "CUBLAS_STATUS_MAPPING_ERROR";
    case 13: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case 14: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case 15: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case 16: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "cuBLAS status " + std::to_string(status);
  }
}

}  // namespace cairn::kernels

// Throws GpuError when `call` (an expression of type cudaError_t) is not cudaSuccess. The failed call's error is
// cleared first (cudaGetLastError) when it is not sticky, so the next check does not report it again.
#define CAIRN_CUDA_CHECK(call)                                                                                  \
  do {                                                                                                          \
    const cudaError_t cairn_cuda_rc_ = (call);                                                                  \
    if (cairn_cuda_rc_ != cudaSuccess) {                                                                        \
      (void)cudaGetLastError();                                                                                 \
      ::cairn::kernels::throw_gpu_error("CUDA", __FILE__, __LINE__, #call, cudaGetErrorString(cairn_cuda_rc_)); \
    }                                                                                                           \
  } while (0)

// After a kernel launch (<<<...>>> returns nothing): the launch error, reported under the kernel's name `what`.
#define CAIRN_CUDA_CHECK_LAUNCH(what)                                                                             \
  do {                                                                                                            \
    const cudaError_t cairn_cuda_rc_ = cudaGetLastError();                                                        \
    if (cairn_cuda_rc_ != cudaSuccess)                                                                            \
      ::cairn::kernels::throw_gpu_error("CUDA", __FILE__, __LINE__, (std::string("launch of ") + (what)).c_str(), \
                                        cudaGetErrorString(cairn_cuda_rc_));                                      \
  } while (0)

// Throws GpuError when `call` (a cublasStatus_t) is not CUBLAS_STATUS_SUCCESS.
#define CAIRN_CUBLAS_CHECK(call)                                                                         \
  do {                                                                                                   \
    const int cairn_cublas_rc_ = static_cast<int>(call);                                                 \
    if (cairn_cublas_rc_ != 0)                                                                           \
      ::cairn::kernels::throw_gpu_error("cuBLAS", __FILE__, __LINE__, #call,                             \
                                        ::cairn::kernels::cublas_status_text(cairn_cublas_rc_).c_str()); \
  } while (0)
