// CUDA causal attention: the dispatch between the bf16 tensor-core flash kernels (flash_attention_bf16.cu), the fp32
// flash kernels (flash_attention.cu) and the simple one-thread-per-(b, h, query row) kernels below (online softmax,
// backward recomputes P from the saved log-sum-exp), chosen by CAIRN_CUDA_ATTENTION or the cuda.h switches.
#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "cairn/kernels/cuda.h"
#include "cuda_common.cuh"
#include "flash_attention.h"
#include "flash_attention_bf16.h"

namespace cairn::kernels {
namespace cuda {
namespace {

constexpr int kMaxHeadDim = 256;  // the simple kernels keep one row of q/o per thread

// The simple kernels. HD > 0 compiles a kernel for that head dimension (the per-thread rows then live in registers:
// loops have constant trip counts and are unrolled); HD = 0 is the generic version for any head dim <= kMaxHeadDim
// (local memory). Same operations in the same order either way, so results do not depend on which one runs.
template <int HD>
__global__ void attention_forward_kernel(float* out, float* lse, const float* qkv, int B, int T, int C, int NH) {
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= B * NH * T) return;
  const int i = idx % T, h = (idx / T) % NH, b = idx / (T * NH);
  const int hd = HD > 0 ? HD : C / NH;
  const float scale = rsqrtf((float)hd);
  const float* q = qkv + ((size_t)b * T + i) * 3 * C + h * hd;
  float o[HD > 0 ? HD : kMaxHeadDim];
#pragma unroll
  for (int d = 0; d < hd; d++) o[d] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int j = 0; j <= i; j++) {
    const float* k = qkv + ((size_t)b * T + j) * 3 * C + C + h * hd;
    const float* v = k + C;
    float s = 0.0f;
#pragma unroll
    for (int d = 0; d < hd; d++) s += q[d] * k[d];
    s *= scale;
    const float m_new = fmaxf(m, s);
    const float corr = expf(m - m_new), p = expf(s - m_new);
    l = l * corr + p;
#pragma unroll
    for (int d = 0; d < hd; d++) o[d] = o[d] * corr + p * v[d];
    m = m_new;
  }
  float* dst = out + ((size_t)b * T + i) * C + h * hd;
#pragma unroll
  for (int d = 0; d < hd; d++) dst[d] = o[d] / l;
  lse[((size_t)b * NH + h) * T + i] = m + logf(l);
}

// D[b,h,i] = dO_i . O_i
__global__ void attention_delta_kernel(float* D, const float* dout, const float* out, int B, int T, int C, int NH) {
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= B * NH * T) return;
  const int i = idx % T, h = (idx / T) % NH, b = idx / (T * NH), hd = C / NH;
  const size_t off = ((size_t)b * T + i) * C + h * hd;
  float s = 0.0f;
  for (int d = 0; d < hd; d++) s += dout[off + d] * out[off + d];
  D[idx] = s;
}

// dQ_i = scale * sum_{j<=i} P_ij (dO_i.V_j - D_i) K_j   (one thread per query row)
template <int HD>
__global__ void attention_dq_kernel(float* dqkv, const float* dout, const float* qkv, const float* lse, const float* D,
                                    int B, int T, int C, int NH) {
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= B * NH * T) return;
  const int i = idx % T, h = (idx / T) % NH, b = idx / (T * NH), hd = HD > 0 ? HD : C / NH;
  const float scale = rsqrtf((float)hd);
  const float* q = qkv + ((size_t)b * T + i) * 3 * C + h * hd;
  const float* dO = dout + ((size_t)b * T + i) * C + h * hd;
  float acc[HD > 0 ? HD : kMaxHeadDim];
#pragma unroll
  for (int d = 0; d < hd; d++) acc[d] = 0.0f;
  for (int j = 0; j <= i; j++) {
    const float* k = qkv + ((size_t)b * T + j) * 3 * C + C + h * hd;
    const float* v = k + C;
    float s = 0.0f, dp = 0.0f;
#pragma unroll
    for (int d = 0; d < hd; d++) {
      s += q[d] * k[d];
      dp += dO[d] * v[d];
    }
    const float p = expf(s * scale - lse[idx]);
    const float ds = p * (dp - D[idx]) * scale;
#pragma unroll
    for (int d = 0; d < hd; d++) acc[d] += ds * k[d];
  }
  float* dq = dqkv + ((size_t)b * T + i) * 3 * C + h * hd;
#pragma unroll
  for (int d = 0; d < hd; d++) dq[d] = acc[d];
}

// dK_j = scale * sum_{i>=j} dS_ij Q_i, dV_j = sum_{i>=j} P_ij dO_i   (one thread per key row, no atomics)
template <int HD>
__global__ void attention_dkv_kernel(float* dqkv, const float* dout, const float* qkv, const float* lse, const float* D,
                                     int B, int T, int C, int NH) {
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= B * NH * T) return;
  const int j = idx % T, h = (idx / T) % NH, b = idx / (T * NH), hd = HD > 0 ? HD : C / NH;
  const float scale = rsqrtf((float)hd);
  const float* k = qkv + ((size_t)b * T + j) * 3 * C + C + h * hd;
  const float* v = k + C;
  float dk[HD > 0 ? HD : kMaxHeadDim], dv[HD > 0 ? HD : kMaxHeadDim];
#pragma unroll
  for (int d = 0; d < hd; d++) dk[d] = dv[d] = 0.0f;
  const size_t row0 = ((size_t)b * NH + h) * T;
  for (int i = j; i < T; i++) {
    const float* q = qkv + ((size_t)b * T + i) * 3 * C + h * hd;
    const float* dO = dout + ((size_t)b * T + i) * C + h * hd;
    float s = 0.0f, dp = 0.0f;
#pragma unroll
    for (int d = 0; d < hd; d++) {
      s += q[d] * k[d];
      dp += dO[d] * v[d];
    }
    const float p = expf(s * scale - lse[row0 + i]);
    const float ds = p * (dp - D[row0 + i]) * scale;
#pragma unroll
    for (int d = 0; d < hd; d++) {
      dk[d] += ds * q[d];
      dv[d] += p * dO[d];
    }
  }
  float* row = dqkv + ((size_t)b * T + j) * 3 * C + h * hd;
#pragma unroll
  for (int d = 0; d < hd; d++) {
    row[C + d] = dk[d];
    row[2 * C + d] = dv[d];
  }
}

// Attention kernels: flash (default) or simple, and in bf16 mode whether flash means the bf16 tensor-core kernels
// (default) or the fp32 ones; -1 until decided by CAIRN_CUDA_ATTENTION (flash | flash-fp32 | simple) or the setters.
std::atomic<int> g_flash_attention{-1};
std::atomic<int> g_bf16_attention{-1};

void attention_choice_from_env() {
  const char* env = std::getenv("CAIRN_CUDA_ATTENTION");
  const std::string v = env ? env : "";
  if (!v.empty() && v != "flash" && v != "flash-fp32" && v != "simple")
    throw std::runtime_error("CAIRN_CUDA_ATTENTION=\"" + v + "\": expected \"flash\", \"flash-fp32\" or \"simple\"");
  int expected = -1;
  g_flash_attention.compare_exchange_strong(expected, v == "simple" ? 0 : 1);
  expected = -1;
  g_bf16_attention.compare_exchange_strong(expected, v == "flash-fp32" ? 0 : 1);
}

bool flash_attention_on() {
  if (g_flash_attention.load() < 0) attention_choice_from_env();
  return g_flash_attention.load() != 0;
}

bool bf16_attention_on() {
  if (g_bf16_attention.load() < 0) attention_choice_from_env();
  return g_bf16_attention.load() != 0;
}

// precision = "bf16" (bf16 matmuls on) and a head dim of 64 or 128: the bf16 tensor-core flash kernels.
bool use_bf16_flash(int C, int NH) {
  return cuda_bf16_matmul() && flash_attention_on() && bf16_attention_on() && flash_attention_bf16_supported(C, NH);
}

void check_head_dim(int C, int NH) {
  if (C / NH > kMaxHeadDim)
    throw std::runtime_error("CUDA attention: head dim " + std::to_string(C / NH) + " > " +
                             std::to_string(kMaxHeadDim));
}

}  // namespace

void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH) {
  if (use_bf16_flash(C, NH)) {
    flash_attention_bf16_forward(out, lse, qkv, B, T, C, NH);
    return;
  }
  if (flash_attention_on() && flash_attention_supported(C, NH)) {
    flash_attention_forward(out, lse, qkv, B, T, C, NH);
    return;
  }
  check_head_dim(C, NH);
  const unsigned grid = blocks_for((size_t)B * NH * T, 64);
  switch (C / NH) {
    case 64: attention_forward_kernel<64><<<grid, 64>>>(out, lse, qkv, B, T, C, NH); break;
    case 128: attention_forward_kernel<128><<<grid, 64>>>(out, lse, qkv, B, T, C, NH); break;
    default: attention_forward_kernel<0><<<grid, 64>>>(out, lse, qkv, B, T, C, NH);
  }
  CAIRN_CUDA_CHECK_LAUNCH("attention_forward");
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse, int B,
                        int T, int C, int NH) {
  const size_t rows = (size_t)B * NH * T;
  if (use_bf16_flash(C, NH)) {
    flash_attention_bf16_backward(dqkv, dout, qkv, out, lse, scratch(rows), B, T, C, NH);
    return;
  }
  if (flash_attention_on() && flash_attention_supported(C, NH)) {
    flash_attention_backward(dqkv, dout, qkv, out, lse, scratch(rows), B, T, C, NH);
    return;
  }
  check_head_dim(C, NH);
  float* D = scratch(rows);
  attention_delta_kernel<<<blocks_for(rows), kThreads>>>(D, dout, out, B, T, C, NH);
  const unsigned grid = blocks_for(rows, 64);
  switch (C / NH) {
    case 64:
      attention_dq_kernel<64><<<grid, 64>>>(dqkv, dout, qkv, lse, D, B, T, C, NH);
      attention_dkv_kernel<64><<<grid, 64>>>(dqkv, dout, qkv, lse, D, B, T, C, NH);
      break;
    case 128:
      attention_dq_kernel<128><<<grid, 64>>>(dqkv, dout, qkv, lse, D, B, T, C, NH);
      attention_dkv_kernel<128><<<grid, 64>>>(dqkv, dout, qkv, lse, D, B, T, C, NH);
      break;
    default:
      attention_dq_kernel<0><<<grid, 64>>>(dqkv, dout, qkv, lse, D, B, T, C, NH);
      attention_dkv_kernel<0><<<grid, 64>>>(dqkv, dout, qkv, lse, D, B, T, C, NH);
  }
  CAIRN_CUDA_CHECK_LAUNCH("attention_backward");
}

}  // namespace cuda

// Attention kernels: flash (tiled, flash_attention.cu; the default) or the simple one-row-per-thread ones.
void cuda_set_flash_attention(bool on) { cuda::g_flash_attention = on ? 1 : 0; }
bool cuda_flash_attention() { return cuda::flash_attention_on(); }
// bf16 mode's attention: the bf16 tensor-core flash kernels (flash_attention_bf16.cu; the default) or the fp32 ones.
void cuda_set_bf16_attention(bool on) { cuda::g_bf16_attention = on ? 1 : 0; }
bool cuda_bf16_attention() { return cuda::bf16_attention_on(); }

}  // namespace cairn::kernels
