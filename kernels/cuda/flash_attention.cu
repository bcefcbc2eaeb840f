// CUDA launchers of the tiled flash-attention kernels (fp32, FlashAttention-2 scheme): the block code lives in
// flash_attention_tiles.h, shared with the host emulation that the CPU tests run, and this file adds the device
// executor (one thread per tid, __syncthreads at barriers, shuffle butterflies), the grids and the launches.
// Deterministic: no atomics, a fixed reduction order. Head dims up to 128 (zero-padded to 32, 64 or 128).
#include <cuda_runtime.h>

#include <atomic>
#include <stdexcept>
#include <string>

#include "flash_attention.h"
#include "flash_attention_tiles.h"

namespace cairn::kernels {
namespace {

namespace fa = flash;

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(std::string("CUDA: ") + what + ": " + cudaGetErrorString(err));
}

// Device executor of the block code: this thread's registers, barrier = __syncthreads, the 16-lane row reductions as
// xor butterflies (every lane of the warp takes part: the block code calls these uniformly, never under a branch).
template <class Regs>
struct DeviceBlock {
  Regs regs;
  __device__ __forceinline__ void barrier() { __syncthreads(); }
  template <class F>
  __device__ __forceinline__ void each(F&& f) {
    f((int)threadIdx.x, regs);
  }
  template <int N, bool kMax, class Sel>
  __device__ __forceinline__ void reduce16(Sel sel) {
    float* a = sel(regs);
#pragma unroll
    for (int i = 0; i < N; i++) {
      float v = a[i];
#pragma unroll
      for (int o = 8; o >= 1; o >>= 1) {
        const float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = kMax ? fmaxf(v, w) : v + w;
      }
      a[i] = v;
    }
  }
};

// Shared memory per block, all under the 99 KB opt-in limit of every sm_80+ part (sm_86/89 have the least).
constexpr size_t kMaxSmemBytes = 99 * 1024;
template <int HD>
constexpr size_t fwd_bytes() {
  return sizeof(float) * fa::FwdLayout<HD, fa::Config<HD>::fwd_R, fa::Config<HD>::fwd_CC>::floats;
}
template <int HD>
constexpr size_t kv_bytes() {
  return sizeof(float) * fa::KvLayout<HD, fa::Config<HD>::kv_R, fa::Config<HD>::kv_CQ>::floats;
}
template <int HD>
constexpr size_t q_bytes() {
  return sizeof(float) * fa::QLayout<HD, fa::Config<HD>::q_R, fa::Config<HD>::q_CC>::floats;
}
static_assert(fwd_bytes<128>() <= kMaxSmemBytes && kv_bytes<128>() <= kMaxSmemBytes && q_bytes<128>() <= kMaxSmemBytes,
              "flash attention tiles exceed shared memory");
static_assert(fwd_bytes<64>() <= kMaxSmemBytes && kv_bytes<64>() <= kMaxSmemBytes && q_bytes<64>() <= kMaxSmemBytes,
              "flash attention tiles exceed shared memory");

// Grid: x = b * NH + h (up to 2^31 - 1), y = tile. Forward and dQ take y reversed so the longest (last, most key
// tiles under the causal mask) query tiles start first; the dK/dV pass's longest tiles are the first ones.
template <int HD, int R, int CC>
__global__ void __launch_bounds__(fa::kThreads) flash_forward_kernel(float* out, float* lse, const float* qkv,
                                                                     fa::Problem pb, int n_tiles) {
  extern __shared__ float4 flash_smem[];  // float4: the tiles' 16-byte alignment (float4 loads)
  float* smem = reinterpret_cast<float*>(flash_smem);
  DeviceBlock<fa::FwdRegs<R, CC, HD / 16>> blk;
  const int bh = blockIdx.x;
  fa::forward_block<HD, R, CC>(blk, smem, out, lse, qkv, pb, bh / pb.NH, bh % pb.NH, n_tiles - 1 - (int)blockIdx.y);
}

template <int HD, int R, int CC>
__global__ void __launch_bounds__(fa::kThreads) flash_backward_q_kernel(float* dqkv, const float* dout,
                                                                        const float* qkv, const float* lse,
                                                                        const float* delta, fa::Problem pb,
                                                                        int n_tiles) {
  extern __shared__ float4 flash_smem[];  // float4: the tiles' 16-byte alignment (float4 loads)
  float* smem = reinterpret_cast<float*>(flash_smem);
  DeviceBlock<fa::QRegs<R, CC, HD / 16>> blk;
  const int bh = blockIdx.x;
  fa::backward_q_block<HD, R, CC>(blk, smem, dqkv, dout, qkv, lse, delta, pb, bh / pb.NH, bh % pb.NH,
                                  n_tiles - 1 - (int)blockIdx.y);
}

template <int HD, int R, int CQ>
__global__ void __launch_bounds__(fa::kThreads) flash_backward_kv_kernel(float* dqkv, const float* dout,
                                                                         const float* qkv, const float* lse,
                                                                         const float* delta, fa::Problem pb) {
  extern __shared__ float4 flash_smem[];  // float4: the tiles' 16-byte alignment (float4 loads)
  float* smem = reinterpret_cast<float*>(flash_smem);
  DeviceBlock<fa::KvRegs<R, CQ, HD / 16>> blk;
  const int bh = blockIdx.x;
  fa::backward_kv_block<HD, R, CQ>(blk, smem, dqkv, dout, qkv, lse, delta, pb, bh / pb.NH, bh % pb.NH,
                                   (int)blockIdx.y);
}

// D[b,h,t] = dO . O over the head's columns: one warp per row (the whole warp returns together).
__global__ void flash_delta_kernel(float* delta, const float* dout, const float* out, fa::Problem pb) {
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

dim3 grid_for(const fa::Problem& pb, int tiles) {
  if ((long long)pb.B * pb.NH > 0x7fffffffLL || tiles > 65535)
    throw std::runtime_error("CUDA flash attention: grid too large (B*NH=" + std::to_string((long long)pb.B * pb.NH) +
                             ", tiles per head " + std::to_string(tiles) + ")");
  return dim3((unsigned)(pb.B * pb.NH), (unsigned)tiles);
}

// Dynamic shared memory above 48 KB needs the opt-in attribute, once per kernel and device: `done` (a static of the
// caller, one per kernel instantiation) holds a bit per device already set (devices >= 32: set every launch). Not
// repeated per launch, so launches stay plain kernel launches (e.g. inside CUDA graph capture).
template <class Kernel>
void allow_smem(Kernel kernel, size_t bytes, std::atomic<unsigned>& done) {
  int dev = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  const unsigned bit = dev >= 0 && dev < 32 ? 1u << dev : 0u;
  if (bit && (done.load() & bit)) return;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes),
        "cudaFuncSetAttribute(flash attention shared memory)");
  done |= bit;
}

template <int HD>
void forward_hd(float* out, float* lse, const float* qkv, const fa::Problem& pb) {
  constexpr int R = fa::Config<HD>::fwd_R, CC = fa::Config<HD>::fwd_CC;
  using L = fa::FwdLayout<HD, R, CC>;
  const int tiles = (pb.T + L::BQ - 1) / L::BQ;
  const dim3 grid = grid_for(pb, tiles);
  static std::atomic<unsigned> smem_set{0};
  allow_smem(flash_forward_kernel<HD, R, CC>, fwd_bytes<HD>(), smem_set);
  flash_forward_kernel<HD, R, CC><<<grid, fa::kThreads, fwd_bytes<HD>()>>>(out, lse, qkv, pb, tiles);
  check(cudaGetLastError(), "flash_attention_forward");
}

template <int HD>
void backward_hd(float* dqkv, const float* dout, const float* qkv, const float* lse, const float* delta,
                 const fa::Problem& pb) {
  {
    constexpr int R = fa::Config<HD>::q_R, CC = fa::Config<HD>::q_CC;
    using L = fa::QLayout<HD, R, CC>;
    const int tiles = (pb.T + L::BQ - 1) / L::BQ;
    const dim3 grid = grid_for(pb, tiles);
    static std::atomic<unsigned> smem_set{0};
    allow_smem(flash_backward_q_kernel<HD, R, CC>, q_bytes<HD>(), smem_set);
    flash_backward_q_kernel<HD, R, CC><<<grid, fa::kThreads, q_bytes<HD>()>>>(dqkv, dout, qkv, lse, delta, pb, tiles);
    check(cudaGetLastError(), "flash_attention_backward (dq)");
  }
  {
    constexpr int R = fa::Config<HD>::kv_R, CQ = fa::Config<HD>::kv_CQ;
    using L = fa::KvLayout<HD, R, CQ>;
    const dim3 grid = grid_for(pb, (pb.T + L::BK - 1) / L::BK);
    static std::atomic<unsigned> smem_set{0};
    allow_smem(flash_backward_kv_kernel<HD, R, CQ>, kv_bytes<HD>(), smem_set);
    flash_backward_kv_kernel<HD, R, CQ><<<grid, fa::kThreads, kv_bytes<HD>()>>>(dqkv, dout, qkv, lse, delta, pb);
    check(cudaGetLastError(), "flash_attention_backward (dk, dv)");
  }
}

fa::Problem problem(int B, int T, int C, int NH) {
  const int hd = C / NH;
  return fa::Problem{B, T, C, NH, hd, 1.0f / sqrtf((float)hd)};
}

}  // namespace

bool flash_attention_supported(int C, int NH) { return NH > 0 && C % NH == 0 && fa::padded_head_dim(C / NH) != 0; }

void flash_attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH) {
  if (!flash_attention_supported(C, NH))
    throw std::runtime_error("CUDA flash attention: head dim " + std::to_string(NH > 0 ? C / NH : 0) +
                             " not supported (<= 128)");
  if ((long long)B * T * NH == 0) return;
  const fa::Problem pb = problem(B, T, C, NH);
  switch (fa::padded_head_dim(pb.hd)) {
    case 32: forward_hd<32>(out, lse, qkv, pb); break;
    case 64: forward_hd<64>(out, lse, qkv, pb); break;
    default: forward_hd<128>(out, lse, qkv, pb); break;
  }
}

void flash_attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                              float* delta, int B, int T, int C, int NH) {
  if (!flash_attention_supported(C, NH))
    throw std::runtime_error("CUDA flash attention: head dim " + std::to_string(NH > 0 ? C / NH : 0) +
                             " not supported (<= 128)");
  if ((long long)B * T * NH == 0) return;
  const fa::Problem pb = problem(B, T, C, NH);
  const long long rows = (long long)B * NH * T;
  flash_delta_kernel<<<(unsigned)((rows + 7) / 8), 256>>>(delta, dout, out, pb);
  check(cudaGetLastError(), "flash_attention_backward (delta)");
  switch (fa::padded_head_dim(pb.hd)) {
    case 32: backward_hd<32>(dqkv, dout, qkv, lse, delta, pb); break;
    case 64: backward_hd<64>(dqkv, dout, qkv, lse, delta, pb); break;
    default: backward_hd<128>(dqkv, dout, qkv, lse, delta, pb); break;
  }
}

}  // namespace cairn::kernels
