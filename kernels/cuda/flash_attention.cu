// CUDA launchers of the tiled flash-attention kernels (fp32, FlashAttention-2 scheme): the block code lives in
// flash_attention_tiles.h, shared with the host emulation that the CPU tests run, and the device executor in
// flash_launch.cuh; this file has the kernels' entry points, shared-memory sizes and launches. Deterministic: no
// atomics, a fixed reduction order. Head dims up to 128 (zero-padded to 32, 64 or 128).
#include <cuda_runtime.h>

#include <atomic>
#include <stdexcept>
#include <string>

#include "flash_attention.h"
#include "flash_attention_tiles.h"
#include "flash_launch.cuh"

namespace cairn::kernels {
namespace {

namespace fa = flash;
constexpr const char* kWhat = "CUDA flash attention";

using flash_launch::DeviceBlock;
using flash_launch::grid_for;
using flash_launch::kMaxSmemBytes;

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
__global__ void __launch_bounds__(fa::kThreads)
    flash_forward_kernel(float* out, float* lse, const float* q_qkv, const float* kv_qkv, fa::Problem pb, fa::Span sp,
                         int n_tiles) {
  extern __shared__ float4 flash_smem[];  // float4: the tiles' 16-byte alignment (float4 loads)
  float* smem = reinterpret_cast<float*>(flash_smem);
  DeviceBlock<fa::FwdRegs<R, CC, HD / 16>> blk;
  const int bh = blockIdx.x;
  fa::forward_block<HD, R, CC>(blk, smem, out, lse, q_qkv, kv_qkv, pb, sp, bh / pb.NH, bh % pb.NH,
                               n_tiles - 1 - (int)blockIdx.y);
}

template <int HD, int R, int CC>
__global__ void __launch_bounds__(fa::kThreads)
    flash_backward_q_kernel(float* dq_qkv, const float* dout, const float* q_qkv, const float* kv_qkv, const float* lse,
                            const float* delta, fa::Problem pb, fa::Span sp, int n_tiles) {
  extern __shared__ float4 flash_smem[];  // float4: the tiles' 16-byte alignment (float4 loads)
  float* smem = reinterpret_cast<float*>(flash_smem);
  DeviceBlock<fa::QRegs<R, CC, HD / 16>> blk;
  const int bh = blockIdx.x;
  fa::backward_q_block<HD, R, CC>(blk, smem, dq_qkv, dout, q_qkv, kv_qkv, lse, delta, pb, sp, bh / pb.NH, bh % pb.NH,
                                  n_tiles - 1 - (int)blockIdx.y);
}

template <int HD, int R, int CQ>
__global__ void __launch_bounds__(fa::kThreads)
    flash_backward_kv_kernel(float* dkv_qkv, const float* dout, const float* q_qkv, const float* kv_qkv,
                             const float* lse, const float* delta, fa::Problem pb, fa::Span sp) {
  extern __shared__ float4 flash_smem[];  // float4: the tiles' 16-byte alignment (float4 loads)
  float* smem = reinterpret_cast<float*>(flash_smem);
  DeviceBlock<fa::KvRegs<R, CQ, HD / 16>> blk;
  const int bh = blockIdx.x;
  fa::backward_kv_block<HD, R, CQ>(blk, smem, dkv_qkv, dout, q_qkv, kv_qkv, lse, delta, pb, sp, bh / pb.NH, bh % pb.NH,
                                   (int)blockIdx.y);
}

template <int HD>
void forward_hd(float* out, float* lse, const float* q_qkv, const float* kv_qkv, const fa::Problem& pb,
                const fa::Span& sp) {
  constexpr int R = fa::Config<HD>::fwd_R, CC = fa::Config<HD>::fwd_CC;
  using L = fa::FwdLayout<HD, R, CC>;
  const int tiles = (sp.Tq + L::BQ - 1) / L::BQ;
  const dim3 grid = grid_for(pb, tiles, kWhat);
  static std::atomic<unsigned> smem_set{0};
  flash_launch::prepare(flash_forward_kernel<HD, R, CC>, fwd_bytes<HD>(), smem_set, 0, kWhat);
  flash_forward_kernel<HD, R, CC><<<grid, fa::kThreads, fwd_bytes<HD>()>>>(out, lse, q_qkv, kv_qkv, pb, sp, tiles);
  CAIRN_CUDA_CHECK_LAUNCH("flash_attention_forward");
}

// The dK/dV grid covers the keys some query sees (keys_seen): a block op leaves the rows past them untouched.
template <int HD>
void backward_hd(float* dq_qkv, float* dkv_qkv, const float* dout, const float* q_qkv, const float* kv_qkv,
                 const float* lse, const float* delta, const fa::Problem& pb, const fa::Span& sp) {
  {
    constexpr int R = fa::Config<HD>::q_R, CC = fa::Config<HD>::q_CC;
    using L = fa::QLayout<HD, R, CC>;
    const int tiles = (sp.Tq + L::BQ - 1) / L::BQ;
    const dim3 grid = grid_for(pb, tiles, kWhat);
    static std::atomic<unsigned> smem_set{0};
    flash_launch::prepare(flash_backward_q_kernel<HD, R, CC>, q_bytes<HD>(), smem_set, 0, kWhat);
    flash_backward_q_kernel<HD, R, CC>
        <<<grid, fa::kThreads, q_bytes<HD>()>>>(dq_qkv, dout, q_qkv, kv_qkv, lse, delta, pb, sp, tiles);
    CAIRN_CUDA_CHECK_LAUNCH("flash_attention_backward (dq)");
  }
  {
    constexpr int R = fa::Config<HD>::kv_R, CQ = fa::Config<HD>::kv_CQ;
    using L = fa::KvLayout<HD, R, CQ>;
    const dim3 grid = grid_for(pb, (sp.keys_seen() + L::BK - 1) / L::BK, kWhat);
    static std::atomic<unsigned> smem_set{0};
    flash_launch::prepare(flash_backward_kv_kernel<HD, R, CQ>, kv_bytes<HD>(), smem_set, 0, kWhat);
    flash_backward_kv_kernel<HD, R, CQ>
        <<<grid, fa::kThreads, kv_bytes<HD>()>>>(dkv_qkv, dout, q_qkv, kv_qkv, lse, delta, pb, sp);
    CAIRN_CUDA_CHECK_LAUNCH("flash_attention_backward (dk, dv)");
  }
}

}  // namespace

bool flash_attention_supported(int C, int NH) { return NH > 0 && C % NH == 0 && fa::padded_head_dim(C / NH) != 0; }

namespace {
void require_supported(int C, int NH) {
  if (!flash_attention_supported(C, NH))
    throw std::runtime_error("CUDA flash attention: head dim " + std::to_string(NH > 0 ? C / NH : 0) +
                             " not supported (<= 128)");
}

}  // namespace

void flash_attention_forward_block(float* out, float* lse, const float* q_qkv, const float* kv_qkv, int B, int Tq,
                                   int Tk, int q_pos, int C, int NH) {
  require_supported(C, NH);
  if ((long long)B * Tq * NH == 0) return;
  const fa::Problem pb = fa::problem_for<fa::Problem>(B, Tq, C, NH);
  const fa::Span sp{Tq, Tk, q_pos, false};
  switch (fa::padded_head_dim(pb.hd)) {
    case 32: forward_hd<32>(out, lse, q_qkv, kv_qkv, pb, sp); break;
    case 64: forward_hd<64>(out, lse, q_qkv, kv_qkv, pb, sp); break;
    default: forward_hd<128>(out, lse, q_qkv, kv_qkv, pb, sp); break;
  }
}

void flash_attention_backward_block(float* dq_qkv, float* dkv_qkv, const float* dout, const float* q_qkv,
                                    const float* kv_qkv, const float* out, const float* lse, float* delta, int B,
                                    int Tq, int Tk, int q_pos, int C, int NH, bool accumulate_kv) {
  require_supported(C, NH);
  if ((long long)B * Tq * NH == 0) return;
  const fa::Problem pb = fa::problem_for<fa::Problem>(B, Tq, C, NH);  // D over the Tq query rows
  const fa::Span sp{Tq, Tk, q_pos, accumulate_kv};
  flash_launch::launch_delta(delta, dout, out, pb, "flash_attention_backward (delta)");
  switch (fa::padded_head_dim(pb.hd)) {
    case 32: backward_hd<32>(dq_qkv, dkv_qkv, dout, q_qkv, kv_qkv, lse, delta, pb, sp); break;
    case 64: backward_hd<64>(dq_qkv, dkv_qkv, dout, q_qkv, kv_qkv, lse, delta, pb, sp); break;
    default: backward_hd<128>(dq_qkv, dkv_qkv, dout, q_qkv, kv_qkv, lse, delta, pb, sp); break;
  }
}

void flash_attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH) {
  flash_attention_forward_block(out, lse, qkv, qkv, B, T, T, 0, C, NH);
}

void flash_attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                              float* delta, int B, int T, int C, int NH) {
  flash_attention_backward_block(dqkv, dqkv, dout, qkv, qkv, out, lse, delta, B, T, T, 0, C, NH, false);
}

}  // namespace cairn::kernels
