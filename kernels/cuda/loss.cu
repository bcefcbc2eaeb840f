// CUDA fused softmax + cross-entropy forward and backward, one block per row; targets < 0 are ignored and the padded
// vocabulary columns >= V masked (targets >= V: the column lives on another vocabulary-parallel rank).
#include "cuda_common.cuh"

namespace cairn::kernels::cuda {
namespace {

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
}  // namespace

void crossentropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets, int N, int V,
                          int Vp) {
  if (!N) return;
  crossentropy_forward_kernel<<<N, kThreads>>>(losses, lse, logits, targets, V, Vp);
  CAIRN_CUDA_CHECK_LAUNCH("crossentropy_forward");
}
void crossentropy_backward(float* dlogits, const float* logits, const float* lse, const int32_t* targets, float dloss,
                           int N, int V, int Vp) {
  if (!N) return;
  crossentropy_backward_kernel<<<N, kThreads>>>(dlogits, logits, lse, targets, dloss, V, Vp);
  CAIRN_CUDA_CHECK_LAUNCH("crossentropy_backward");
}

}  // namespace cairn::kernels::cuda
