// The fast CPU backend: OpenBLAS sgemm for matmuls, OpenMP across rows/heads, vectorisable inner loops.
// Every reduction has a fixed order independent of the thread count, so results are deterministic
// (bitwise) run to run — exact resume depends on it.
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "cairn/kernels/backend.h"
#include "cpu_common.h"

// cblas prototypes (OpenBLAS); declared here so no include path to a BLAS flavour's cblas.h is needed.
extern "C" {
enum CBLAS_ORDER_ { CblasRowMajor_ = 101 };
enum CBLAS_TRANSPOSE_ { CblasNoTrans_ = 111, CblasTrans_ = 112 };
void cblas_sgemm(int order, int transa, int transb, int m, int n, int k, float alpha, const float* a, int lda,
                 const float* b, int ldb, float beta, float* c, int ldc);
}

// Hot per-row loops get AVX-512 and AVX2/FMA clones picked at load time; plain SSE2 otherwise. Not under
// ThreadSanitizer: the clones' resolvers run during relocation, before TSan's runtime is up, and its instrumentation
// of them crashes the program at load (any binary linking this file, e.g. train_loader in a unity tsan build).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(CAIRN_NO_TARGET_CLONES) && \
    !defined(__SANITIZE_THREAD__)
#define CAIRN_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CAIRN_CLONES
#endif

namespace cairn::kernels {
namespace {

constexpr int kColumnBlock = 64;  // columns per task in column-parallel reductions

// exp(x) for -87 <= x <= 88 without range checks, written so loops around it vectorise (Cephes expf: range
// reduction by ln2 and a degree-6 polynomial, ~1 ulp); std::exp does not vectorise without -ffast-math.
inline float exp_poly(float x) {
  float n = std::floor(x * 1.44269504088896341f + 0.5f);
  float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float r2 = r * r;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r2 + r + 1.0f;
  int32_t bits = ((int32_t)n + 127) << 23;
  return p * std::bit_cast<float>(bits);
}
// exp(x) for any x <= ~88 (clamped into exp_poly's range).
inline float exp_vec(float x) { return exp_poly(std::min(std::max(x, -87.0f), 88.0f)); }

// ---------------- embedding ----------------
void embedding_forward(float* out, const int32_t* inp, const float* wte, const float* wpe, int B, int T, int C) {
#pragma omp parallel for schedule(static)
  for (int bt = 0; bt < B * T; bt++) {
    const int t = bt % T, id = inp[bt];
    float* o = out + (size_t)bt * C;
    // id < 0: the wte row lives on another rank (vocab-parallel); wpe == nullptr: no positional term
    const float* e = id >= 0 ? wte + (size_t)id * C : nullptr;
    const float* p = wpe ? wpe + (size_t)t * C : nullptr;
    if (e && p)
      for (int c = 0; c < C; c++) o[c] = e[c] + p[c];
    else if (e) std::copy(e, e + C, o);
    else if (p) std::copy(p, p + C, o);
    else std::fill(o, o + C, 0.0f);
  }
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* inp, int B, int T, int C) {
  // wpe rows are disjoint per t; wte rows may repeat, so split wte's columns instead (no races, fixed order)
  if (dwpe) {
#pragma omp parallel for schedule(static)
    for (int t = 0; t < T; t++) {
      float* dp = dwpe + (size_t)t * C;
      for (int b = 0; b < B; b++) {
        const float* d = dout + ((size_t)b * T + t) * C;
        for (int c = 0; c < C; c++) dp[c] += d[c];
      }
    }
  }
  const int blocks = (C + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < blocks; blk++) {
    const int c0 = blk * kColumnBlock, c1 = std::min(C, c0 + kColumnBlock);
    for (int bt = 0; bt < B * T; bt++) {
      if (inp[bt] < 0) continue;  // row owned by another rank
      const float* d = dout + (size_t)bt * C;
      float* de = dwte + (size_t)inp[bt] * C;
      for (int c = c0; c < c1; c++) de[c] += d[c];
    }
  }
}

// ---------------- layernorm ----------------
CAIRN_CLONES void layernorm_row(float* o, float* mean, float* rstd, const float* x, const float* w, const float* b,
                                int C) {
  float m = 0.0f;
#pragma omp simd reduction(+ : m)
  for (int c = 0; c < C; c++) m += x[c];
  m /= C;
  float var = 0.0f;
#pragma omp simd reduction(+ : var)
  for (int c = 0; c < C; c++) var += (x[c] - m) * (x[c] - m);
  var /= C;
  const float s = 1.0f / std::sqrt(var + kLayerNormEps);
  for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * w[c] + b[c];
  *mean = m;
  *rstd = s;
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int N, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++)
    layernorm_row(out + (size_t)n * C, mean + n, rstd + n, inp + (size_t)n * C, weight, bias, C);
}

CAIRN_CLONES void layernorm_backward_row(float* dx, const float* d, const float* x, const float* w, float mean,
                                         float rstd, int C) {
  float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
#pragma omp simd reduction(+ : dnorm_mean, dnorm_norm_mean)
  for (int c = 0; c < C; c++) {
    const float dnorm = w[c] * d[c];
    dnorm_mean += dnorm;
    dnorm_norm_mean += dnorm * ((x[c] - mean) * rstd);
  }
  dnorm_mean /= C;
  dnorm_norm_mean /= C;
  for (int c = 0; c < C; c++) {
    const float norm = (x[c] - mean) * rstd;
    dx[c] += (w[c] * d[c] - dnorm_mean - norm * dnorm_norm_mean) * rstd;
  }
}

CAIRN_CLONES void layernorm_param_grads(float* dweight, float* dbias, const float* dout, const float* inp,
                                        const float* mean, const float* rstd, int N, int C, int c0, int c1) {
  for (int n = 0; n < N; n++) {
    const float* d = dout + (size_t)n * C;
    const float* x = inp + (size_t)n * C;
    const float m = mean[n], s = rstd[n];
    for (int c = c0; c < c1; c++) {
      dbias[c] += d[c];
      dweight[c] += (x[c] - m) * s * d[c];
    }
  }
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C) {
  const int blocks = (C + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel
  {
#pragma omp for schedule(static) nowait
    for (int n = 0; n < N; n++)
      layernorm_backward_row(dinp + (size_t)n * C, dout + (size_t)n * C, inp + (size_t)n * C, weight, mean[n], rstd[n],
                             C);
#pragma omp for schedule(static)
    for (int blk = 0; blk < blocks; blk++)
      layernorm_param_grads(dweight, dbias, dout, inp, mean, rstd, N, C, blk * kColumnBlock,
                            std::min(C, (blk + 1) * kColumnBlock));
  }
}

// ---------------- matmul ----------------
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C, int OC,
                    WeightLayout layout) {
  float beta = 0.0f;
  if (bias) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) std::memcpy(out + (size_t)n * OC, bias, sizeof(float) * OC);
    beta = 1.0f;
  }
  if (layout == WeightLayout::InOut)
    cblas_sgemm(CblasRowMajor_, CblasNoTrans_, CblasNoTrans_, N, OC, C, 1.0f, inp, C, weight, OC, beta, out, OC);
  else cblas_sgemm(CblasRowMajor_, CblasNoTrans_, CblasTrans_, N, OC, C, 1.0f, inp, C, weight, C, beta, out, OC);
}

CAIRN_CLONES void column_sums(float* dbias, const float* dout, int N, int OC, int o0, int o1) {
  for (int n = 0; n < N; n++) {
    const float* d = dout + (size_t)n * OC;
    for (int o = o0; o < o1; o++) dbias[o] += d[o];
  }
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int C, int OC, WeightLayout layout) {
  if (layout == WeightLayout::InOut) {
    // dinp[N,C] = dout[N,OC] @ W[C,OC]^T ; dW[C,OC] += inp^T @ dout
    if (dinp)
      cblas_sgemm(CblasRowMajor_, CblasNoTrans_, CblasTrans_, N, C, OC, 1.0f, dout, OC, weight, OC, 0.0f, dinp, C);
    cblas_sgemm(CblasRowMajor_, CblasTrans_, CblasNoTrans_, C, OC, N, 1.0f, inp, C, dout, OC, 1.0f, dweight, OC);
  } else {
    // dinp[N,C] = dout[N,OC] @ W[OC,C] ; dW[OC,C] += dout^T @ inp
    if (dinp)
      cblas_sgemm(CblasRowMajor_, CblasNoTrans_, CblasNoTrans_, N, C, OC, 1.0f, dout, OC, weight, C, 0.0f, dinp, C);
    cblas_sgemm(CblasRowMajor_, CblasTrans_, CblasNoTrans_, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dweight, C);
  }
  if (dbias) {
    const int blocks = (OC + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < blocks; blk++)
      column_sums(dbias, dout, N, OC, blk * kColumnBlock, std::min(OC, (blk + 1) * kColumnBlock));
  }
}

// ---------------- attention ----------------
// Per (batch, head), in tiles of kRowTile query rows: the tile's scores against the keys its causal mask reaches are
// one sgemm straight from the qkv rows (no copies), the softmax runs row by row on them, and the output is a second
// sgemm. OpenBLAS runs these small GEMMs at ~3x the rate a row-at-a-time loop nest reached. A causal tile scores
// the keys up to its last row, so (1 + kRowTile / T) / 2 of the T^2 scores (cost model: cluster.attention_tile).
constexpr int kRowTile = 32;

// One block of attention (the plain ops are the block with q_pos = 0, Tq = Tk = T, q_qkv = kv_qkv): Tq queries at
// positions q_pos.. against the keys their causal mask reaches, 0 .. keys_of(i) - 1 (kv rows past the block's last
// reach are never read).
struct BlockShape {
  int Tq, Tk, q_pos, C, NH;
  int hd() const { return C / NH; }
  int Tn() const { return std::min(Tk, q_pos + Tq); }
  int keys_of(int i) const { return std::min(Tk, q_pos + i + 1); }  // query i sees keys 0 .. keys_of(i) - 1
};

// OpenBLAS runs single-threaded inside the OpenMP loop over heads: the pthreads build would otherwise start its own
// threads from every OpenMP thread. Restores the caller's count when it goes. The OpenMP build (the one cairn links
// when installed) needs nothing: inside a parallel region it runs on the calling thread, and its
// openblas_set_num_threads sets OpenMP's thread count too, which would leave the loop itself one thread.
extern "C" int openblas_get_num_threads(void) __attribute__((weak));
extern "C" void openblas_set_num_threads(int) __attribute__((weak));
extern "C" int openblas_get_parallel(void) __attribute__((weak));
struct SingleThreadedBlas {
  int saved = 1;
  SingleThreadedBlas() {
    const bool openmp_build = openblas_get_parallel && openblas_get_parallel() == 2;
    if (!openmp_build && openblas_get_num_threads && openblas_set_num_threads) {
      saved = openblas_get_num_threads();
      if (saved > 1) openblas_set_num_threads(1);
    }
  }
  ~SingleThreadedBlas() {
    if (saved > 1) openblas_set_num_threads(saved);
  }
};

// C (m x n, row stride ldc) = alpha A B (+ C when add); A is m x k (or its transpose stored k x m), B is k x n (or
// its transpose stored n x k).
inline void gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
                 bool add, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor_, ta ? CblasTrans_ : CblasNoTrans_, tb ? CblasTrans_ : CblasNoTrans_, m, n, k, alpha, a,
              lda, b, ldb, add ? 1.0f : 0.0f, c, ldc);
}

// P[i][0 .. nk) for the tile's rows i (query row0 + i): exp(scale * S - lse), 0 past the row's causal reach. S holds
// the unscaled scores; with lse == nullptr the row's own log-sum-exp is formed (forward), stored in lse_out, and P
// normalised.
CAIRN_CLONES void tile_probabilities(float* P, int ld, int rows, int nk, int row0, const BlockShape& bs, float scale,
                                     const float* lse, float* lse_out) {
  for (int i = 0; i < rows; i++) {
    float* p = P + (size_t)i * ld;
    const int n = bs.keys_of(row0 + i);
    if (lse) {
      const float row_lse = lse[row0 + i];
#pragma omp simd
      for (int j = 0; j < n; j++) p[j] = exp_vec(p[j] * scale - row_lse);
    } else {
      float maxval = -INFINITY;
      for (int j = 0; j < n; j++) maxval = std::max(maxval, p[j]);
      maxval *= scale;
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int j = 0; j < n; j++) {
        p[j] = exp_vec(p[j] * scale - maxval);
        sum += p[j];
      }
      lse_out[row0 + i] = maxval + std::log(sum);
      const float inv = 1.0f / sum;
#pragma omp simd
      for (int j = 0; j < n; j++) p[j] *= inv;
    }
    for (int j = n; j < nk; j++) p[j] = 0.0f;
  }
}

// lse: this head's [Tq] row of the block's lse. P: scratch of kRowTile x Tn.
void attention_head_forward(float* out, float* lse, const float* q_qkv, const float* kv_qkv, int b, int h,
                            const BlockShape& bs, std::vector<float>& P) {
  const int C = bs.C, hd = bs.hd(), Tn = bs.Tn(), w = 3 * C;
  const float scale = 1.0f / std::sqrt((float)hd);
  const float* q = q_qkv + (size_t)b * bs.Tq * w + h * hd;
  const float* k = kv_qkv + (size_t)b * bs.Tk * w + C + h * hd;
  const float* v = k + C;
  for (int r0 = 0; r0 < bs.Tq; r0 += kRowTile) {
    const int rows = std::min(kRowTile, bs.Tq - r0), nk = bs.keys_of(r0 + rows - 1);
    gemm(false, true, rows, nk, hd, 1.0f, q + (size_t)r0 * w, w, k, w, false, P.data(), Tn);
    tile_probabilities(P.data(), Tn, rows, nk, r0, bs, scale, nullptr, lse);
    gemm(false, false, rows, hd, nk, 1.0f, P.data(), Tn, v, w, false, out + ((size_t)b * bs.Tq + r0) * C + h * hd, C);
  }
}

void attention_forward_block(float* out, float* lse, const float* q_qkv, const float* kv_qkv, int B, int Tq, int Tk,
                             int q_pos, int C, int NH) {
  const BlockShape bs{Tq, Tk, q_pos, C, NH};
  const SingleThreadedBlas one_thread;
#pragma omp parallel
  {
    std::vector<float> P((size_t)kRowTile * bs.Tn());
#pragma omp for schedule(static)
    for (int bh = 0; bh < B * NH; bh++)
      attention_head_forward(out, lse + (size_t)bh * Tq, q_qkv, kv_qkv, bh / NH, bh % NH, bs, P);
  }
}

void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH) {
  attention_forward_block(out, lse, qkv, qkv, B, T, T, 0, C, NH);
}

// Per tile: P again from the scores and lse, dP = dO V^T, dS = P * (dP - D) * scale with D = dO . O per row, then
// dQ = dS K (overwrites the q third of dq_qkv), dK += dS^T Q and dV += P^T dO into the k, v thirds of dkv_qkv, which
// are zeroed first unless `accumulate_kv` (the plain op: every key row gets a gradient). Heads write disjoint
// columns, so the OpenMP threads never share an element of dq_qkv or dkv_qkv.
CAIRN_CLONES void attention_head_backward(float* dq_qkv, float* dkv_qkv, const float* dout, const float* q_qkv,
                                          const float* kv_qkv, const float* out, const float* lse, int b, int h,
                                          const BlockShape& bs, bool accumulate_kv, std::vector<float>& P,
                                          std::vector<float>& dS) {
  const int C = bs.C, hd = bs.hd(), Tn = bs.Tn(), w = 3 * C;
  const float scale = 1.0f / std::sqrt((float)hd);
  const float* q = q_qkv + (size_t)b * bs.Tq * w + h * hd;
  const float* k = kv_qkv + (size_t)b * bs.Tk * w + C + h * hd;
  const float* v = k + C;
  const float* dO = dout + (size_t)b * bs.Tq * C + h * hd;
  const float* O = out + (size_t)b * bs.Tq * C + h * hd;
  float* dq = dq_qkv + (size_t)b * bs.Tq * w + h * hd;
  float* dk = dkv_qkv + (size_t)b * bs.Tk * w + C + h * hd;
  float* dv = dk + C;
  if (!accumulate_kv)
    for (int j = 0; j < Tn; j++) {
      std::fill(dk + (size_t)j * w, dk + (size_t)j * w + hd, 0.0f);
      std::fill(dv + (size_t)j * w, dv + (size_t)j * w + hd, 0.0f);
    }
  for (int r0 = 0; r0 < bs.Tq; r0 += kRowTile) {
    const int rows = std::min(kRowTile, bs.Tq - r0), nk = bs.keys_of(r0 + rows - 1);
    gemm(false, true, rows, nk, hd, 1.0f, q + (size_t)r0 * w, w, k, w, false, P.data(), Tn);
    tile_probabilities(P.data(), Tn, rows, nk, r0, bs, scale, lse, nullptr);
    gemm(false, true, rows, nk, hd, 1.0f, dO + (size_t)r0 * C, C, v, w, false, dS.data(), Tn);  // dP
    for (int i = 0; i < rows; i++) {
      const float* dOi = dO + (size_t)(r0 + i) * C;
      const float* Oi = O + (size_t)(r0 + i) * C;
      float D = 0.0f;
#pragma omp simd reduction(+ : D)
      for (int d = 0; d < hd; d++) D += dOi[d] * Oi[d];
      const float* Pi = &P[(size_t)i * Tn];
      float* dSi = &dS[(size_t)i * Tn];
#pragma omp simd
      for (int j = 0; j < nk; j++) dSi[j] = Pi[j] * (dSi[j] - D) * scale;
    }
    gemm(false, false, rows, hd, nk, 1.0f, dS.data(), Tn, k, w, false, dq + (size_t)r0 * w, w);
    gemm(true, false, nk, hd, rows, 1.0f, dS.data(), Tn, q + (size_t)r0 * w, w, true, dk, w);
    gemm(true, false, nk, hd, rows, 1.0f, P.data(), Tn, dO + (size_t)r0 * C, C, true, dv, w);
  }
}

void attention_backward_impl(float* dq_qkv, float* dkv_qkv, const float* dout, const float* q_qkv, const float* kv_qkv,
                             const float* out, const float* lse, int B, const BlockShape& bs, bool accumulate_kv) {
  const int NH = bs.NH;
  const SingleThreadedBlas one_thread;
#pragma omp parallel
  {
    std::vector<float> P((size_t)kRowTile * bs.Tn()), dS((size_t)kRowTile * bs.Tn());
#pragma omp for schedule(static)
    for (int bh = 0; bh < B * NH; bh++)
      attention_head_backward(dq_qkv, dkv_qkv, dout, q_qkv, kv_qkv, out, lse + (size_t)bh * bs.Tq, bh / NH, bh % NH, bs,
                              accumulate_kv, P, dS);
  }
}

void attention_backward_block(float* dq_qkv, float* dkv_qkv, const float* dout, const float* q_qkv, const float* kv_qkv,
                              const float* out, const float* lse, int B, int Tq, int Tk, int q_pos, int C, int NH) {
  attention_backward_impl(dq_qkv, dkv_qkv, dout, q_qkv, kv_qkv, out, lse, B, BlockShape{Tq, Tk, q_pos, C, NH}, true);
}

// The whole sequence as one block; k and v thirds zeroed per head first.
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse, int B,
                        int T, int C, int NH) {
  attention_backward_impl(dqkv, dqkv, dout, qkv, qkv, out, lse, B, BlockShape{T, T, 0, C, NH}, false);
}

// ---------------- GELU, residual ----------------
constexpr size_t kElementChunk = 16384;  // elements per task in element-wise loops

// 0.5 * (1 + tanh(y)) written as sigmoid(2y): no cancellation where tanh(y) is close to -1. The clamp keeps -2y in
// exp_poly's range, so exp_vec's second clamp would change nothing; with it, GCC if-converted the two clamps into
// blends whose speculative multiply by a subnormal constant (x / (1 + e^88)) cost a microcode assist on every
// element: GELU forward ran 7x slower than backward (0.8 vs 0.12 ms for 2 x 128 x 512 floats), bitwise the same.
inline float half_one_plus_tanh(float y) {
  y = std::min(std::max(y, -40.0f), 40.0f);
  return 1.0f / (1.0f + exp_poly(-2.0f * y));
}

CAIRN_CLONES void gelu_forward_range(float* out, const float* inp, size_t n) {
#pragma omp simd
  for (size_t i = 0; i < n; i++) {
    const float x = inp[i];
    out[i] = x * half_one_plus_tanh(kGeluScaling * (x + 0.044715f * x * x * x));
  }
}

// d/dx: 0.5(1+tanh) + 0.5x sech^2 s(1+3a x^2), with 0.5(1+tanh) = sg and sech^2 = 4 sg (1-sg)
CAIRN_CLONES void gelu_backward_range(float* dinp, const float* inp, const float* dout, size_t n) {
#pragma omp simd
  for (size_t i = 0; i < n; i++) {
    const float x = inp[i];
    const float sg = half_one_plus_tanh(kGeluScaling * (x + 0.044715f * x * x * x));
    const float local = sg + 2.0f * x * sg * (1.0f - sg) * kGeluScaling * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] = local * dout[i];
  }
}

void gelu_forward(float* out, const float* inp, size_t n) {
  const long chunks = (long)((n + kElementChunk - 1) / kElementChunk);
#pragma omp parallel for schedule(static)
  for (long c = 0; c < chunks; c++) {
    const size_t first = c * kElementChunk;
    gelu_forward_range(out + first, inp + first, std::min(kElementChunk, n - first));
  }
}

void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
  const long chunks = (long)((n + kElementChunk - 1) / kElementChunk);
#pragma omp parallel for schedule(static)
  for (long c = 0; c < chunks; c++) {
    const size_t first = c * kElementChunk;
    gelu_backward_range(dinp + first, inp + first, dout + first, std::min(kElementChunk, n - first));
  }
}

void residual_forward(float* out, const float* a, const float* b, size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

// ---------------- softmax + cross-entropy ----------------
CAIRN_CLONES float logsumexp_row(const float* l, int V) {
  float maxval = -INFINITY;
#pragma omp simd reduction(max : maxval)
  for (int j = 0; j < V; j++) maxval = std::max(maxval, l[j]);
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j < V; j++) sum += exp_vec(l[j] - maxval);
  return maxval + std::log(sum);
}

void crossentropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets, int N, int V,
                          int Vp) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* l = logits + (size_t)n * Vp;
    const int target = targets[n];
    lse[n] = logsumexp_row(l, V);  // written for every row, ignored ones included
    // target >= V: the target column is on another rank, which subtracts its logit; never read l[target] here
    losses[n] = target < 0 ? 0.0f : target >= V ? lse[n] : lse[n] - l[target];
  }
}

CAIRN_CLONES void crossentropy_backward_row(float* dl, const float* l, float row_lse, int target, float dloss, int V,
                                            int Vp) {
  if (target < 0) {
    std::fill(dl, dl + Vp, 0.0f);
    return;
  }
#pragma omp simd
  for (int j = 0; j < V; j++) dl[j] = exp_vec(l[j] - row_lse) * dloss;
  for (int j = V; j < Vp; j++) dl[j] = 0.0f;
  if (target < V) dl[target] -= dloss;  // target >= V (on another rank): pure softmax row
}

void crossentropy_backward(float* dlogits, const float* logits, const float* lse, const int32_t* targets, float dloss,
                           int N, int V, int Vp) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++)
    crossentropy_backward_row(dlogits + (size_t)n * Vp, logits + (size_t)n * Vp, lse[n], targets[n], dloss, V, Vp);
}

// ---------------- optimizer ----------------
void adamw_update(float* params, const float* grads, float* m, float* v, size_t n, const AdamWParams& hp) {
  const AdamWStep step(hp);
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) step.apply(params[i], grads[i], m[i], v[i]);
}

double squared_norm(const float* x, size_t n) {
  // fixed chunks summed in a fixed order: the same result for any thread count
  constexpr size_t chunk = 1 << 16;
  const long chunks = (long)((n + chunk - 1) / chunk);
  std::vector<double> partial(chunks);
#pragma omp parallel for schedule(static)
  for (long c = 0; c < chunks; c++) {
    // eight running sums in a fixed order (one chain of dependent adds ran at 1.5 GFLOP/s); the compiler maps them
    // to vector lanes, and the result is the same for every instruction set
    constexpr int kLanes = 8;
    const size_t first = c * chunk, last = std::min(n, first + chunk);
    double lane[kLanes] = {};
    size_t i = first;
    for (; i + kLanes <= last; i += kLanes)
      for (int k = 0; k < kLanes; k++) lane[k] += (double)x[i + k] * x[i + k];
    for (; i < last; i++) lane[0] += (double)x[i] * x[i];
    partial[c] = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
  }
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

void scale(float* x, float s, size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) x[i] *= s;
}

}  // namespace

const Backend& cpu_backend() {
  static const Backend backend = [] {
    Backend b = host_memory_backend("cpu");
    b.embedding_forward = embedding_forward;
    b.embedding_backward = embedding_backward;
    b.layernorm_forward = layernorm_forward;
    b.layernorm_backward = layernorm_backward;
    b.matmul_forward = matmul_forward;
    b.matmul_backward = matmul_backward;
    b.attention_forward = attention_forward;
    b.attention_backward = attention_backward;
    b.attention_forward_block = attention_forward_block;
    b.attention_backward_block = attention_backward_block;
    b.attention_merge = attention_merge_host;
    b.gelu_forward = gelu_forward;
    b.gelu_backward = gelu_backward;
    b.residual_forward = residual_forward;
    b.crossentropy_forward = crossentropy_forward;
    b.crossentropy_backward = crossentropy_backward;
    b.adamw_update = adamw_update;
    b.squared_norm = squared_norm;
    b.scale = scale;
    return b;
  }();
  return backend;
}

}  // namespace cairn::kernels
