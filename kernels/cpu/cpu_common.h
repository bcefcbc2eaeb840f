// Pieces shared by the CPU backends (and the CUDA one): constants, host memory hooks, element-wise optimizer loops.
#pragma once
#include <cmath>
#include <cstddef>

#include "cairn/kernels/backend.h"

// AdamWStep::apply also runs in CUDA kernels (kernels/cuda), so both backends share one formula.
#ifdef __CUDACC__
#define CAIRN_HOST_DEVICE __host__ __device__
#else
#define CAIRN_HOST_DEVICE
#endif

namespace cairn::kernels {

constexpr float kLayerNormEps = 1e-5f;
constexpr float kGeluScaling = 0.7978845608028654f;  // sqrt(2/pi)

// A Backend with host-memory hooks (and argmax_rows) filled in and every other op null.
Backend host_memory_backend(const char* name);

void adamw_update_reference(float* params, const float* grads, float* m, float* v, size_t n, const AdamWParams& hp);
double squared_norm_reference(const float* x, size_t n);
void scale_reference(float* x, float s, size_t n);

// The per-element AdamW update in PyTorch's order (decay, moments, bias-corrected step), shared so both
// CPU backends produce bitwise-identical parameters.
struct AdamWStep {
  float lr, beta1, beta2, eps, decay_factor, step_size, bc2_sqrt, grad_scale;
  explicit AdamWStep(const AdamWParams& hp)
      // scalars in double like PyTorch's Python-side arithmetic, then rounded to fp32
      : lr(hp.lr),
        beta1(hp.beta1),
        beta2(hp.beta2),
        eps(hp.eps),
        decay_factor((float)(1.0 - (double)hp.lr * hp.weight_decay)),
        step_size((float)(hp.lr / (1.0 - std::pow((double)hp.beta1, (double)hp.step)))),
        bc2_sqrt((float)std::sqrt(1.0 - std::pow((double)hp.beta2, (double)hp.step))),
        grad_scale(hp.grad_scale) {}
  CAIRN_HOST_DEVICE void apply(float& p, float g, float& m, float& v) const {
    g *= grad_scale;
    p *= decay_factor;
    m = beta1 * m + (1.0f - beta1) * g;
    v = beta2 * v + (1.0f - beta2) * g * g;
    float denom = sqrtf(v) / bc2_sqrt + eps;
    p += -step_size * (m / denom);
  }
};

// attention_merge's formula for one query row of one head (ring context parallelism): (o, lse) and (part_o, part_lse)
// are softmax attention over two disjoint key sets; o becomes the attention over their union. Both CPU backends and
// the CUDA kernel run this, so they agree bitwise.
CAIRN_HOST_DEVICE inline void merge_attention_row(float* o, float& lse, const float* part_o, float part_lse, int hd) {
  const float m = lse > part_lse ? lse : part_lse;
  const float wa = expf(lse - m), wb = expf(part_lse - m), sum = wa + wb;
  const float a = wa / sum, b = wb / sum;
  for (int d = 0; d < hd; d++) o[d] = a * o[d] + b * part_o[d];
  lse = m + logf(sum);
}

// attention_merge over [B, T, C] / [B, NH, T] on host memory (both CPU backends).
void attention_merge_host(float* out, float* lse, const float* part_out, const float* part_lse, int B, int T, int C,
                          int NH);

}  // namespace cairn::kernels
