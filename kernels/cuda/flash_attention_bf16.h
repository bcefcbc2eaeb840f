// Internal interface between the CUDA backend (cuda_backend.cu) and the bf16 tensor-core flash-attention launchers
// (flash_attention_bf16.cu), used in precision = "bf16" mode.
#pragma once

namespace cairn::kernels {
// Whether the bf16 tensor-core kernels handle this shape (head dim C / NH of 64 or 128; others use the fp32 flash
// kernels).
bool flash_attention_bf16_supported(int C, int NH);
// Same contract as Backend::attention_forward / attention_backward (fp32 device pointers, default stream): tiles are
// rounded to bf16 in shared memory, products accumulate in fp32, softmax statistics stay fp32. `delta` is device
// scratch of B * NH * T floats for D = rowsum(dO o O).
void flash_attention_bf16_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH);
void flash_attention_bf16_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                                   float* delta, int B, int T, int C, int NH);
// Same contract as Backend::attention_forward_block / attention_backward_block (dK, dV added when accumulate_kv, else
// written), as flash_attention.h's fp32 block ops; `delta` is device scratch of B * NH * Tq floats.
void flash_attention_bf16_forward_block(float* out, float* lse, const float* q_qkv, const float* kv_qkv, int B, int Tq,
                                        int Tk, int q_pos, int C, int NH);
void flash_attention_bf16_backward_block(float* dq_qkv, float* dkv_qkv, const float* dout, const float* q_qkv,
                                         const float* kv_qkv, const float* out, const float* lse, float* delta, int B,
                                         int Tq, int Tk, int q_pos, int C, int NH, bool accumulate_kv);
}  // namespace cairn::kernels
