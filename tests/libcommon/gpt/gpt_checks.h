// Comparison helper shared by the GPT model tests (CPU and CUDA).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>

// max |a - b| over max |b|: the largest difference relative to the reference tensor's scale (the plain difference
// when b is all zeros).
inline double max_rel(const float* a, const float* b, size_t n) {
  double scale = 0.0, diff = 0.0;
  for (size_t i = 0; i < n; i++) {
    scale = std::max(scale, (double)std::fabs(b[i]));
    diff = std::max(diff, (double)std::fabs(a[i] - b[i]));
  }
  return scale > 0 ? diff / scale : diff;
}
