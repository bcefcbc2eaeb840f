// CUDA embedding ops: token + position embeddings forward, their gradients backward (deterministic, no atomics).
#include "cuda_common.cuh"

namespace cairn::kernels::cuda {
namespace {

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

}  // namespace

void embedding_forward(float* out, const int32_t* inp, const float* wte, const float* wpe, int B, int T, int C) {
  embedding_forward_kernel<<<blocks_for((size_t)B * T * C), kThreads>>>(out, inp, wte, wpe, B * T, T, C);
  CAIRN_CUDA_CHECK_LAUNCH("embedding_forward");
}
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* inp, int B, int T, int C) {
  if (dwpe) embedding_backward_wpe<<<blocks_for((size_t)T * C), kThreads>>>(dwpe, dout, B, T, C);
  embedding_backward_wte<<<blocks_for(C, 64), 64>>>(dwte, dout, inp, B * T, C);
  CAIRN_CUDA_CHECK_LAUNCH("embedding_backward");
}

}  // namespace cairn::kernels::cuda
