// CUDA argmax_rows for the backend table: one block per row, the same answer as the CPU loop (first maximum, a NaN
// counting as the largest), so evaluation accuracy does not depend on the backend.
#include "cuda_common.cuh"

namespace cairn::kernels::cuda {
namespace {

constexpr int kArgmaxThreads = 256;

struct Candidate {
  float value;
  int32_t index;
};

// a before b in the CPU loop's order: a NaN beats any number, the larger number beats the smaller, and between
// equals (or two NaNs) the smaller index wins.
__device__ inline bool better(Candidate a, Candidate b) {
  const bool a_nan = isnan(a.value), b_nan = isnan(b.value);
  if (a_nan != b_nan) return a_nan;
  if (!a_nan && a.value != b.value) return a.value > b.value;
  return a.index < b.index;
}

__global__ void argmax_rows_kernel(int32_t* out, const float* x, int V, int Vp) {
  __shared__ Candidate best[kArgmaxThreads];
  const float* row = x + (size_t)blockIdx.x * Vp;
  // each thread scans its columns in increasing order, so within a thread the first of equals is kept
  Candidate mine{row[0], 0};
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    Candidate c{row[j], j};
    if (better(c, mine)) mine = c;
  }
  best[threadIdx.x] = mine;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
    if ((int)threadIdx.x < stride && better(best[threadIdx.x + stride], best[threadIdx.x]))
      best[threadIdx.x] = best[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = best[0].index;
}

}  // namespace

void argmax_rows(int32_t* out, const float* x, int N, int V, int Vp) {
  if (N <= 0) return;
  argmax_rows_kernel<<<N, kArgmaxThreads>>>(out, x, V, Vp);
  CAIRN_CUDA_CHECK_LAUNCH("argmax_rows");
}

}  // namespace cairn::kernels::cuda
