// CUDA causal attention: the dispatch between the bf16 tensor-core flash kernels (flash_attention_bf16.cu), the fp32
// flash kernels (flash_attention.cu) and the simple one-thread-per-(b, h, query row) kernels below (online softmax,
// backward recomputes P from the saved log-sum-exp), chosen by CAIRN_CUDA_ATTENTION or the cuda.h switches.
#include <algorithm>
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

void check_head_dim(int C, int NH) {
  if (C / NH > kMaxHeadDim)
    throw std::runtime_error("CUDA attention: head dim " + std::to_string(C / NH) + " > " +
                             std::to_string(kMaxHeadDim));
}

// The simple kernels, written for a block of attention (the plain ops are the block with q_pos = 0, Tq = Tk = T and
// q_qkv = kv_qkv): Tq queries (rows of q_qkv [B, Tq, 3C]) at sequence positions q_pos.., query i attending the keys
// 0 .. min(q_pos + i, Tk - 1) (rows of kv_qkv [B, Tk, 3C]); lse and D are [B, NH, Tq]. HD > 0 compiles a kernel for
// that head dimension (the per-thread rows then live in registers: loops have constant trip counts and are unrolled);
// HD = 0 is the generic version for any head dim <= kMaxHeadDim (local memory). Same operations in the same order
// either way, so results do not depend on which one runs.
template <int HD>
__global__ void attention_forward_kernel(float* out, float* lse, const float* q_qkv, const float* kv_qkv, int B, int Tq,
                                         int Tk, int q_pos, int C, int NH) {
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= B * NH * Tq) return;
  const int i = idx % Tq, h = (idx / Tq) % NH, b = idx / (Tq * NH);
  const int hd = HD > 0 ? HD : C / NH;
  const float scale = rsqrtf((float)hd);
  const float* q = q_qkv + ((size_t)b * Tq + i) * 3 * C + h * hd;
  float o[HD > 0 ? HD : kMaxHeadDim];
#pragma unroll
  for (int d = 0; d < hd; d++) o[d] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int j = 0, last = min(q_pos + i, Tk - 1); j <= last; j++) {
    const float* k = kv_qkv + ((size_t)b * Tk + j) * 3 * C + C + h * hd;
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
  float* dst = out + ((size_t)b * Tq + i) * C + h * hd;
#pragma unroll
  for (int d = 0; d < hd; d++) dst[d] = o[d] / l;
  lse[idx] = m + logf(l);  // idx = (b * NH + h) * Tq + i
}

// D[b,h,i] = dO_i . O_i   (dout, out [B, T, C]; D [B, NH, T])
__global__ void attention_delta_kernel(float* D, const float* dout, const float* out, int B, int T, int C, int NH) {
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= B * NH * T) return;
  const int i = idx % T, h = (idx / T) % NH, b = idx / (T * NH), hd = C / NH;
  const size_t off = ((size_t)b * T + i) * C + h * hd;
  float s = 0.0f;
  for (int d = 0; d < hd; d++) s += dout[off + d] * out[off + d];
  D[idx] = s;
}

// dQ_i = scale * sum_{j<=q_pos+i} P_ij (dO_i.V_j - D_i) K_j into the q third of dq_qkv (one thread per query row)
template <int HD>
__global__ void attention_dq_kernel(float* dq_qkv, const float* dout, const float* q_qkv, const float* kv_qkv,
                                    const float* lse, const float* D, int B, int Tq, int Tk, int q_pos, int C, int NH) {
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= B * NH * Tq) return;
  const int i = idx % Tq, h = (idx / Tq) % NH, b = idx / (Tq * NH), hd = HD > 0 ? HD : C / NH;
  const float scale = rsqrtf((float)hd);
  const float* q = q_qkv + ((size_t)b * Tq + i) * 3 * C + h * hd;
  const float* dO = dout + ((size_t)b * Tq + i) * C + h * hd;
  float acc[HD > 0 ? HD : kMaxHeadDim];
#pragma unroll
  for (int d = 0; d < hd; d++) acc[d] = 0.0f;
  for (int j = 0, last = min(q_pos + i, Tk - 1); j <= last; j++) {
    const float* k = kv_qkv + ((size_t)b * Tk + j) * 3 * C + C + h * hd;
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
  float* dq = dq_qkv + ((size_t)b * Tq + i) * 3 * C + h * hd;
#pragma unroll
  for (int d = 0; d < hd; d++) dq[d] = acc[d];
}

// dK_j = scale * sum_{i: q_pos+i>=j} dS_ij Q_i, dV_j = sum P_ij dO_i into the k and v thirds of dkv_qkv, added when
// `accumulate` (the block op: every query block of a sequence adds to the same keys), else overwritten (the plain op).
// One thread per key row j < min(Tk, q_pos + Tq) (the keys the block's queries reach; rows past them are left alone),
// so no atomics.
template <int HD>
__global__ void attention_dkv_kernel(float* dkv_qkv, const float* dout, const float* q_qkv, const float* kv_qkv,
                                     const float* lse, const float* D, int B, int Tq, int Tk, int q_pos, int C, int NH,
                                     bool accumulate) {
  const int Tn = min(Tk, q_pos + Tq);
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= B * NH * Tn) return;
  const int j = idx % Tn, h = (idx / Tn) % NH, b = idx / (Tn * NH), hd = HD > 0 ? HD : C / NH;
  const float scale = rsqrtf((float)hd);
  const float* k = kv_qkv + ((size_t)b * Tk + j) * 3 * C + C + h * hd;
  const float* v = k + C;
  float dk[HD > 0 ? HD : kMaxHeadDim], dv[HD > 0 ? HD : kMaxHeadDim];
#pragma unroll
  for (int d = 0; d < hd; d++) dk[d] = dv[d] = 0.0f;
  const size_t row0 = ((size_t)b * NH + h) * Tq;
  for (int i = max(0, j - q_pos); i < Tq; i++) {
    const float* q = q_qkv + ((size_t)b * Tq + i) * 3 * C + h * hd;
    const float* dO = dout + ((size_t)b * Tq + i) * C + h * hd;
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
  float* row = dkv_qkv + ((size_t)b * Tk + j) * 3 * C + h * hd;
  if (accumulate) {
#pragma unroll
    for (int d = 0; d < hd; d++) {
      row[C + d] += dk[d];
      row[2 * C + d] += dv[d];
    }
  } else {
#pragma unroll
    for (int d = 0; d < hd; d++) {
      row[C + d] = dk[d];
      row[2 * C + d] = dv[d];
    }
  }
}

// Launches of the simple kernels, shared by the plain ops (when they do not take a flash path) and the block ops.
void simple_attention_forward(float* out, float* lse, const float* q_qkv, const float* kv_qkv, int B, int Tq, int Tk,
                              int q_pos, int C, int NH) {
  check_head_dim(C, NH);
  if ((size_t)B * NH * Tq == 0) return;  // an empty grid is a launch error
  const unsigned grid = blocks_for((size_t)B * NH * Tq, 64);
  switch (C / NH) {
    case 64: attention_forward_kernel<64><<<grid, 64>>>(out, lse, q_qkv, kv_qkv, B, Tq, Tk, q_pos, C, NH); break;
    case 128: attention_forward_kernel<128><<<grid, 64>>>(out, lse, q_qkv, kv_qkv, B, Tq, Tk, q_pos, C, NH); break;
    default: attention_forward_kernel<0><<<grid, 64>>>(out, lse, q_qkv, kv_qkv, B, Tq, Tk, q_pos, C, NH);
  }
  CAIRN_CUDA_CHECK_LAUNCH("attention_forward (simple kernels)");
}

template <int HD>
void launch_simple_backward(float* dq_qkv, float* dkv_qkv, const float* dout, const float* q_qkv, const float* kv_qkv,
                            const float* lse, const float* D, int B, int Tq, int Tk, int q_pos, int C, int NH,
                            bool accumulate_kv) {
  attention_dq_kernel<HD>
      <<<blocks_for((size_t)B * NH * Tq, 64), 64>>>(dq_qkv, dout, q_qkv, kv_qkv, lse, D, B, Tq, Tk, q_pos, C, NH);
  attention_dkv_kernel<HD>
      <<<blocks_for((size_t)B * NH * std::min(Tk, q_pos + Tq), 64), 64>>>(dkv_qkv, dout, q_qkv, kv_qkv, lse, D, B, Tq,
                                                                          Tk, q_pos, C, NH, accumulate_kv);
}

void simple_attention_backward(float* dq_qkv, float* dkv_qkv, const float* dout, const float* q_qkv,
                               const float* kv_qkv, const float* out, const float* lse, int B, int Tq, int Tk,
                               int q_pos, int C, int NH, bool accumulate_kv) {
  check_head_dim(C, NH);
  const size_t rows = (size_t)B * NH * Tq;
  if (rows == 0) return;  // no queries: no gradient to add, and an empty grid is a launch error
  float* D = scratch(rows);
  attention_delta_kernel<<<blocks_for(rows), kThreads>>>(D, dout, out, B, Tq, C, NH);
  switch (C / NH) {
    case 64:
      launch_simple_backward<64>(dq_qkv, dkv_qkv, dout, q_qkv, kv_qkv, lse, D, B, Tq, Tk, q_pos, C, NH, accumulate_kv);
      break;
    case 128:
      launch_simple_backward<128>(dq_qkv, dkv_qkv, dout, q_qkv, kv_qkv, lse, D, B, Tq, Tk, q_pos, C, NH, accumulate_kv);
      break;
    default:
      launch_simple_backward<0>(dq_qkv, dkv_qkv, dout, q_qkv, kv_qkv, lse, D, B, Tq, Tk, q_pos, C, NH, accumulate_kv);
  }
  CAIRN_CUDA_CHECK_LAUNCH("attention_backward (simple kernels)");
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
  simple_attention_forward(out, lse, qkv, qkv, B, T, T, 0, C, NH);
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
  // every key row gets its dK, dV written (overwrite mode), so dqkv needs no zeroing pass
  simple_attention_backward(dqkv, dqkv, dout, qkv, qkv, out, lse, B, T, T, 0, C, NH, false);
}

// The block ops (context parallelism) take the plain ops' paths: both flash kernels take a block of queries at an
// offset against a block of keys (flash::Span); the bf16 tensor-core ones in bf16 mode at head dims 64 and 128, the
// fp32 ones otherwise when flash is on, the simple kernels when it is off (CAIRN_CUDA_ATTENTION=simple, head dims over
// 128).
void attention_forward_block(float* out, float* lse, const float* q_qkv, const float* kv_qkv, int B, int Tq, int Tk,
                             int q_pos, int C, int NH) {
  if (use_bf16_flash(C, NH)) {
    flash_attention_bf16_forward_block(out, lse, q_qkv, kv_qkv, B, Tq, Tk, q_pos, C, NH);
    return;
  }
  if (flash_attention_on() && flash_attention_supported(C, NH)) {
    flash_attention_forward_block(out, lse, q_qkv, kv_qkv, B, Tq, Tk, q_pos, C, NH);
    return;
  }
  simple_attention_forward(out, lse, q_qkv, kv_qkv, B, Tq, Tk, q_pos, C, NH);
}

void attention_backward_block(float* dq_qkv, float* dkv_qkv, const float* dout, const float* q_qkv, const float* kv_qkv,
                              const float* out, const float* lse, int B, int Tq, int Tk, int q_pos, int C, int NH) {
  if (use_bf16_flash(C, NH)) {
    flash_attention_bf16_backward_block(dq_qkv, dkv_qkv, dout, q_qkv, kv_qkv, out, lse, scratch((size_t)B * NH * Tq), B,
                                        Tq, Tk, q_pos, C, NH, true);
    return;
  }
  if (flash_attention_on() && flash_attention_supported(C, NH)) {
    flash_attention_backward_block(dq_qkv, dkv_qkv, dout, q_qkv, kv_qkv, out, lse, scratch((size_t)B * NH * Tq), B, Tq,
                                   Tk, q_pos, C, NH, true);
    return;
  }
  simple_attention_backward(dq_qkv, dkv_qkv, dout, q_qkv, kv_qkv, out, lse, B, Tq, Tk, q_pos, C, NH, true);
}

// One thread per (b, h, i) row, in lse's order; the formula is the CPU backends' (merge_attention_row).
__global__ void attention_merge_kernel(float* out, float* lse, const float* part_out, const float* part_lse, int B,
                                       int T, int C, int NH) {
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= B * NH * T) return;
  const int i = idx % T, h = (idx / T) % NH, b = idx / (T * NH), hd = C / NH;
  const size_t at = ((size_t)b * T + i) * C + (size_t)h * hd;
  merge_attention_row(out + at, lse[idx], part_out + at, part_lse[idx], hd);
}

void attention_merge(float* out, float* lse, const float* part_out, const float* part_lse, int B, int T, int C,
                     int NH) {
  const size_t rows = (size_t)B * NH * T;
  if (rows == 0) return;
  attention_merge_kernel<<<blocks_for(rows), kThreads>>>(out, lse, part_out, part_lse, B, T, C, NH);
  CAIRN_CUDA_CHECK_LAUNCH("attention_merge");
}

}  // namespace cuda

// Attention kernels: flash (tiled, flash_attention.cu; the default) or the simple one-row-per-thread ones.
void cuda_set_flash_attention(bool on) { cuda::g_flash_attention = on ? 1 : 0; }
bool cuda_flash_attention() { return cuda::flash_attention_on(); }
// bf16 mode's attention: the bf16 tensor-core flash kernels (flash_attention_bf16.cu; the default) or the fp32 ones.
void cuda_set_bf16_attention(bool on) { cuda::g_bf16_attention = on ? 1 : 0; }
bool cuda_bf16_attention() { return cuda::bf16_attention_on(); }

}  // namespace cairn::kernels
