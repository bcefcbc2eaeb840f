// CUDA layernorm (one warp per row) forward and backward, and the deterministic column sums its weight/bias
// gradients (and matmul's bias gradient) use.
#include "cuda_common.cuh"

namespace cairn::kernels::cuda {
namespace {

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

}  // namespace

void column_sums(float* out, const float* in, const float* x, const float* mean, const float* rstd, int N, int C,
                 int mode) {
  column_sums_kernel<<<(C + 31) / 32, dim3(32, 8)>>>(out, in, x, mean, rstd, N, C, mode);
  CAIRN_CUDA_CHECK_LAUNCH("column_sums");
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int N, int C) {
  layernorm_forward_kernel<<<blocks_for((size_t)N * 32), kThreads>>>(out, mean, rstd, inp, weight, bias, N, C);
  CAIRN_CUDA_CHECK_LAUNCH("layernorm_forward");
}
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C) {
  layernorm_backward_kernel<<<blocks_for((size_t)N * 32), kThreads>>>(dinp, dout, inp, weight, mean, rstd, N, C);
  CAIRN_CUDA_CHECK_LAUNCH("layernorm_backward");
  column_sums(dbias, dout, nullptr, nullptr, nullptr, N, C, 0);
  column_sums(dweight, dout, inp, mean, rstd, N, C, 1);
}

}  // namespace cairn::kernels::cuda
