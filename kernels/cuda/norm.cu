// CUDA layernorm (one warp per row) forward and backward, and the deterministic column sums its weight/bias
// gradients (and matmul's bias gradient) use.
#include <algorithm>

#include "cuda_common.cuh"

namespace cairn::kernels::cuda {
namespace {

// Column sums over N rows, deterministic, in two passes so that a narrow matrix still fills the GPU (C = 768 is 24
// column blocks: one pass left 108 of an H100's 132 SMs idle while each block walked all N rows):
//  1. column_partials_kernel, grid (ceil(C / 32), S): block (bx, sy) sums rows [sy * R, min(N, (sy + 1) * R)) of
//     columns bx * 32 .. bx * 32 + 31, 8 row lanes (rows r0 + ty, r0 + ty + 8, ...) combined in lane order, into
//     partial[sy * C + c];
//  2. column_combine_kernel: out[c] += partial[0 * C + c] + partial[1 * C + c] + ... + partial[(S - 1) * C + c], in
//     that order.
// f(n, c) is in[n*C+c] (mode 0) or in[n*C+c] * (x[n*C+c]-mean[n])*rstd[n] (mode 1). S and R depend only on N and C
// (column_splits), so every run, on any GPU, adds the same terms in the same order.
__global__ void column_partials_kernel(float* partial, const float* in, const float* x, const float* mean,
                                       const float* rstd, int N, int C, int rows_per_split, int mode) {
  __shared__ float part[8][33];
  const int c = blockIdx.x * 32 + threadIdx.x;
  const int r0 = blockIdx.y * rows_per_split, r1 = min(N, r0 + rows_per_split);
  float s = 0.0f;
  if (c < C)
    for (int n = r0 + threadIdx.y; n < r1; n += 8) {
      const size_t i = (size_t)n * C + c;
      s += mode == 0 ? in[i] : in[i] * (x[i] - mean[n]) * rstd[n];
    }
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float total = 0.0f;
    for (int y = 0; y < 8; y++) total += part[y][threadIdx.x];
    partial[(size_t)blockIdx.y * C + c] = total;
  }
}

__global__ void column_combine_kernel(float* out, const float* partial, int C, int splits) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float total = 0.0f;
  for (int s = 0; s < splits; s++) total += partial[(size_t)s * C + c];
  out[c] += total;
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

ColumnSplits column_splits(int N, int C) {
  const int col_blocks = (C + 31) / 32;
  const int by_rows = (N + kColumnMinRowsPerSplit - 1) / kColumnMinRowsPerSplit;
  const int by_blocks = (kColumnTargetBlocks + col_blocks - 1) / col_blocks;
  const int wanted = std::max(1, std::min(by_rows, by_blocks));
  ColumnSplits sp;
  sp.rows = (N + wanted - 1) / wanted;
  sp.splits = (N + sp.rows - 1) / sp.rows;  // <= wanted; every split has at least one row
  return sp;
}

void column_sums(float* out, const float* in, const float* x, const float* mean, const float* rstd, int N, int C,
                 int mode) {
  if (N <= 0 || C <= 0) return;  // an empty sum adds nothing (and a grid of 0 blocks is a launch error)
  const ColumnSplits sp = column_splits(N, C);
  float* partial = scratch((size_t)sp.splits * C);  // legacy stream: the previous user of scratch is done before pass 1
  column_partials_kernel<<<dim3((C + 31) / 32, sp.splits), dim3(32, 8)>>>(partial, in, x, mean, rstd, N, C, sp.rows,
                                                                          mode);
  CAIRN_CUDA_CHECK_LAUNCH("column_sums partials");
  column_combine_kernel<<<blocks_for(C), kThreads>>>(out, partial, C, sp.splits);
  CAIRN_CUDA_CHECK_LAUNCH("column_sums combine");
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
