// CUDA optimizer ops: AdamW (PyTorch's step, the formula shared with the CPU backends), the squared norm for gradient
// clipping (fixed grid, double partials summed on the host in order: deterministic) and scale.
#include <vector>

#include "cuda_common.cuh"

namespace cairn::kernels::cuda {
namespace {

__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, size_t n, AdamWStep step) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) step.apply(p[i], g[i], m[i], v[i]);
}

__global__ void scale_kernel(float* x, float s, size_t n) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= s;
}

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

}  // namespace

void adamw_update(float* params, const float* grads, float* m, float* v, size_t n, const AdamWParams& hp) {
  if (!n) return;
  adamw_kernel<<<blocks_for(n), kThreads>>>(params, grads, m, v, n, AdamWStep(hp));
  CAIRN_CUDA_CHECK_LAUNCH("adamw_update");
}
void scale(float* x, float s, size_t n) {
  if (!n) return;
  scale_kernel<<<blocks_for(n), kThreads>>>(x, s, n);
  CAIRN_CUDA_CHECK_LAUNCH("scale");
}
double squared_norm(const float* x, size_t n) {
  if (!n) return 0.0;
  double* partial = reinterpret_cast<double*>(scratch(2 * kNormBlocks));
  squared_norm_kernel<<<kNormBlocks, kThreads>>>(partial, x, n);
  CAIRN_CUDA_CHECK_LAUNCH("squared_norm");
  std::vector<double> host(kNormBlocks);
  to_host(host.data(), partial, sizeof(double) * kNormBlocks);
  double total = 0.0;
  for (double p : host) total += p;
  return total;
}

}  // namespace cairn::kernels::cuda
