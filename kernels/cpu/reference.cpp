// The reference CPU backend: plain, readable single-threaded loops (llm.c style) that define each op.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cairn/kernels/backend.h"
#include "cpu_common.h"

namespace cairn::kernels {
namespace {

void embedding_forward(float* out, const int32_t* inp, const float* wte, const float* wpe, int B, int T, int C) {
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      float* o = out + ((size_t)b * T + t) * C;
      const int id = inp[b * T + t];  // < 0: the wte row lives on another rank (vocab-parallel), contributes 0
      for (int c = 0; c < C; c++) {
        const float e = id >= 0 ? wte[(size_t)id * C + c] : 0.0f;
        const float p = wpe ? wpe[(size_t)t * C + c] : 0.0f;
        o[c] = e + p;
      }
    }
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* inp, int B, int T, int C) {
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      const float* d = dout + ((size_t)b * T + t) * C;
      const int id = inp[b * T + t];
      for (int c = 0; c < C; c++) {
        if (id >= 0) dwte[(size_t)id * C + c] += d[c];
        if (dwpe) dwpe[(size_t)t * C + c] += d[c];
      }
    }
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int N, int C) {
  for (int n = 0; n < N; n++) {
    const float* x = inp + (size_t)n * C;
    float m = 0.0f;
    for (int c = 0; c < C; c++) m += x[c];
    m /= C;
    float var = 0.0f;
    for (int c = 0; c < C; c++) var += (x[c] - m) * (x[c] - m);
    var /= C;
    float s = 1.0f / std::sqrt(var + kLayerNormEps);
    float* o = out + (size_t)n * C;
    for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * weight[c] + bias[c];
    mean[n] = m;
    rstd[n] = s;
  }
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C) {
  for (int n = 0; n < N; n++) {
    const float* x = inp + (size_t)n * C;
    const float* d = dout + (size_t)n * C;
    float* dx = dinp + (size_t)n * C;
    // two reductions: mean(dnorm) and mean(dnorm * norm)
    float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
    for (int c = 0; c < C; c++) {
      float norm = (x[c] - mean[n]) * rstd[n];
      float dnorm = weight[c] * d[c];
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * norm;
    }
    dnorm_mean /= C;
    dnorm_norm_mean /= C;
    for (int c = 0; c < C; c++) {
      float norm = (x[c] - mean[n]) * rstd[n];
      float dnorm = weight[c] * d[c];
      dbias[c] += d[c];
      dweight[c] += norm * d[c];
      dx[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * rstd[n];
    }
  }
}

// W[c][o] in either layout
inline float weight_at(const float* w, int c, int o, int C, int OC, WeightLayout layout) {
  return layout == WeightLayout::InOut ? w[(size_t)c * OC + o] : w[(size_t)o * C + c];
}
inline float& weight_ref(float* w, int c, int o, int C, int OC, WeightLayout layout) {
  return layout == WeightLayout::InOut ? w[(size_t)c * OC + o] : w[(size_t)o * C + c];
}

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C, int OC,
                    WeightLayout layout) {
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      float sum = bias ? bias[o] : 0.0f;
      for (int c = 0; c < C; c++) sum += inp[(size_t)n * C + c] * weight_at(weight, c, o, C, OC, layout);
      out[(size_t)n * OC + o] = sum;
    }
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int C, int OC, WeightLayout layout) {
  if (dinp)
    for (int n = 0; n < N; n++)
      for (int c = 0; c < C; c++) {
        float sum = 0.0f;
        for (int o = 0; o < OC; o++) sum += dout[(size_t)n * OC + o] * weight_at(weight, c, o, C, OC, layout);
        dinp[(size_t)n * C + c] = sum;
      }
  // row by row (cache-friendly): dW[c][o] += inp[n][c] * dout[n][o], dbias[o] += dout[n][o]
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      const float d = dout[(size_t)n * OC + o];
      for (int c = 0; c < C; c++) weight_ref(dweight, c, o, C, OC, layout) += inp[(size_t)n * C + c] * d;
      if (dbias) dbias[o] += d;
    }
}

// Query i of the block (sequence position q_pos + i, row i of q_qkv) attends keys 0 .. min(q_pos + i, Tk - 1) (rows
// of kv_qkv).
void attention_forward_block(float* out, float* lse, const float* q_qkv, const float* kv_qkv, int B, int Tq, int Tk,
                             int q_pos, int C, int NH) {
  const int hd = C / NH;
  const float scale = 1.0f / std::sqrt((float)hd);
  std::vector<float> scores(q_pos + Tq);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int i = 0; i < Tq; i++) {
        const int last = std::min(q_pos + i, Tk - 1);  // the causal mask, clipped to the block's keys
        const float* q = q_qkv + ((size_t)b * Tq + i) * 3 * C + h * hd;
        float maxval = -INFINITY;
        for (int j = 0; j <= last; j++) {
          const float* k = kv_qkv + ((size_t)b * Tk + j) * 3 * C + C + h * hd;
          float s = 0.0f;
          for (int d = 0; d < hd; d++) s += q[d] * k[d];
          scores[j] = s * scale;
          if (scores[j] > maxval) maxval = scores[j];
        }
        float sum = 0.0f;
        for (int j = 0; j <= last; j++) sum += std::exp(scores[j] - maxval);
        float row_lse = maxval + std::log(sum);
        lse[((size_t)b * NH + h) * Tq + i] = row_lse;
        float* o = out + ((size_t)b * Tq + i) * C + h * hd;
        for (int d = 0; d < hd; d++) o[d] = 0.0f;
        for (int j = 0; j <= last; j++) {
          float p = std::exp(scores[j] - row_lse);
          const float* v = kv_qkv + ((size_t)b * Tk + j) * 3 * C + 2 * C + h * hd;
          for (int d = 0; d < hd; d++) o[d] += p * v[d];
        }
      }
}

void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH) {
  attention_forward_block(out, lse, qkv, qkv, B, T, T, 0, C, NH);
}

// With P = softmax(S): dV = P^T dO, dP = dO V^T, dS = P * (dP - rowsum(dO * O)), dQ = dS K s, dK = dS^T Q s.
// dQ lands in the q third of dq_qkv (zeroed row by row here: overwritten), dK and dV are added to the k and v thirds
// of dkv_qkv; the thirds are disjoint columns, so dq_qkv == dkv_qkv is fine.
void attention_backward_block(float* dq_qkv, float* dkv_qkv, const float* dout, const float* q_qkv, const float* kv_qkv,
                              const float* out, const float* lse, int B, int Tq, int Tk, int q_pos, int C, int NH) {
  const int hd = C / NH;
  const float scale = 1.0f / std::sqrt((float)hd);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int i = 0; i < Tq; i++) {
        const size_t row_i = ((size_t)b * Tq + i) * 3 * C + h * hd;
        const float* q = q_qkv + row_i;
        float* dq = dq_qkv + row_i;
        const float* dO = dout + ((size_t)b * Tq + i) * C + h * hd;
        const float* O = out + ((size_t)b * Tq + i) * C + h * hd;
        float D = 0.0f;
        for (int d = 0; d < hd; d++) D += dO[d] * O[d];
        const float row_lse = lse[((size_t)b * NH + h) * Tq + i];
        for (int d = 0; d < hd; d++) dq[d] = 0.0f;
        for (int j = 0; j <= std::min(q_pos + i, Tk - 1); j++) {
          const size_t row_j = ((size_t)b * Tk + j) * 3 * C + h * hd;
          const float* k = kv_qkv + row_j + C;
          const float* v = kv_qkv + row_j + 2 * C;
          float s = 0.0f, dp = 0.0f;
          for (int d = 0; d < hd; d++) {
            s += q[d] * k[d];
            dp += dO[d] * v[d];
          }
          float p = std::exp(s * scale - row_lse);
          float ds = p * (dp - D) * scale;
          for (int d = 0; d < hd; d++) {
            dq[d] += ds * k[d];
            dkv_qkv[row_j + C + d] += ds * q[d];
            dkv_qkv[row_j + 2 * C + d] += p * dO[d];
          }
        }
      }
}

// The whole sequence is one block that is its own key range: dK, dV accumulate onto zeroed thirds.
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse, int B,
                        int T, int C, int NH) {
  std::memset(dqkv, 0, sizeof(float) * (size_t)B * T * 3 * C);
  attention_backward_block(dqkv, dqkv, dout, qkv, qkv, out, lse, B, T, T, 0, C, NH);
}

void gelu_forward(float* out, const float* inp, size_t n) {
  for (size_t i = 0; i < n; i++) {
    float x = inp[i];
    out[i] = 0.5f * x * (1.0f + std::tanh(kGeluScaling * (x + 0.044715f * x * x * x)));
  }
}

void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
  for (size_t i = 0; i < n; i++) {
    float x = inp[i];
    float th = std::tanh(kGeluScaling * (x + 0.044715f * x * x * x));
    float sech2 = 1.0f - th * th;
    float local = 0.5f * (1.0f + th) + 0.5f * x * sech2 * kGeluScaling * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] = local * dout[i];
  }
}

void residual_forward(float* out, const float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void crossentropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets, int N, int V,
                          int Vp) {
  for (int n = 0; n < N; n++) {
    const float* l = logits + (size_t)n * Vp;
    float maxval = -INFINITY;
    for (int j = 0; j < V; j++)
      if (l[j] > maxval) maxval = l[j];
    float sum = 0.0f;
    for (int j = 0; j < V; j++) sum += std::exp(l[j] - maxval);
    lse[n] = maxval + std::log(sum);
    const int target = targets[n];
    if (target < 0) losses[n] = 0.0f;          // ignored row
    else if (target >= V) losses[n] = lse[n];  // target column on another rank: its logit is subtracted there
    else losses[n] = lse[n] - l[target];
  }
}

void crossentropy_backward(float* dlogits, const float* logits, const float* lse, const int32_t* targets, float dloss,
                           int N, int V, int Vp) {
  for (int n = 0; n < N; n++) {
    const float* l = logits + (size_t)n * Vp;
    float* dl = dlogits + (size_t)n * Vp;
    const int target = targets[n];  // >= V never equals a column j < V: pure softmax row
    for (int j = 0; j < Vp; j++) {
      if (target < 0 || j >= V) {
        dl[j] = 0.0f;
        continue;
      }
      float p = std::exp(l[j] - lse[n]);
      dl[j] = (p - (j == target ? 1.0f : 0.0f)) * dloss;
    }
  }
}

}  // namespace

const Backend& cpu_reference_backend() {
  static const Backend backend = [] {
    Backend b = host_memory_backend("cpu-ref");
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
    b.adamw_update = adamw_update_reference;
    b.squared_norm = squared_norm_reference;
    b.scale = scale_reference;
    return b;
  }();
  return backend;
}

}  // namespace cairn::kernels
