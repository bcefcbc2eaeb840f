// Checks for failed GPU library calls in libcommon and the tools: the kernels' CUDA and cuBLAS checks (one definition,
// in cairn/kernels/gpu_check.h, because kernels build without libcommon) plus CAIRN_NCCL_CHECK, all with one message:
// "<library> error at <file>:<line>: <call>: <error string>". No CUDA or NCCL headers here: the macros name their
// types only where they are expanded.
#pragma once
#include "cairn/kernels/gpu_check.h"

// Throws cairn::kernels::GpuError when `call` (an ncclResult_t) is not ncclSuccess. NCCL's last-error text (which
// names the peer, transport or system call that failed) follows the result's string when NCCL has one.
#define CAIRN_NCCL_CHECK(call)                                                                                   \
  do {                                                                                                           \
    const ncclResult_t cairn_nccl_rc_ = (call);                                                                  \
    if (cairn_nccl_rc_ != ncclSuccess)                                                                           \
      ::cairn::kernels::throw_gpu_error(                                                                         \
          "NCCL", __FILE__, __LINE__, #call,                                                                     \
          ::cairn::gpu::nccl_error_text(ncclGetErrorString(cairn_nccl_rc_), ncclGetLastError(nullptr)).c_str()); \
  } while (0)

namespace cairn::gpu {

// "<result string>: <last error>" (just the result string when the last error is empty or null); pure, so tested
// without NCCL.
inline std::string nccl_error_text(const char* result, const char* last_error) {
  std::string text = result ? result : "unknown NCCL result";
  if (last_error && *last_error) text += std::string(": ") + last_error;
  return text;
}

}  // namespace cairn::gpu
