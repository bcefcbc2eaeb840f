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
// Same contract as Backend::attention_forward_block / attention_backward_block (dK, dV added when accumulate_kv, else
// written); `delta` is device scratch of B * NH * Tq floats. The plain ops are these with q = kv, Tq = Tk = T,
// q_pos = 0 and dK/dV written.
void flash_attention_forward_block(float* out, float* lse, const float* q_qkv, const float* kv_qkv, int B, int Tq,
                                   int Tk, int q_pos, int C, int NH);
void flash_attention_backward_block(float* dq_qkv, float* dkv_qkv, const float* dout, const float* q_qkv,
                                    const float* kv_qkv, const float* out, const float* lse, float* delta, int B,
                                    int Tq, int Tk, int q_pos, int C, int NH, bool accumulate_kv);
}  // namespace cairn::kernels
