// The CUDA backend's entry points (defined only in builds with CAIRN_HAVE_CUDA_BACKEND).
#pragma once
#include <string>

#include "cairn/kernels/backend.h"

namespace cairn::kernels {
// The CUDA op table, or nullptr when no usable GPU is present.
const Backend* cuda_backend_or_null();
// Why the CUDA backend cannot be used ("" when it can), for skip messages and errors.
std::string cuda_unavailable_reason();
}  // namespace cairn::kernels
