// The CUDA backend (fp32): cuBLAS for matmuls, straightforward deterministic kernels for everything else; with
// cuda_set_bf16_matmul(true) (precision = "bf16") the matmuls run on tensor cores through cuBLASLt with bf16 inputs
// and fp32 accumulation. Same semantics as the CPU reference; faster kernels replace these one by one behind the same
// table: attention runs the tiled flash kernels of flash_attention.cu for head dims <= 128, in bf16 mode the tensor-core
// ones of flash_attention_bf16.cu for head dims 64 and 128 (CAIRN_CUDA_ATTENTION=simple or cuda_set_flash_attention(false)
// selects the one-row-per-thread kernels below). Every op runs on the legacy default stream.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../cpu/cpu_common.h"
#include "cairn/kernels/backend.h"
#include "flash_attention.h"
#include "flash_attention_bf16.h"

namespace cairn::kernels {
void cuda_argmax_rows(int32_t* out, const float* x, int N, int V, int Vp);  // kernels/cuda/argmax.cu
namespace {

void cuda_check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(std::string("CUDA: ") + what + ": " + cudaGetErrorString(err));
}
void cublas_check(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(std::string("cuBLAS: ") + what + " failed (status " +
                                                            std::to_string((int)st) + ")");
}
#define CAIRN_CUDA(call) cuda_check((call), #call)
#define CAIRN_LAUNCHED(name) cuda_check(cudaGetLastError(), name)

constexpr int kThreads = 256;
constexpr int kMaxHeadDim = 256;  // attention keeps one row of q/o per thread

inline unsigned blocks_for(size_t n, int threads = kThreads) { return (unsigned)((n + threads - 1) / threads); }

cublasHandle_t cublas() {
  static cublasHandle_t handle = [] {
    cublasHandle_t h;
    cublas_check(cublasCreate(&h), "cublasCreate");
    // full fp32 (no TF32) so the fp32 path matches the CPU reference; bf16 comes with mixed precision
    cublas_check(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    return h;
  }();
  return handle;
}

// Bytes held through this backend now and at most (trainers report the high-water mark, like PyTorch's
// max_memory_allocated); the size of each live allocation is kept so frees can be subtracted.
std::mutex g_mem_mutex;
std::unordered_map<void*, size_t> g_mem_sizes;
std::atomic<size_t> g_mem_current{0}, g_mem_peak{0};

void track_alloc(void* p, size_t bytes) {
  std::lock_guard<std::mutex> lk(g_mem_mutex);
  g_mem_sizes[p] = bytes;
  const size_t now = g_mem_current += bytes;
  if (now > g_mem_peak) g_mem_peak = now;
}
void track_free(void* p) {
  std::lock_guard<std::mutex> lk(g_mem_mutex);
  auto it = g_mem_sizes.find(p);
  if (it == g_mem_sizes.end()) return;
  g_mem_current -= it->second;
  g_mem_sizes.erase(it);
}

// Grows-only device scratch for ops that need temporaries (attention's D, norm partials).
float* scratch(size_t floats) {
  static float* ptr = nullptr;
  static size_t capacity = 0;
  if (floats > capacity) {
    if (ptr) {
      track_free(ptr);
      CAIRN_CUDA(cudaFree(ptr));
    }
    CAIRN_CUDA(cudaMalloc(&ptr, floats * sizeof(float)));
    track_alloc(ptr, floats * sizeof(float));
    capacity = floats;
  }
  return ptr;
}

// ---------------- memory ----------------
void* dev_alloc(size_t bytes) {
  void* p = nullptr;
  const size_t n = bytes == 0 ? 256 : bytes;
  cudaError_t err = cudaMalloc(&p, n);
  if (err != cudaSuccess) {
    cudaGetLastError();  // an allocation failure is not sticky: clear it so the next launch check does not report it
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    throw std::runtime_error("CUDA: out of device memory allocating " + std::to_string(n >> 20) + " MiB (" +
                             std::to_string(free_b >> 20) + " MiB free of " + std::to_string(total_b >> 20) +
                             " MiB; cairn holds " + std::to_string(g_mem_current.load() >> 20) +
                             " MiB): lower the micro-batch or sequence length");
  }
  CAIRN_CUDA(cudaMemset(p, 0, n));
  track_alloc(p, n);
  return p;
}
void dev_free(void* p) {
  if (p) {
    track_free(p);
    cudaFree(p);
  }
}
void to_device(void* dst, const void* src, size_t bytes) {
  if (bytes) CAIRN_CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}
void to_host(void* dst, const void* src, size_t bytes) {
  if (bytes) CAIRN_CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}
void device_copy(void* dst, const void* src, size_t bytes) {
  if (bytes) CAIRN_CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
}
void fill_zero(void* p, size_t bytes) {
  if (bytes) CAIRN_CUDA(cudaMemset(p, 0, bytes));
}
// Every op of this backend runs on the legacy default stream, so waiting for that stream is waiting for the backend.
// Not cudaDeviceSynchronize: a trainer's communication on its own non-blocking stream (NCCL) keeps running, which
// is what lets the model's per-layer synchronize during backward overlap with gradient all-reduces.
void synchronize() { CAIRN_CUDA(cudaStreamSynchronize(cudaStreamLegacy)); }

// ---------------- reductions ----------------
__device__ inline float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ inline float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Block-wide reduction (kThreads threads), same order every launch; result valid in every thread.
template <bool kMax>
__device__ float block_reduce(float v) {
  __shared__ float partial[kThreads / 32];
  __shared__ float result;
  v = kMax ? warp_max(v) : warp_sum(v);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    float w = threadIdx.x < kThreads / 32 ? partial[threadIdx.x] : (kMax ? -INFINITY : 0.0f);
    w = kMax ? warp_max(w) : warp_sum(w);
    if (threadIdx.x == 0) result = w;
  }
  __syncthreads();
  const float r = result;
  __syncthreads();
  return r;
}

// Column sums over N rows, deterministic: block (32 columns x 8 row lanes), fixed-order combine.
// out[c] += sum_n f(n, c) where f is in[n*C+c] (mode 0) or in[n*C+c] * (x[n*C+c]-mean[n])*rstd[n] (mode 1).
__global__ void column_sums_kernel(float* out, const float* in, const float* x, const float* mean, const float* rstd,
                                   int N, int C, int mode) {
  __shared__ float part[8][33];
  const int c = blockIdx.x * 32 + threadIdx.x;
  float s = 0.0f;
  if (c < C)
    for (int n = threadIdx.y; n < N; n += 8) {
      const size_t i = (size_t)n * C + c;
      s += mode == 0 ? in[i] : in[i] * (x[i] - mean[n]) * rstd[n];
    }
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float total = 0.0f;
    for (int y = 0; y < 8; y++) total += part[y][threadIdx.x];
    out[c] += total;
  }
}

void column_sums(float* out, const float* in, const float* x, const float* mean, const float* rstd, int N, int C,
                 int mode) {
  column_sums_kernel<<<(C + 31) / 32, dim3(32, 8)>>>(out, in, x, mean, rstd, N, C, mode);
  CAIRN_LAUNCHED("column_sums");
}

// ---------------- embedding ----------------
__global__ void embedding_forward_kernel(float* out, const int32_t* inp, const float* wte, const float* wpe, int N,
                                         int T, int C) {
  const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= (size_t)N * C) return;
  const int bt = (int)(idx / C), c = (int)(idx % C), id = inp[bt];
  // id < 0: the wte row lives on another rank (vocab-parallel); wpe == nullptr: no positional term
  const float e = id >= 0 ? wte[(size_t)id * C + c] : 0.0f;
  const float p = wpe ? wpe[(size_t)(bt % T) * C + c] : 0.0f;
  out[idx] = e + p;
}

// wpe: one thread per (t, c) summing over b. wte: one thread per column walking the tokens in order, so repeated
// ids accumulate without atomics and the result is deterministic.
__global__ void embedding_backward_wpe(float* dwpe, const float* dout, int B, int T, int C) {
  const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= (size_t)T * C) return;
  float s = 0.0f;
  for (int b = 0; b < B; b++) s += dout[(size_t)b * T * C + idx];
  dwpe[idx] += s;
}
__global__ void embedding_backward_wte(float* dwte, const float* dout, const int32_t* inp, int N, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int bt = 0; bt < N; bt++) {
    const int id = inp[bt];
    if (id >= 0) dwte[(size_t)id * C + c] += dout[(size_t)bt * C + c];  // id < 0: row owned by another rank
  }
}

void embedding_forward(float* out, const int32_t* inp, const float* wte, const float* wpe, int B, int T, int C) {
  embedding_forward_kernel<<<blocks_for((size_t)B * T * C), kThreads>>>(out, inp, wte, wpe, B * T, T, C);
  CAIRN_LAUNCHED("embedding_forward");
}
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* inp, int B, int T, int C) {
  if (dwpe) embedding_backward_wpe<<<blocks_for((size_t)T * C), kThreads>>>(dwpe, dout, B, T, C);
  embedding_backward_wte<<<blocks_for(C, 64), 64>>>(dwte, dout, inp, B * T, C);
  CAIRN_LAUNCHED("embedding_backward");
}

// ---------------- layernorm: one warp per row ----------------
__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp, const float* w,
                                         const float* b, int N, int C) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const float* x = inp + (size_t)row * C;
  float s = 0.0f;
  for (int c = lane; c < C; c += 32) s += x[c];
  const float m = warp_sum(s) / C;
  float v = 0.0f;
  for (int c = lane; c < C; c += 32) v += (x[c] - m) * (x[c] - m);
  const float r = rsqrtf(warp_sum(v) / C + kLayerNormEps);
  float* o = out + (size_t)row * C;
  for (int c = lane; c < C; c += 32) o[c] = (x[c] - m) * r * w[c] + b[c];
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

__global__ void layernorm_backward_kernel(float* dinp, const float* dout, const float* inp, const float* w,
                                          const float* mean, const float* rstd, int N, int C) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const float* x = inp + (size_t)row * C;
  const float* d = dout + (size_t)row * C;
  const float m = mean[row], r = rstd[row];
  float a = 0.0f, bsum = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float dnorm = w[c] * d[c];
    a += dnorm;
    bsum += dnorm * (x[c] - m) * r;
  }
  const float dnorm_mean = warp_sum(a) / C, dnorm_norm_mean = warp_sum(bsum) / C;
  float* dx = dinp + (size_t)row * C;
  for (int c = lane; c < C; c += 32) {
    const float norm = (x[c] - m) * r;
    dx[c] += (w[c] * d[c] - dnorm_mean - norm * dnorm_norm_mean) * r;
  }
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int N, int C) {
  layernorm_forward_kernel<<<blocks_for((size_t)N * 32), kThreads>>>(out, mean, rstd, inp, weight, bias, N, C);
  CAIRN_LAUNCHED("layernorm_forward");
}
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C) {
  layernorm_backward_kernel<<<blocks_for((size_t)N * 32), kThreads>>>(dinp, dout, inp, weight, mean, rstd, N, C);
  CAIRN_LAUNCHED("layernorm_backward");
  column_sums(dbias, dout, nullptr, nullptr, nullptr, N, C, 0);
  column_sums(dweight, dout, inp, mean, rstd, N, C, 1);
}

// ---------------- matmul (row-major via column-major cuBLAS: C^T = B^T A^T) ----------------
__global__ void fill_rows_kernel(float* out, const float* bias, int N, int OC) {
  const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx < (size_t)N * OC) out[idx] = bias[idx % OC];
}

// ---- bf16 GEMMs (precision = "bf16", autocast style): A and B rounded to bf16 right before each GEMM, fp32
// accumulation and fp32 output, so parameters, gradients, AdamW state and every other op stay fp32.
std::atomic<bool> g_bf16_matmul{false};

cublasLtHandle_t cublaslt() {
  static cublasLtHandle_t handle = [] {
    cublasLtHandle_t h;
    cublas_check(cublasLtCreate(&h), "cublasLtCreate");
    return h;
  }();
  return handle;
}

__global__ void to_bf16_kernel(__nv_bfloat16* out, const float* in, size_t n) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2bfloat16_rn(in[i]);
}

// bf16 copies of a GEMM's two inputs in one grow-only buffer (not scratch(): attention and the norm use that one):
// A at the start, B at the next 256-byte boundary, so both are 256-byte aligned and the buffer is as large as the
// largest pair (the lm_head's logits gradient dominates), not twice the largest operand.
std::pair<__nv_bfloat16*, __nv_bfloat16*> bf16_copies(const float* a, size_t na, const float* b, size_t nb) {
  static __nv_bfloat16* ptr = nullptr;
  static size_t capacity = 0;
  const size_t b_offset = (na + 127) / 128 * 128, n = b_offset + nb;
  if (n > capacity) {
    if (ptr) {
      track_free(ptr);
      CAIRN_CUDA(cudaFree(ptr));
    }
    CAIRN_CUDA(cudaMalloc(&ptr, n * sizeof(__nv_bfloat16)));
    track_alloc(ptr, n * sizeof(__nv_bfloat16));
    capacity = n;
  }
  to_bf16_kernel<<<blocks_for(na), kThreads>>>(ptr, a, na);
  to_bf16_kernel<<<blocks_for(nb), kThreads>>>(ptr + b_offset, b, nb);
  CAIRN_LAUNCHED("to_bf16");
  return {ptr, ptr + b_offset};
}

constexpr size_t kLtWorkspaceBytes = 32u << 20;
void* lt_workspace() {
  static void* ws = [] {
    void* p = nullptr;
    CAIRN_CUDA(cudaMalloc(&p, kLtWorkspaceBytes));
    track_alloc(p, kLtWorkspaceBytes);
    return p;
  }();
  return ws;
}

uint32_t alignment_of(const void* p) {
  uint32_t a = 256;
  while (a > 4 && reinterpret_cast<uintptr_t>(p) % a != 0) a /= 2;
  return a;
}

// The cublasSgemm call below with A and B in bf16 (dense: lda/ldb are the stored row counts, as in every call here).
// False when cuBLASLt offers no algorithm for the shape or alignment; the caller then runs the fp32 GEMM.
bool gemm_bf16(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float* a, int lda,
               const float* b, int ldb, float beta, float* c, int ldc) {
  const int a_rows = ta == CUBLAS_OP_N ? m : k, a_cols = ta == CUBLAS_OP_N ? k : m;
  const int b_rows = tb == CUBLAS_OP_N ? k : n, b_cols = tb == CUBLAS_OP_N ? n : k;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t ad = nullptr, bd = nullptr, cd = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  bool ok = false;
  try {
    cublas_check(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
    cublas_check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "TRANSA");
    cublas_check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "TRANSB");
    cublas_check(cublasLtMatrixLayoutCreate(&ad, CUDA_R_16BF, a_rows, a_cols, lda), "layout A");
    cublas_check(cublasLtMatrixLayoutCreate(&bd, CUDA_R_16BF, b_rows, b_cols, ldb), "layout B");
    cublas_check(cublasLtMatrixLayoutCreate(&cd, CUDA_R_32F, m, n, ldc), "layout C");
    cublas_check(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
    uint64_t ws_bytes = kLtWorkspaceBytes;
    uint32_t align_ab = 256, align_c = alignment_of(c);  // bf16 copies are cudaMalloc'ed: 256-byte aligned
    cublas_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                      sizeof ws_bytes), "pref workspace");
    cublas_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_ab,
                                                      sizeof align_ab), "pref align A");
    cublas_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_ab,
                                                      sizeof align_ab), "pref align B");
    cublas_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c,
                                                      sizeof align_c), "pref align C");
    cublas_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c,
                                                      sizeof align_c), "pref align D");
    cublasLtMatmulHeuristicResult_t heuristic{};
    int found = 0;
    if (cublasLtMatmulAlgoGetHeuristic(cublaslt(), op, ad, bd, cd, cd, pref, 1, &heuristic, &found) ==
            CUBLAS_STATUS_SUCCESS &&
        found > 0) {
      const auto [a16, b16] = bf16_copies(a, (size_t)lda * a_cols, b, (size_t)ldb * b_cols);
      const float one = 1.0f;
      cublas_check(cublasLtMatmul(cublaslt(), op, &one, a16, ad, b16, bd, &beta, c, cd, c, cd, &heuristic.algo,
                                  lt_workspace(), kLtWorkspaceBytes, 0),
                   "cublasLtMatmul (bf16)");
      ok = true;
    }
  } catch (...) {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (cd) cublasLtMatrixLayoutDestroy(cd);
    if (bd) cublasLtMatrixLayoutDestroy(bd);
    if (ad) cublasLtMatrixLayoutDestroy(ad);
    if (op) cublasLtMatmulDescDestroy(op);
    throw;
  }
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(cd);
  cublasLtMatrixLayoutDestroy(bd);
  cublasLtMatrixLayoutDestroy(ad);
  cublasLtMatmulDescDestroy(op);
  return ok;
}

void sgemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float* a, int lda, const float* b,
           int ldb, float beta, float* c, int ldc) {
  if (g_bf16_matmul && gemm_bf16(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc)) return;
  const float one = 1.0f;
  cublas_check(cublasSgemm(cublas(), ta, tb, m, n, k, &one, a, lda, b, ldb, &beta, c, ldc), "cublasSgemm");
}

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C, int OC,
                    WeightLayout layout) {
  float beta = 0.0f;
  if (bias) {
    fill_rows_kernel<<<blocks_for((size_t)N * OC), kThreads>>>(out, bias, N, OC);
    CAIRN_LAUNCHED("matmul bias");
    beta = 1.0f;
  }
  if (layout == WeightLayout::InOut)  // W row-major [C,OC] is column-major [OC,C]
    sgemm(CUBLAS_OP_N, CUBLAS_OP_N, OC, N, C, weight, OC, inp, C, beta, out, OC);
  else  // W row-major [OC,C] is column-major [C,OC]; transpose it
    sgemm(CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, weight, C, inp, C, beta, out, OC);
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int C, int OC, WeightLayout layout) {
  if (layout == WeightLayout::InOut) {
    if (dinp) sgemm(CUBLAS_OP_T, CUBLAS_OP_N, C, N, OC, weight, OC, dout, OC, 0.0f, dinp, C);
    sgemm(CUBLAS_OP_N, CUBLAS_OP_T, OC, C, N, dout, OC, inp, C, 1.0f, dweight, OC);
  } else {
    if (dinp) sgemm(CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, weight, C, dout, OC, 0.0f, dinp, C);
    sgemm(CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, inp, C, dout, OC, 1.0f, dweight, C);
  }
  if (dbias) column_sums(dbias, dout, nullptr, nullptr, nullptr, N, OC, 0);
}

// ---------------- attention: one thread per (b, h, query row), online softmax ----------------
// HD > 0 compiles a kernel for that head dimension (the per-thread rows then live in registers: loops have constant
// trip counts and are unrolled); HD = 0 is the generic version for any head dim <= kMaxHeadDim (local memory).
// Same operations in the same order either way, so results do not depend on which one runs.
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
__global__ void attention_dkv_kernel(float* dqkv, const float* dout, const float* qkv, const float* lse,
                                     const float* D, int B, int T, int C, int NH) {
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
  return g_bf16_matmul && flash_attention_on() && bf16_attention_on() && flash_attention_bf16_supported(C, NH);
}

void check_head_dim(int C, int NH) {
  if (C / NH > kMaxHeadDim)
    throw std::runtime_error("CUDA attention: head dim " + std::to_string(C / NH) + " > " +
                             std::to_string(kMaxHeadDim));
}

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
  CAIRN_LAUNCHED("attention_forward");
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
  CAIRN_LAUNCHED("attention_backward");
}

// ---------------- element-wise ----------------
__global__ void gelu_forward_kernel(float* out, const float* inp, size_t n) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float x = inp[i];
  out[i] = 0.5f * x * (1.0f + tanhf(kGeluScaling * (x + 0.044715f * x * x * x)));
}
__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout, size_t n) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float x = inp[i];
  const float th = tanhf(kGeluScaling * (x + 0.044715f * x * x * x));
  const float local = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * kGeluScaling * (1.0f + 3.0f * 0.044715f * x * x);
  dinp[i] = local * dout[i];
}
__global__ void residual_kernel(float* out, const float* a, const float* b, size_t n) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}
__global__ void scale_kernel(float* x, float s, size_t n) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= s;
}
__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, size_t n, AdamWStep step) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) step.apply(p[i], g[i], m[i], v[i]);
}

void gelu_forward(float* out, const float* inp, size_t n) {
  if (!n) return;
  gelu_forward_kernel<<<blocks_for(n), kThreads>>>(out, inp, n);
  CAIRN_LAUNCHED("gelu_forward");
}
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
  if (!n) return;
  gelu_backward_kernel<<<blocks_for(n), kThreads>>>(dinp, inp, dout, n);
  CAIRN_LAUNCHED("gelu_backward");
}
void residual_forward(float* out, const float* a, const float* b, size_t n) {
  if (!n) return;
  residual_kernel<<<blocks_for(n), kThreads>>>(out, a, b, n);
  CAIRN_LAUNCHED("residual_forward");
}
void scale(float* x, float s, size_t n) {
  if (!n) return;
  scale_kernel<<<blocks_for(n), kThreads>>>(x, s, n);
  CAIRN_LAUNCHED("scale");
}
void adamw_update(float* params, const float* grads, float* m, float* v, size_t n, const AdamWParams& hp) {
  if (!n) return;
  adamw_kernel<<<blocks_for(n), kThreads>>>(params, grads, m, v, n, AdamWStep(hp));
  CAIRN_LAUNCHED("adamw_update");
}

// ---------------- softmax + cross-entropy: one block per row ----------------
__global__ void crossentropy_forward_kernel(float* losses, float* lse, const float* logits, const int32_t* targets,
                                            int V, int Vp) {
  const int n = blockIdx.x;
  const float* l = logits + (size_t)n * Vp;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < V; j += blockDim.x) mx = fmaxf(mx, l[j]);
  mx = block_reduce<true>(mx);
  float s = 0.0f;
  for (int j = threadIdx.x; j < V; j += blockDim.x) s += expf(l[j] - mx);
  s = block_reduce<false>(s);
  if (threadIdx.x == 0) {
    const float row_lse = mx + logf(s);
    const int t = targets[n];
    lse[n] = row_lse;  // written for every row, ignored ones included
    // t >= V: the target column is on another rank, which subtracts its logit; l[t] is never read here
    losses[n] = t < 0 ? 0.0f : t >= V ? row_lse : row_lse - l[t];
  }
}
__global__ void crossentropy_backward_kernel(float* dlogits, const float* logits, const float* lse,
                                             const int32_t* targets, float dloss, int V, int Vp) {
  const int n = blockIdx.x, t = targets[n];
  const float* l = logits + (size_t)n * Vp;
  float* dl = dlogits + (size_t)n * Vp;
  for (int j = threadIdx.x; j < Vp; j += blockDim.x) {
    float g = 0.0f;
    // t >= V (target on another rank) never equals a j < V: pure softmax row; lse[n] may be the global one
    if (t >= 0 && j < V) g = (expf(l[j] - lse[n]) - (j == t ? 1.0f : 0.0f)) * dloss;
    dl[j] = g;  // each element read then written by the same thread: in place is safe
  }
}
void crossentropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets, int N, int V,
                          int Vp) {
  if (!N) return;
  crossentropy_forward_kernel<<<N, kThreads>>>(losses, lse, logits, targets, V, Vp);
  CAIRN_LAUNCHED("crossentropy_forward");
}
void crossentropy_backward(float* dlogits, const float* logits, const float* lse, const int32_t* targets, float dloss,
                           int N, int V, int Vp) {
  if (!N) return;
  crossentropy_backward_kernel<<<N, kThreads>>>(dlogits, logits, lse, targets, dloss, V, Vp);
  CAIRN_LAUNCHED("crossentropy_backward");
}

// ---------------- squared norm: fixed grid, double partials summed on the host in order ----------------
constexpr int kNormBlocks = 256;
__global__ void squared_norm_kernel(double* partial, const float* x, size_t n) {
  __shared__ double part[kThreads];
  double s = 0.0;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    s += (double)x[i] * x[i];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) part[threadIdx.x] += part[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = part[0];
}
double squared_norm(const float* x, size_t n) {
  if (!n) return 0.0;
  double* partial = reinterpret_cast<double*>(scratch(2 * kNormBlocks));
  squared_norm_kernel<<<kNormBlocks, kThreads>>>(partial, x, n);
  CAIRN_LAUNCHED("squared_norm");
  std::vector<double> host(kNormBlocks);
  to_host(host.data(), partial, sizeof(double) * kNormBlocks);
  double total = 0.0;
  for (double p : host) total += p;
  return total;
}

Backend make_cuda_backend() {
  Backend b{};
  b.name = "cuda";
  b.device_memory = true;
  b.alloc = dev_alloc;
  b.free = dev_free;
  b.copy_to_device = to_device;
  b.copy_to_host = to_host;
  b.copy_device = device_copy;
  b.fill_zero = fill_zero;
  b.synchronize = synchronize;
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
  b.argmax_rows = cuda_argmax_rows;  // kernels/cuda/argmax.cu
  b.adamw_update = adamw_update;
  b.squared_norm = squared_norm;
  b.scale = scale;
  return b;
}

}  // namespace

// Device bytes allocated through this backend now / at most since the process started or the last reset (declared
// where used: tools/train/gpu_cuda.cpp, bench/kernels_gpu_gpt_bench.cpp).
size_t cuda_allocated_bytes() { return g_mem_current.load(); }
size_t cuda_peak_allocated_bytes() { return g_mem_peak.load(); }
// precision = "bf16": every matmul of this backend rounds its inputs to bf16 and runs on tensor cores (fp32
// accumulation and output); off (the default) is plain fp32 cuBLAS.
void cuda_set_bf16_matmul(bool on) { g_bf16_matmul = on; }
bool cuda_bf16_matmul() { return g_bf16_matmul; }
// Attention kernels: flash (tiled, flash_attention.cu; the default) or the simple one-row-per-thread ones.
void cuda_set_flash_attention(bool on) { g_flash_attention = on ? 1 : 0; }
bool cuda_flash_attention() { return flash_attention_on(); }
// bf16 mode's attention: the bf16 tensor-core flash kernels (flash_attention_bf16.cu; the default) or the fp32 ones.
void cuda_set_bf16_attention(bool on) { g_bf16_attention = on ? 1 : 0; }
bool cuda_bf16_attention() { return bf16_attention_on(); }
void cuda_reset_peak_allocated_bytes() {
  std::lock_guard<std::mutex> lk(g_mem_mutex);
  g_mem_peak = g_mem_current.load();
}

// nullptr when no CUDA device is usable (no driver, no GPU): callers report that and skip or fail clearly.
const Backend* cuda_backend_or_null() {
  static const bool usable = [] {
    int count = 0;
    return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  }();
  if (!usable) return nullptr;
  static const Backend backend = make_cuda_backend();
  return &backend;
}

}  // namespace cairn::kernels
