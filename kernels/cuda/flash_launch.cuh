// What the launchers of both flash-attention kernel families share (flash_attention.cu: fp32; flash_attention_bf16.cu:
// bf16 tensor cores): the device executor of the block code, the D = rowsum(dO o O) kernel, grids, the once-per-device
// launch preparation. Included by those two .cu files only.
#pragma once
#include <cuda_runtime.h>

#include <atomic>
#include <stdexcept>
#include <string>

#include "cairn/kernels/gpu_check.h"

namespace cairn::kernels::flash_launch {

// Shared memory per block: the opt-in limit of every sm_80+ part (sm_86/89 have the least).
constexpr size_t kMaxSmemBytes = 99 * 1024;

// Device executor of the block code: this thread's registers, barrier = __syncthreads, row reductions over groups of
// `Lanes` consecutive lanes as xor butterflies (offsets Lanes/2 down to 1: the host executors' flash::host_reduce
// pairs and orders them the same way), and, for the bf16 block code, one mma.sync.m16n8k16 bf16 per warp. The block
// code calls reduce() and mma() uniformly, never under a branch, so every lane of a warp takes part.
template <class Regs>
struct DeviceBlock {
  Regs regs;
  __device__ __forceinline__ void barrier() { __syncthreads(); }
  template <class F>
  __device__ __forceinline__ void each(F&& f) {
    f((int)threadIdx.x, regs);
  }
  template <int Lanes, int N, bool kMax, class Sel>
  __device__ __forceinline__ void reduce(Sel sel) {
    float* a = sel(regs);
#pragma unroll
    for (int i = 0; i < N; i++) {
      float v = a[i];
#pragma unroll
      for (int o = Lanes / 2; o >= 1; o >>= 1) {
        const float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = kMax ? fmaxf(v, w) : v + w;
      }
      a[i] = v;
    }
  }
  // ops(tid, regs) returns this lane's operands {d: 4 fp32 accumulators, a: 4 x 2 bf16, b: 2 x 2 bf16}; D = A B + D.
  template <class Ops>
  __device__ __forceinline__ void mma(Ops ops) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const auto m = ops((int)threadIdx.x, regs);
    float* d = m.d;
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(m.a[0]), "r"(m.a[1]), "r"(m.a[2]), "r"(m.a[3]), "r"(m.b[0]), "r"(m.b[1]));
#else
    (void)ops;
    __trap();  // bf16 mma needs sm_80+; prepare() refuses older devices
#endif
  }
};

// D[b,h,t] = dO . O over the head's columns in fp32: one warp per row (the whole warp returns together).
template <class Problem>
__global__ void delta_kernel(float* delta, const float* dout, const float* out, Problem pb) {
  const long long row = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= (long long)pb.B * pb.NH * pb.T) return;
  const int t = (int)(row % pb.T), h = (int)((row / pb.T) % pb.NH), b = (int)(row / ((long long)pb.T * pb.NH));
  const size_t off = ((size_t)b * pb.T + t) * pb.C + (size_t)h * pb.hd;
  float s = 0.0f;
  for (int d = lane; d < pb.hd; d += 32) s += dout[off + d] * out[off + d];
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (lane == 0) delta[row] = s;
}

template <class Problem>
void launch_delta(float* delta, const float* dout, const float* out, const Problem& pb, const char* what) {
  const long long rows = (long long)pb.B * pb.NH * pb.T;
  delta_kernel<<<(unsigned)((rows + 7) / 8), 256>>>(delta, dout, out, pb);
  CAIRN_CUDA_CHECK_LAUNCH(what);
}

// Grid: x = b * NH + h (up to 2^31 - 1), y = tile.
template <class Problem>
dim3 grid_for(const Problem& pb, int tiles, const char* what) {
  if ((long long)pb.B * pb.NH > 0x7fffffffLL || tiles > 65535)
    throw std::runtime_error(std::string(what) + ": grid too large (B*NH=" + std::to_string((long long)pb.B * pb.NH) +
                             ", tiles per head " + std::to_string(tiles) + ")");
  return dim3((unsigned)(pb.B * pb.NH), (unsigned)tiles);
}

// Once per kernel instantiation and device (`done`, a static of the caller, holds a bit per device; devices >= 32:
// every launch): the compute capability check (min_major) and the dynamic shared memory opt-in above 48 KB. Not per
// launch, so launches stay plain kernel launches (e.g. inside CUDA graph capture).
template <class Kernel>
void prepare(Kernel kernel, size_t smem_bytes, std::atomic<unsigned>& done, int min_major, const char* what) {
  int dev = 0;
  CAIRN_CUDA_CHECK(cudaGetDevice(&dev));
  const unsigned bit = dev >= 0 && dev < 32 ? 1u << dev : 0u;
  if (bit && (done.load() & bit)) return;
  if (min_major > 0) {
    int major = 0;
    CAIRN_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    if (major < min_major)
      throw std::runtime_error(std::string(what) + " needs compute capability " + std::to_string(min_major) +
                               ".0+; device " + std::to_string(dev) + " is " + std::to_string(major) + ".x");
  }
  CAIRN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_bytes));
  done |= bit;
}

}  // namespace cairn::kernels::flash_launch
