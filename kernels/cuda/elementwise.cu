// CUDA element-wise ops: GELU (tanh form) forward and backward, residual add; one thread per element.
#include "cuda_common.cuh"

namespace cairn::kernels::cuda {
namespace {

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
  const float local =
      0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * kGeluScaling * (1.0f + 3.0f * 0.044715f * x * x);
  dinp[i] = local * dout[i];
}
__global__ void residual_kernel(float* out, const float* a, const float* b, size_t n) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

}  // namespace

void gelu_forward(float* out, const float* inp, size_t n) {
  if (!n) return;
  gelu_forward_kernel<<<blocks_for(n), kThreads>>>(out, inp, n);
  CAIRN_CUDA_CHECK_LAUNCH("gelu_forward");
}
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
  if (!n) return;
  gelu_backward_kernel<<<blocks_for(n), kThreads>>>(dinp, inp, dout, n);
  CAIRN_CUDA_CHECK_LAUNCH("gelu_backward");
}
void residual_forward(float* out, const float* a, const float* b, size_t n) {
  if (!n) return;
  residual_kernel<<<blocks_for(n), kThreads>>>(out, a, b, n);
  CAIRN_CUDA_CHECK_LAUNCH("residual_forward");
}

}  // namespace cairn::kernels::cuda
