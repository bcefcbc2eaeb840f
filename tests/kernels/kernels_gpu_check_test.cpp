// The GPU call checks (cairn/kernels/gpu_check.h, libcommon's cairn/gpu_check.h) on a machine without CUDA: the macros
// are expanded against stand-ins for the few CUDA / cuBLAS / NCCL names they use, so the test checks the message
// every tool prints (library, file:line, the call's text, the library's error string) and that success is silent.
#define BOOST_TEST_MODULE kernels_gpu_check
#include <boost/test/unit_test.hpp>
#include <string>

#include "cairn/gpu_check.h"
#include "cairn/kernels/gpu_check.h"

namespace {

// Stand-ins for the runtime names the macros expand to; unqualified lookup from the tests below finds these.
enum cudaError_t { cudaSuccess = 0, cudaErrorInvalidDevice = 101 };
const char* cudaGetErrorString(cudaError_t e) { return e == cudaErrorInvalidDevice ? "invalid device ordinal" : "?"; }
cudaError_t g_last_error = cudaSuccess;
cudaError_t cudaGetLastError() {
  const cudaError_t e = g_last_error;
  g_last_error = cudaSuccess;
  return e;
}
cudaError_t cudaSetDevice(int device) { return device < 2 ? cudaSuccess : cudaErrorInvalidDevice; }

enum ncclResult_t { ncclSuccess = 0, ncclSystemError = 2 };
const char* ncclGetErrorString(ncclResult_t) { return "unhandled system error"; }
const char* g_nccl_last = "";
const char* ncclGetLastError(void*) { return g_nccl_last; }
ncclResult_t ncclCommInitRank(int ranks) { return ranks > 0 ? ncclSuccess : ncclSystemError; }

int cublasCreate(int fail) { return fail ? 3 : 0; }

// The exception's message, or "" when none was thrown.
template <class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const cairn::kernels::GpuError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_CASE(message_format) {
  BOOST_TEST(cairn::kernels::gpu_error_message("CUDA", "/src/cairn/kernels/cuda/gemm.cu", 42, "cudaMalloc(&p, n)",
                                               "out of memory") ==
             "CUDA error at gemm.cu:42: cudaMalloc(&p, n): out of memory");
  BOOST_TEST(cairn::kernels::gpu_error_message("NCCL", "plain.cpp", 7, "ncclGroupEnd()", nullptr) ==
             "NCCL error at plain.cpp:7: ncclGroupEnd(): unknown error");
  BOOST_TEST(cairn::gpu::nccl_error_text("unhandled system error", "socket closed by peer 3") ==
             "unhandled system error: socket closed by peer 3");
  BOOST_TEST(cairn::gpu::nccl_error_text("invalid argument", "") == "invalid argument");
  BOOST_TEST(cairn::kernels::cublas_status_text(13) == "CUBLAS_STATUS_EXECUTION_FAILED");
  BOOST_TEST(cairn::kernels::cublas_status_text(99) == "cuBLAS status 99");
}

BOOST_AUTO_TEST_CASE(cuda_check_macro) {
  BOOST_TEST(message_of([] { CAIRN_CUDA_CHECK(cudaSetDevice(1)); }) == "");
  const int line = __LINE__ + 1;
  const std::string msg = message_of([] { CAIRN_CUDA_CHECK(cudaSetDevice(7)); });
  BOOST_TEST(msg == "CUDA error at kernels_gpu_check_test.cpp:" + std::to_string(line) +
                        ": cudaSetDevice(7): invalid device ordinal");
  g_last_error = cudaErrorInvalidDevice;
  const std::string launch = message_of([] { CAIRN_CUDA_CHECK_LAUNCH("gelu_forward"); });
  BOOST_TEST(launch.find(": launch of gelu_forward: invalid device ordinal") != std::string::npos, launch);
  BOOST_TEST(message_of([] { CAIRN_CUDA_CHECK_LAUNCH("gelu_forward"); }) == "");  // the error was consumed
}

BOOST_AUTO_TEST_CASE(nccl_and_cublas_check_macros) {
  BOOST_TEST(message_of([] { CAIRN_NCCL_CHECK(ncclCommInitRank(4)); }) == "");
  g_nccl_last = "connect to 10.0.0.2 failed";
  const std::string nccl = message_of([] { CAIRN_NCCL_CHECK(ncclCommInitRank(0)); });
  BOOST_TEST(nccl.rfind("NCCL error at kernels_gpu_check_test.cpp:", 0) == 0, nccl);
  BOOST_TEST(nccl.find(": ncclCommInitRank(0): unhandled system error: connect to 10.0.0.2 failed") !=
                 std::string::npos,
             nccl);
  const std::string cublas = message_of([] { CAIRN_CUBLAS_CHECK(cublasCreate(1)); });
  BOOST_TEST(cublas.find(": cublasCreate(1): CUBLAS_STATUS_ALLOC_FAILED") != std::string::npos, cublas);
  BOOST_TEST(message_of([] { CAIRN_CUBLAS_CHECK(cublasCreate(0)); }) == "");
}
