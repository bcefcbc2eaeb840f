// The CUDA backend: the same op table as the CPU backends, on device memory (fp32 storage, cuBLAS GEMMs).
//
// Layouts and gradient semantics are those of cairn/kernels/backend.h. Reductions that feed parameter
// gradients run per column in a fixed order (no atomics), so results are deterministic run to run.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "cairn/kernels/backend.h"

namespace cairn::kernels {
namespace {

constexpr float kLayerNormEps = 1e-5f;
constexpr float kGeluScaling = 0.7978845608028654f;  // sqrt(2/pi)
constexpr int kWarp = 32;

void check_cuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(std::string("CUDA ") + what + ": " + cudaGetErrorString(err));
}
void check_cublas(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(std::string("cuBLAS ") + what + " failed: status " + std::to_string(int(st)));
}
#define CAIRN_CUDA_LAUNCHED(name) check_cuda(cudaGetLastError(), name)

cublasHandle_t cublas() {
  static cublasHandle_t handle = [] {
    cublasHandle_t h = nullptr;
    check_cublas(cublasCreate(&h), "cublasCreate");
    // fp32 reference numerics: no TF32 unless asked for (parity tests compare against the CPU reference).
    const char* tf32 = std::getenv("CAIRN_CUDA_TF32");
    check_cublas(cublasSetMathMode(h, tf32 && tf32[0] == '1' ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH),
                 "cublasSetMathMode");
    return h;
  }();
  return handle;
}

inline unsigned blocks_for(size_t n, unsigned threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

__device__ inline float warp_sum(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ inline float warp_max(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// ------------------------------------------------------------------ memory

void* dev_alloc(size_t bytes) {
  void* p = nullptr;
  if (bytes == 0) return nullptr;
  check_cuda(cudaMalloc(&p, bytes), "cudaMalloc");
  check_cuda(cudaMemset(p, 0, bytes), "cudaMemset");
  return p;
}
void dev_free(void* p) {
  if (p) cudaFree(p);
}
void to_device(void* dst, const void* src, size_t bytes) { check_cuda(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "memcpy H2D"); }
void to_host(void* dst, const void* src, size_t bytes) { check_cuda(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "memcpy D2H"); }
void dev_copy(void* dst, const void* src, size_t bytes) { check_cuda(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice), "memcpy D2D"); }
void dev_zero(void* p, size_t bytes) { check_cuda(cudaMemset(p, 0, bytes), "cudaMemset"); }
void dev_sync() { check_cuda(cudaDeviceSynchronize(), "synchronize"); }

// ------------------------------------------------------------------ embedding

__global__ void embedding_forward_kernel(float* out, const int32_t* inp, const float* wte, const float* wpe,
                                         int T, int C, size_t total) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= total) return;
  size_t bt = i / C;
  int c = static_cast<int>(i % C);
  int t = static_cast<int>(bt % T);
  out[i] = wte[(size_t)inp[bt] * C + c] + wpe[(size_t)t * C + c];
}

// dwpe[t,c] += sum_b dout[b,t,c]: one thread per (t,c), fixed order over b.
__global__ void embedding_backward_pos_kernel(float* dwpe, const float* dout, int B, int T, int C) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= (size_t)T * C) return;
  float s = 0.0f;
  for (int b = 0; b < B; b++) s += dout[(size_t)b * T * C + i];
  dwpe[i] += s;
}

// dwte[v,c] += sum over positions with token v: one thread per channel walks the positions in order, so
// tokens that repeat accumulate deterministically (no atomics).
__global__ void embedding_backward_tok_kernel(float* dwte, const float* dout, const int32_t* inp, int BT, int C) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int bt = 0; bt < BT; bt++) dwte[(size_t)inp[bt] * C + c] += dout[(size_t)bt * C + c];
}

void embedding_forward(float* out, const int32_t* inp, const float* wte, const float* wpe, int B, int T, int C) {
  size_t total = (size_t)B * T * C;
  embedding_forward_kernel<<<blocks_for(total, 256), 256>>>(out, inp, wte, wpe, T, C, total);
  CAIRN_CUDA_LAUNCHED("embedding_forward");
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* inp, int B, int T, int C) {
  embedding_backward_pos_kernel<<<blocks_for((size_t)T * C, 256), 256>>>(dwpe, dout, B, T, C);
  embedding_backward_tok_kernel<<<blocks_for(C, 128), 128>>>(dwte, dout, inp, B * T, C);
  CAIRN_CUDA_LAUNCHED("embedding_backward");
}

// ------------------------------------------------------------------ layernorm

// One warp per row.
__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp, const float* w,
                                         const float* bias, int N, int C) {
  int row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  int lane = threadIdx.x % kWarp;
  if (row >= N) return;
  const float* x = inp + (size_t)row * C;
  float s = 0.0f;
  for (int c = lane; c < C; c += kWarp) s += x[c];
  float m = warp_sum(s) / C;
  float v = 0.0f;
  for (int c = lane; c < C; c += kWarp) v += (x[c] - m) * (x[c] - m);
  float r = rsqrtf(warp_sum(v) / C + kLayerNormEps);
  float* o = out + (size_t)row * C;
  for (int c = lane; c < C; c += kWarp) o[c] = (x[c] - m) * r * w[c] + bias[c];
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

__global__ void layernorm_backward_input_kernel(float* dinp, const float* dout, const float* inp, const float* w,
                                                const float* mean, const float* rstd, int N, int C) {
  int row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  int lane = threadIdx.x % kWarp;
  if (row >= N) return;
  const float* x = inp + (size_t)row * C;
  const float* d = dout + (size_t)row * C;
  float m = mean[row], r = rstd[row];
  float a = 0.0f, b = 0.0f;
  for (int c = lane; c < C; c += kWarp) {
    float norm = (x[c] - m) * r;
    float dn = w[c] * d[c];
    a += dn;
    b += dn * norm;
  }
  a = warp_sum(a) / C;
  b = warp_sum(b) / C;
  float* dx = dinp + (size_t)row * C;
  for (int c = lane; c < C; c += kWarp) {
    float norm = (x[c] - m) * r;
    dx[c] += (w[c] * d[c] - a - norm * b) * r;
  }
}

// Parameter gradients: one thread per channel, rows in order.
__global__ void layernorm_backward_params_kernel(float* dweight, float* dbias, const float* dout, const float* inp,
                                                 const float* mean, const float* rstd, int N, int C) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float dw = 0.0f, db = 0.0f;
  for (int n = 0; n < N; n++) {
    float d = dout[(size_t)n * C + c];
    dw += (inp[(size_t)n * C + c] - mean[n]) * rstd[n] * d;
    db += d;
  }
  dweight[c] += dw;
  dbias[c] += db;
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C) {
  layernorm_forward_kernel<<<blocks_for(N, 8), 8 * kWarp>>>(out, mean, rstd, inp, weight, bias, N, C);
  CAIRN_CUDA_LAUNCHED("layernorm_forward");
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C) {
  layernorm_backward_input_kernel<<<blocks_for(N, 8), 8 * kWarp>>>(dinp, dout, inp, weight, mean, rstd, N, C);
  layernorm_backward_params_kernel<<<blocks_for(C, 128), 128>>>(dweight, dbias, dout, inp, mean, rstd, N, C);
  CAIRN_CUDA_LAUNCHED("layernorm_backward");
}

// ------------------------------------------------------------------ matmul (cuBLAS, column-major view)

__global__ void add_bias_kernel(float* out, const float* bias, int OC, size_t total) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < total) out[i] += bias[i % OC];
}

__global__ void bias_grad_kernel(float* dbias, const float* dout, int N, int OC) {
  int o = blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= OC) return;
  float s = 0.0f;
  for (int n = 0; n < N; n++) s += dout[(size_t)n * OC + o];
  dbias[o] += s;
}

// A row-major [R, K] matrix is, to column-major cuBLAS, its transpose [K, R] with leading dimension K.
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C, int OC,
                    WeightLayout layout) {
  const float one = 1.0f, zero = 0.0f;
  // out^T [OC, N] = W^T [OC, C] * inp^T [C, N]
  if (layout == WeightLayout::InOut) {
    check_cublas(cublasSgemm(cublas(), CUBLAS_OP_N, CUBLAS_OP_N, OC, N, C, &one, weight, OC, inp, C, &zero, out, OC),
                 "sgemm forward");
  } else {
    check_cublas(cublasSgemm(cublas(), CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, &one, weight, C, inp, C, &zero, out, OC),
                 "sgemm forward");
  }
  if (bias) {
    size_t total = (size_t)N * OC;
    add_bias_kernel<<<blocks_for(total, 256), 256>>>(out, bias, OC, total);
    CAIRN_CUDA_LAUNCHED("add_bias");
  }
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int C, int OC, WeightLayout layout) {
  const float one = 1.0f, zero = 0.0f;
  if (layout == WeightLayout::InOut) {
    // dinp^T [C, N] = W [C, OC] * dout^T [OC, N]
    if (dinp)
      check_cublas(cublasSgemm(cublas(), CUBLAS_OP_T, CUBLAS_OP_N, C, N, OC, &one, weight, OC, dout, OC, &zero, dinp, C),
                   "sgemm dinp");
    // dW^T [OC, C] += dout^T [OC, N] * inp [N, C]
    check_cublas(cublasSgemm(cublas(), CUBLAS_OP_N, CUBLAS_OP_T, OC, C, N, &one, dout, OC, inp, C, &one, dweight, OC),
                 "sgemm dweight");
  } else {
    // dinp^T [C, N] = W^T [C, OC] * dout^T [OC, N]
    if (dinp)
      check_cublas(cublasSgemm(cublas(), CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, &one, weight, C, dout, OC, &zero, dinp, C),
                   "sgemm dinp");
    // dW^T [C, OC] += inp^T [C, N] * dout [N, OC]
    check_cublas(cublasSgemm(cublas(), CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, &one, inp, C, dout, OC, &one, dweight, C),
                 "sgemm dweight");
  }
  if (dbias) {
    bias_grad_kernel<<<blocks_for(OC, 128), 128>>>(dbias, dout, N, OC);
    CAIRN_CUDA_LAUNCHED("bias_grad");
  }
}

// ------------------------------------------------------------------ attention (flash-style online softmax)

constexpr int kMaxHeadDim = 256;
constexpr int kPerLane = kMaxHeadDim / kWarp;

// One warp per (b, h, query i): streams keys 0..i with an online softmax, keeping the output row in
// registers, and writes the row's log-sum-exp for backward. Never materialises the T x T scores.
__global__ void attention_forward_kernel(float* out, float* lse, const float* qkv, int B, int T, int C, int NH) {
  int warp = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  int lane = threadIdx.x % kWarp;
  if (warp >= B * NH * T) return;
  int i = warp % T, h = (warp / T) % NH, b = warp / (T * NH);
  int hd = C / NH;
  float scale = rsqrtf(static_cast<float>(hd));
  const float* q = qkv + ((size_t)b * T + i) * 3 * C + h * hd;
  float qr[kPerLane], acc[kPerLane];
  for (int k = 0; k < kPerLane; k++) {
    int d = lane + k * kWarp;
    qr[k] = d < hd ? q[d] : 0.0f;
    acc[k] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int j = 0; j <= i; j++) {
    const float* kv = qkv + ((size_t)b * T + j) * 3 * C + h * hd;
    float s = 0.0f;
    for (int k = 0; k < kPerLane; k++) {
      int d = lane + k * kWarp;
      if (d < hd) s += qr[k] * kv[C + d];
    }
    s = warp_sum(s) * scale;
    float m_new = fmaxf(m, s);
    float correction = expf(m - m_new);
    float p = expf(s - m_new);
    l = l * correction + p;
    for (int k = 0; k < kPerLane; k++) {
      int d = lane + k * kWarp;
      if (d < hd) acc[k] = acc[k] * correction + p * kv[2 * C + d];
    }
    m = m_new;
  }
  float* o = out + ((size_t)b * T + i) * C + h * hd;
  for (int k = 0; k < kPerLane; k++) {
    int d = lane + k * kWarp;
    if (d < hd) o[d] = acc[k] / l;
  }
  if (lane == 0) lse[((size_t)b * NH + h) * T + i] = m + logf(l);
}

// D[b,h,i] = dout_i . out_i
__global__ void attention_delta_kernel(float* delta, const float* dout, const float* out, int B, int T, int C, int NH) {
  int warp = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  int lane = threadIdx.x % kWarp;
  if (warp >= B * NH * T) return;
  int i = warp % T, h = (warp / T) % NH, b = warp / (T * NH);
  int hd = C / NH;
  const float* dO = dout + ((size_t)b * T + i) * C + h * hd;
  const float* O = out + ((size_t)b * T + i) * C + h * hd;
  float s = 0.0f;
  for (int d = lane; d < hd; d += kWarp) s += dO[d] * O[d];
  s = warp_sum(s);
  if (lane == 0) delta[((size_t)b * NH + h) * T + i] = s;
}

// dQ_i = scale * sum_{j<=i} dS_ij K_j: one warp per query.
__global__ void attention_backward_q_kernel(float* dqkv, const float* dout, const float* qkv, const float* lse,
                                            const float* delta, int B, int T, int C, int NH) {
  int warp = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  int lane = threadIdx.x % kWarp;
  if (warp >= B * NH * T) return;
  int i = warp % T, h = (warp / T) % NH, b = warp / (T * NH);
  int hd = C / NH;
  float scale = rsqrtf(static_cast<float>(hd));
  size_t row_i = ((size_t)b * T + i) * 3 * C + h * hd;
  const float* dO = dout + ((size_t)b * T + i) * C + h * hd;
  float qr[kPerLane], dor[kPerLane], dq[kPerLane];
  for (int k = 0; k < kPerLane; k++) {
    int d = lane + k * kWarp;
    qr[k] = d < hd ? qkv[row_i + d] : 0.0f;
    dor[k] = d < hd ? dO[d] : 0.0f;
    dq[k] = 0.0f;
  }
  size_t stat = ((size_t)b * NH + h) * T + i;
  float row_lse = lse[stat], D = delta[stat];
  for (int j = 0; j <= i; j++) {
    size_t row_j = ((size_t)b * T + j) * 3 * C + h * hd;
    float s = 0.0f, dp = 0.0f;
    for (int k = 0; k < kPerLane; k++) {
      int d = lane + k * kWarp;
      if (d < hd) {
        s += qr[k] * qkv[row_j + C + d];
        dp += dor[k] * qkv[row_j + 2 * C + d];
      }
    }
    s = warp_sum(s);
    dp = warp_sum(dp);
    float p = expf(s * scale - row_lse);
    float ds = p * (dp - D) * scale;
    for (int k = 0; k < kPerLane; k++) {
      int d = lane + k * kWarp;
      if (d < hd) dq[k] += ds * qkv[row_j + C + d];
    }
  }
  for (int k = 0; k < kPerLane; k++) {
    int d = lane + k * kWarp;
    if (d < hd) dqkv[row_i + d] = dq[k];
  }
}

// dK_j = scale * sum_{i>=j} dS_ij Q_i and dV_j = sum_{i>=j} P_ij dO_i: one warp per key.
__global__ void attention_backward_kv_kernel(float* dqkv, const float* dout, const float* qkv, const float* lse,
                                             const float* delta, int B, int T, int C, int NH) {
  int warp = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  int lane = threadIdx.x % kWarp;
  if (warp >= B * NH * T) return;
  int j = warp % T, h = (warp / T) % NH, b = warp / (T * NH);
  int hd = C / NH;
  float scale = rsqrtf(static_cast<float>(hd));
  size_t row_j = ((size_t)b * T + j) * 3 * C + h * hd;
  float kr[kPerLane], vr[kPerLane], dk[kPerLane], dv[kPerLane];
  for (int k = 0; k < kPerLane; k++) {
    int d = lane + k * kWarp;
    kr[k] = d < hd ? qkv[row_j + C + d] : 0.0f;
    vr[k] = d < hd ? qkv[row_j + 2 * C + d] : 0.0f;
    dk[k] = dv[k] = 0.0f;
  }
  for (int i = j; i < T; i++) {
    size_t row_i = ((size_t)b * T + i) * 3 * C + h * hd;
    const float* dO = dout + ((size_t)b * T + i) * C + h * hd;
    float s = 0.0f, dp = 0.0f;
    for (int k = 0; k < kPerLane; k++) {
      int d = lane + k * kWarp;
      if (d < hd) {
        s += qkv[row_i + d] * kr[k];
        dp += dO[d] * vr[k];
      }
    }
    s = warp_sum(s);
    dp = warp_sum(dp);
    size_t stat = ((size_t)b * NH + h) * T + i;
    float p = expf(s * scale - lse[stat]);
    float ds = p * (dp - delta[stat]) * scale;
    for (int k = 0; k < kPerLane; k++) {
      int d = lane + k * kWarp;
      if (d < hd) {
        dk[k] += ds * qkv[row_i + d];
        dv[k] += p * dO[d];
      }
    }
  }
  for (int k = 0; k < kPerLane; k++) {
    int d = lane + k * kWarp;
    if (d < hd) {
      dqkv[row_j + C + d] = dk[k];
      dqkv[row_j + 2 * C + d] = dv[k];
    }
  }
}

void check_head_dim(int C, int NH) {
  if (C % NH != 0 || C / NH > kMaxHeadDim) {
    throw std::runtime_error("CUDA attention: head dim " + std::to_string(C / NH) + " unsupported (C % heads must be 0, head dim <= " +
                             std::to_string(kMaxHeadDim) + ")");
  }
}

void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH) {
  check_head_dim(C, NH);
  size_t warps = (size_t)B * NH * T;
  attention_forward_kernel<<<blocks_for(warps, 4), 4 * kWarp>>>(out, lse, qkv, B, T, C, NH);
  CAIRN_CUDA_LAUNCHED("attention_forward");
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse, int B,
                        int T, int C, int NH) {
  check_head_dim(C, NH);
  size_t warps = (size_t)B * NH * T;
  float* delta = static_cast<float*>(dev_alloc(warps * sizeof(float)));
  attention_delta_kernel<<<blocks_for(warps, 4), 4 * kWarp>>>(delta, dout, out, B, T, C, NH);
  attention_backward_q_kernel<<<blocks_for(warps, 4), 4 * kWarp>>>(dqkv, dout, qkv, lse, delta, B, T, C, NH);
  attention_backward_kv_kernel<<<blocks_for(warps, 4), 4 * kWarp>>>(dqkv, dout, qkv, lse, delta, B, T, C, NH);
  CAIRN_CUDA_LAUNCHED("attention_backward");
  dev_free(delta);  // cudaFree synchronises the device, so the kernels are done with it
}

// ------------------------------------------------------------------ elementwise

__global__ void gelu_forward_kernel(float* out, const float* inp, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n) return;
  float x = inp[i];
  out[i] = 0.5f * x * (1.0f + tanhf(kGeluScaling * (x + 0.044715f * x * x * x)));
}

__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n) return;
  float x = inp[i];
  float th = tanhf(kGeluScaling * (x + 0.044715f * x * x * x));
  float sech2 = 1.0f - th * th;
  float local = 0.5f * (1.0f + th) + 0.5f * x * sech2 * kGeluScaling * (1.0f + 3.0f * 0.044715f * x * x);
  dinp[i] = local * dout[i];
}

__global__ void residual_kernel(float* out, const float* a, const float* b, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

__global__ void scale_kernel(float* x, float s, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) x[i] *= s;
}

void gelu_forward(float* out, const float* inp, size_t n) {
  gelu_forward_kernel<<<blocks_for(n, 256), 256>>>(out, inp, n);
  CAIRN_CUDA_LAUNCHED("gelu_forward");
}
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
  gelu_backward_kernel<<<blocks_for(n, 256), 256>>>(dinp, inp, dout, n);
  CAIRN_CUDA_LAUNCHED("gelu_backward");
}
void residual_forward(float* out, const float* a, const float* b, size_t n) {
  residual_kernel<<<blocks_for(n, 256), 256>>>(out, a, b, n);
  CAIRN_CUDA_LAUNCHED("residual_forward");
}
void scale(float* x, float s, size_t n) {
  scale_kernel<<<blocks_for(n, 256), 256>>>(x, s, n);
  CAIRN_CUDA_LAUNCHED("scale");
}

// ------------------------------------------------------------------ fused softmax + cross-entropy

constexpr int kRowThreads = 256;

__device__ float block_reduce(float v, bool is_max) {
  __shared__ float shared[kRowThreads / kWarp];
  int lane = threadIdx.x % kWarp, w = threadIdx.x / kWarp;
  v = is_max ? warp_max(v) : warp_sum(v);
  __syncthreads();
  if (lane == 0) shared[w] = v;
  __syncthreads();
  float r = is_max ? -INFINITY : 0.0f;
  for (int k = 0; k < kRowThreads / kWarp; k++) r = is_max ? fmaxf(r, shared[k]) : r + shared[k];
  return r;
}

// One block per row: max and sum of exp over the real vocabulary, then lse and the loss.
__global__ void crossentropy_forward_kernel(float* losses, float* lse, const float* logits, const int32_t* targets,
                                            int V, int Vp) {
  int n = blockIdx.x;
  const float* l = logits + (size_t)n * Vp;
  float m = -INFINITY;
  for (int j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, l[j]);
  m = block_reduce(m, true);
  float s = 0.0f;
  for (int j = threadIdx.x; j < V; j += blockDim.x) s += expf(l[j] - m);
  s = block_reduce(s, false);
  if (threadIdx.x == 0) {
    float row_lse = m + logf(s);
    lse[n] = row_lse;
    int t = targets[n];
    losses[n] = t < 0 ? 0.0f : row_lse - l[t];
  }
}

// Each element reads only its own logit, so dlogits may alias logits.
__global__ void crossentropy_backward_kernel(float* dlogits, const float* logits, const float* lse,
                                             const int32_t* targets, float dloss, int V, int Vp) {
  int n = blockIdx.x;
  int t = targets[n];
  const float* l = logits + (size_t)n * Vp;
  float* dl = dlogits + (size_t)n * Vp;
  float row_lse = lse[n];
  for (int j = threadIdx.x; j < Vp; j += blockDim.x) {
    if (t < 0 || j >= V) {
      dl[j] = 0.0f;
    } else {
      float p = expf(l[j] - row_lse);
      dl[j] = (p - (j == t ? 1.0f : 0.0f)) * dloss;
    }
  }
}

void crossentropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets, int N, int V, int Vp) {
  if (N == 0) return;
  crossentropy_forward_kernel<<<N, kRowThreads>>>(losses, lse, logits, targets, V, Vp);
  CAIRN_CUDA_LAUNCHED("crossentropy_forward");
}
void crossentropy_backward(float* dlogits, const float* logits, const float* lse, const int32_t* targets, float dloss,
                           int N, int V, int Vp) {
  if (N == 0) return;
  crossentropy_backward_kernel<<<N, kRowThreads>>>(dlogits, logits, lse, targets, dloss, V, Vp);
  CAIRN_CUDA_LAUNCHED("crossentropy_backward");
}

// ------------------------------------------------------------------ optimizer

// PyTorch's AdamW order (decay, moments, bias-corrected step), scalars precomputed on the host in double
// exactly as the CPU backends do, so CPU and GPU parameters agree to rounding.
struct AdamWScalars {
  float beta1, beta2, eps, decay_factor, step_size, bc2_sqrt, grad_scale;
};

__global__ void adamw_kernel(float* params, const float* grads, float* m, float* v, size_t n, AdamWScalars s) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n) return;
  float g = grads[i] * s.grad_scale;
  float p = params[i] * s.decay_factor;
  float mi = s.beta1 * m[i] + (1.0f - s.beta1) * g;
  float vi = s.beta2 * v[i] + (1.0f - s.beta2) * g * g;
  float denom = sqrtf(vi) / s.bc2_sqrt + s.eps;
  params[i] = p + -s.step_size * (mi / denom);
  m[i] = mi;
  v[i] = vi;
}

void adamw_update(float* params, const float* grads, float* m, float* v, size_t n, const AdamWParams& hp) {
  AdamWScalars s;
  s.beta1 = hp.beta1;
  s.beta2 = hp.beta2;
  s.eps = hp.eps;
  s.decay_factor = (float)(1.0 - (double)hp.lr * hp.weight_decay);
  s.step_size = (float)(hp.lr / (1.0 - std::pow((double)hp.beta1, (double)hp.step)));
  s.bc2_sqrt = (float)std::sqrt(1.0 - std::pow((double)hp.beta2, (double)hp.step));
  s.grad_scale = hp.grad_scale;
  if (n == 0) return;
  adamw_kernel<<<blocks_for(n, 256), 256>>>(params, grads, m, v, n, s);
  CAIRN_CUDA_LAUNCHED("adamw_update");
}

// Per-block partial sums in double, summed on the host in block order (deterministic).
__global__ void squared_norm_kernel(double* partial, const float* x, size_t n) {
  __shared__ double shared[256];
  double s = 0.0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    s += (double)x[i] * x[i];
  }
  shared[threadIdx.x] = s;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) shared[threadIdx.x] += shared[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = shared[0];
}

double squared_norm(const float* x, size_t n) {
  if (n == 0) return 0.0;
  const unsigned blocks = std::min<unsigned>(1024, blocks_for(n, 256));
  double* partial = static_cast<double*>(dev_alloc(blocks * sizeof(double)));
  squared_norm_kernel<<<blocks, 256>>>(partial, x, n);
  CAIRN_CUDA_LAUNCHED("squared_norm");
  std::vector<double> host(blocks);
  to_host(host.data(), partial, blocks * sizeof(double));
  dev_free(partial);
  double sum = 0.0;
  for (double p : host) sum += p;
  return sum;
}

}  // namespace

// The CUDA table, or nullptr when no usable GPU is present (callers report that to the user).
const Backend* cuda_backend_or_null() {
  static const Backend* backend = []() -> const Backend* {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      cudaGetLastError();  // clear the sticky "no device" error
      return nullptr;
    }
    static Backend b;
    b.name = "cuda";
    b.device_memory = true;
    b.alloc = dev_alloc;
    b.free = dev_free;
    b.copy_to_device = to_device;
    b.copy_to_host = to_host;
    b.copy_device = dev_copy;
    b.fill_zero = dev_zero;
    b.synchronize = dev_sync;
    b.embedding_forward = embedding_forward;
    b.embedding_backward = embedding_backward;
    b.layernorm_forward = layernorm_forward;
    b.layernorm_backward = layernorm_backward;
    b.matmul_forward = matmul_forward;
    b.matmul_backward = matmul_backward;
    b.attention_forward = attention_forward;
    b.attention_backward = attention_backward;
    b.gelu_forward = gelu_forward;
    b.gelu_backward = gelu_backward;
    b.residual_forward = residual_forward;
    b.crossentropy_forward = crossentropy_forward;
    b.crossentropy_backward = crossentropy_backward;
    b.adamw_update = adamw_update;
    b.squared_norm = squared_norm;
    b.scale = scale;
    return &b;
  }();
  return backend;
}

// Why the CUDA backend is unavailable ("" when it is available), for skip messages and errors.
std::string cuda_unavailable_reason() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return std::string("no usable CUDA device: ") + cudaGetErrorString(err);
  }
  if (count == 0) return "no CUDA device visible";
  return "";
}

}  // namespace cairn::kernels
