// Internal interface between the CUDA backend (cuda_backend.cu) and the flash-attention launchers (flash_attention.cu).
#pragma once

namespace cairn::kernels {
// Whether the flash kernels handle this shape (head dim C / NH <= 128; others use the backend's simple kernels).
bool flash_attention_supported(int C, int NH);
// Same contract as Backend::attention_forward / attention_backward (device pointers, default stream); `delta` is
// device scratch of B * NH * T floats for D = rowsum(dO o O).
void flash_attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH);
void flash_attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                              float* delta, int B, int T, int C, int NH);
}  // namespace cairn::kernels
