// CUDA embedding ops: token + position embeddings forward, their gradients backward (deterministic, no atomics; wte's
// gradient grouped by token id with CUB and accumulated in position order, bitwise the CPU reference's).
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_run_length_encode.cuh>
#include <cub/device/device_scan.cuh>

#include <algorithm>

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

// wpe: one thread per (t, c) summing over b (rows are disjoint per t).
__global__ void embedding_backward_wpe(float* dwpe, const float* dout, int B, int T, int C) {
  const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= (size_t)T * C) return;
  float s = 0.0f;
  for (int b = 0; b < B; b++) s += dout[(size_t)b * T * C + idx];
  dwpe[idx] += s;
}

// wte: ids repeat, so positions are first grouped by id (embedding_backward below) and one block x per distinct id
// adds that id's rows. Why not one thread per column walking all N = B*T positions (the kernel this replaced): that is
// a chain of N dependent read-modify-writes per thread on only C threads (12 blocks of 64 for C = 768), about 4 ms a
// step at GPT-2 124M B=8 T=1024 on an H100 (~20% of the step), 15 ms at B=32. Each thread here still adds its id's
// positions one += at a time in ascending position order (the stable sort keeps them ascending), so every dwte element
// sees the same fp32 additions in the same order as the CPU reference (positions in order, dwte[id] += dout[bt]) and
// the result is bitwise that, and deterministic. An id repeated k times is a chain of k adds, not N.
//
// ids, counts, offsets: the sorted distinct ids (negative ones first), their position counts and where their
// positions start in pos; *num_runs of them are valid (blocks x past it return at once: the grid is sized for N
// runs, the count is known only on the device).
__global__ void embedding_backward_wte_grouped(float* dwte, const float* dout, const int32_t* ids,
                                               const int32_t* counts, const int32_t* offsets, const int32_t* pos,
                                               const int32_t* num_runs, int C) {
  const int run = blockIdx.x;
  if (run >= *num_runs) return;
  const int id = ids[run];
  if (id < 0) return;  // row owned by another rank (vocab-parallel)
  const int c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int32_t* p = pos + offsets[run];
  const int n = counts[run];
  float* w = dwte + (size_t)id * C + c;
  float acc = *w;  // the running sum stays fp32 in a register: each += rounds exactly as the reference's does
#pragma unroll 4
  for (int i = 0; i < n; i++) acc += dout[(size_t)p[i] * C + c];
  *w = acc;
}

__global__ void iota_kernel(int32_t* out, int N) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < N) out[i] = i;
}

size_t align_up(size_t bytes) {
  constexpr size_t kAlign = 256;  // cudaMalloc's alignment, and what CUB expects of its temporary storage
  return (bytes + kAlign - 1) / kAlign * kAlign;
}

}  // namespace

void embedding_forward(float* out, const int32_t* inp, const float* wte, const float* wpe, int B, int T, int C) {
  embedding_forward_kernel<<<blocks_for((size_t)B * T * C), kThreads>>>(out, inp, wte, wpe, B * T, T, C);
  CAIRN_CUDA_CHECK_LAUNCH("embedding_forward");
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* inp, int B, int T, int C) {
  if (dwpe) {
    embedding_backward_wpe<<<blocks_for((size_t)T * C), kThreads>>>(dwpe, dout, B, T, C);
    CAIRN_CUDA_CHECK_LAUNCH("embedding_backward_wpe");
  }
  const int N = B * T;
  if (N <= 0 || C <= 0) return;
  // Every op of this backend runs on the legacy default stream (cuda_common.cuh): stream 0, like the <<<>>> launches
  // without a stream, so CUB's kernels queue behind the ones that produced dout and before the next op.
  const cudaStream_t stream = 0;
  // The op has no vocabulary size, so the sort covers all 32 bits (int32 ids; CUB orders signed keys, -1 first).
  constexpr int kBeginBit = 0, kEndBit = 32;
  // CUB's temporary storage: one buffer, the largest of the three calls' (they run one after another on the stream).
  size_t sort_bytes = 0, encode_bytes = 0, scan_bytes = 0;
  CAIRN_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, (const int32_t*)nullptr, (int32_t*)nullptr,
                                                   (const int32_t*)nullptr, (int32_t*)nullptr, N, kBeginBit, kEndBit,
                                                   stream));
  CAIRN_CUDA_CHECK(cub::DeviceRunLengthEncode::Encode(nullptr, encode_bytes, (const int32_t*)nullptr, (int32_t*)nullptr,
                                                      (int32_t*)nullptr, (int32_t*)nullptr, N, stream));
  CAIRN_CUDA_CHECK(
      cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes, (const int32_t*)nullptr, (int32_t*)nullptr, N, stream));
  const size_t temp_bytes = std::max({sort_bytes, encode_bytes, scan_bytes, (size_t)1});

  // All temporaries from one scratch() call, each piece 256-byte aligned: positions in (0..N-1), sorted ids, sorted
  // positions, distinct ids, their counts and offsets (N each at most), the run count, CUB's storage.
  const size_t arr = align_up((size_t)N * sizeof(int32_t));
  const size_t total = 6 * arr + align_up(sizeof(int32_t)) + align_up(temp_bytes);
  char* base = reinterpret_cast<char*>(scratch((total + sizeof(float) - 1) / sizeof(float)));
  int32_t* pos_in = reinterpret_cast<int32_t*>(base);
  int32_t* ids_sorted = reinterpret_cast<int32_t*>(base + arr);
  int32_t* pos_sorted = reinterpret_cast<int32_t*>(base + 2 * arr);
  int32_t* ids_unique = reinterpret_cast<int32_t*>(base + 3 * arr);
  int32_t* counts = reinterpret_cast<int32_t*>(base + 4 * arr);
  int32_t* offsets = reinterpret_cast<int32_t*>(base + 5 * arr);
  int32_t* num_runs = reinterpret_cast<int32_t*>(base + 6 * arr);
  void* temp = base + 6 * arr + align_up(sizeof(int32_t));

  iota_kernel<<<blocks_for(N), kThreads, 0, stream>>>(pos_in, N);
  CAIRN_CUDA_CHECK_LAUNCH("embedding_backward (positions)");
  // LSD radix sort is stable: each id's positions stay ascending.
  size_t bytes = temp_bytes;
  CAIRN_CUDA_CHECK(
      cub::DeviceRadixSort::SortPairs(temp, bytes, inp, ids_sorted, pos_in, pos_sorted, N, kBeginBit, kEndBit, stream));
  // Encode writes only the first *num_runs counts, and the scan below runs over all N (the run count is on the
  // device): zeros past the runs keep it off stale scratch.
  CAIRN_CUDA_CHECK(cudaMemsetAsync(counts, 0, (size_t)N * sizeof(int32_t), stream));
  bytes = temp_bytes;
  CAIRN_CUDA_CHECK(
      cub::DeviceRunLengthEncode::Encode(temp, bytes, ids_sorted, ids_unique, counts, num_runs, N, stream));
  bytes = temp_bytes;
  CAIRN_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(temp, bytes, counts, offsets, N, stream));
  const dim3 grid((unsigned)N, blocks_for(C));
  embedding_backward_wte_grouped<<<grid, kThreads, 0, stream>>>(dwte, dout, ids_unique, counts, offsets, pos_sorted,
                                                                num_runs, C);
  CAIRN_CUDA_CHECK_LAUNCH("embedding_backward_wte");
}

}  // namespace cairn::kernels::cuda
