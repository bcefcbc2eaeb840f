// bf16 on the host, bit-exact with the device's round-to-nearest-even conversions: the host branches of the bf16
// flash-attention primitives and the emulation tests round through these. Host code only.
#pragma once
#include <stdint.h>

#include <cstring>

namespace cairn::kernels::flash_bf16 {

// float -> bf16 bits, round to nearest even (NaN stays a quiet NaN): what __floats2bfloat162_rn does on the device.
inline uint16_t bf16_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
inline float bf16_to_float(uint16_t h) {
  const uint32_t u = (uint32_t)h << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}
inline float round_bf16(float x) { return bf16_to_float(bf16_bits(x)); }

}  // namespace cairn::kernels::flash_bf16
