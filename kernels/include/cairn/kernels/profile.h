// Per-op timing for any backend: a wrapping Backend that times (and synchronizes after) every op it forwards.
#pragma once
#include <string>
#include <vector>

#include "cairn/kernels/backend.h"

namespace cairn::kernels {

struct OpTime {
  std::string op;
  long calls = 0;
  double seconds = 0.0;
};

// The matmul calls of one shape: out[n, oc] = inp[n, c] @ W forward; backward computes dweight (and dinp when
// grad_input), as backend.h's matmul_backward. What a cost model needs to price each GEMM shape apart.
struct GemmShapeTime {
  std::string op;  // "matmul_forward" or "matmul_backward"
  long n = 0, c = 0, oc = 0;
  bool grad_input = true;  // backward: dinp computed too (two GEMMs); forward: always true
  long calls = 0;
  double seconds = 0.0;
};

// A backend that forwards every call to `inner`, synchronizing after each op and adding its wall time to a
// process-wide table. One profiled backend at a time (the table is global); memory hooks are not timed.
const Backend& profiled_backend(const Backend& inner);
// Ops with at least one call, slowest first; reset clears the table (and the GEMM shapes).
std::vector<OpTime> profile_report();
// The matmul calls by shape, slowest first.
std::vector<GemmShapeTime> profile_gemm_shapes();
void profile_reset();

}  // namespace cairn::kernels
