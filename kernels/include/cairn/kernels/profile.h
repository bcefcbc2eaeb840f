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

// A backend that forwards every call to `inner`, synchronizing after each op and adding its wall time to a
// process-wide table. One profiled backend at a time (the table is global); memory hooks are not timed.
const Backend& profiled_backend(const Backend& inner);
// Ops with at least one call, slowest first; reset clears the table.
std::vector<OpTime> profile_report();
void profile_reset();

}  // namespace cairn::kernels
