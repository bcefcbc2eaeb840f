// CUDA launchers of the bf16 tensor-core flash-attention kernels (precision = "bf16"): the block code lives in
// flash_attention_bf16_tiles.h, shared with the host emulation the CPU tests run, and the device executor
// (mma.sync.m16n8k16 bf16 through inline PTX: sm_80 and later) in flash_launch.cuh; this file has the kernels' entry
// points, shared-memory sizes and launches. Deterministic: no atomics, a fixed reduction order.
#include <cuda_runtime.h>

#include <atomic>
#include <stdexcept>
#include <string>

#include "flash_attention_bf16.h"
#include "flash_attention_bf16_tiles.h"
#include "flash_launch.cuh"

namespace cairn::kernels {
namespace {

namespace fb = flash_bf16;

constexpr const char* kWhat = "CUDA bf16 flash attention";

using flash_launch::DeviceBlock;
using flash_launch::grid_for;
using flash_launch::kMaxSmemBytes;

template <int HD>
using FwdL = fb::FwdLayout<HD, fb::Config<HD>::fwd_BK, fb::Config<HD>::fwd_W>;
template <int HD>
using KvL = fb::KvLayout<HD, fb::Config<HD>::kv_BQ, fb::Config<HD>::kv_W>;
template <int HD>
using QL = fb::QLayout<HD, fb::Config<HD>::q_BK, fb::Config<HD>::q_W>;
template <int HD>
constexpr size_t fwd_bytes() {
  return 2 * (size_t)FwdL<HD>::halves;
}
template <int HD>
constexpr size_t kv_bytes() {
  return 2 * (size_t)KvL<HD>::halves;
}
template <int HD>
constexpr size_t q_bytes() {
  return 2 * (size_t)QL<HD>::halves;
}
static_assert(fwd_bytes<128>() <= kMaxSmemBytes && kv_bytes<128>() <= kMaxSmemBytes && q_bytes<128>() <= kMaxSmemBytes,
              "bf16 flash attention tiles exceed shared memory");
static_assert(fwd_bytes<64>() <= kMaxSmemBytes && kv_bytes<64>() <= kMaxSmemBytes && q_bytes<64>() <= kMaxSmemBytes,
              "bf16 flash attention tiles exceed shared memory");

// Grid: x = b * NH + h, y = tile. Forward and dQ take y reversed so the longest query tiles (most key tiles under the
// causal mask) start first; the dK/dV pass's longest tiles are the first ones.
template <int HD, int BK, int NW>
__global__ void __launch_bounds__(32 * NW)
    flash_bf16_forward_kernel(float* out, float* lse, const float* q_qkv, const float* kv_qkv, fb::Problem pb,
                              flash::Span sp, int n_tiles) {
  extern __shared__ float4 flash_bf16_smem[];  // float4: 16-byte alignment of the tiles
  uint16_t* smem = reinterpret_cast<uint16_t*>(flash_bf16_smem);
  DeviceBlock<fb::FwdRegs<HD, BK>> blk;
  const int bh = blockIdx.x;
  fb::forward_block<HD, BK, NW>(blk, smem, out, lse, q_qkv, kv_qkv, pb, sp, bh / pb.NH, bh % pb.NH,
                                n_tiles - 1 - (int)blockIdx.y);
}

template <int HD, int BK, int NW>
__global__ void __launch_bounds__(32 * NW)
    flash_bf16_backward_q_kernel(float* dq_qkv, const float* dout, const float* q_qkv, const float* kv_qkv,
                                 const float* lse, const float* delta, fb::Problem pb, flash::Span sp, int n_tiles) {
  extern __shared__ float4 flash_bf16_smem[];
  uint16_t* smem = reinterpret_cast<uint16_t*>(flash_bf16_smem);
  DeviceBlock<fb::QRegs<HD, BK>> blk;
  const int bh = blockIdx.x;
  fb::backward_q_block<HD, BK, NW>(blk, smem, dq_qkv, dout, q_qkv, kv_qkv, lse, delta, pb, sp, bh / pb.NH, bh % pb.NH,
                                   n_tiles - 1 - (int)blockIdx.y);
}

template <int HD, int BQ, int NW>
__global__ void __launch_bounds__(32 * NW)
    flash_bf16_backward_kv_kernel(float* dkv_qkv, const float* dout, const float* q_qkv, const float* kv_qkv,
                                  const float* lse, const float* delta, fb::Problem pb, flash::Span sp) {
  extern __shared__ float4 flash_bf16_smem[];
  uint16_t* smem = reinterpret_cast<uint16_t*>(flash_bf16_smem);
  DeviceBlock<fb::KvRegs<HD, BQ>> blk;
  const int bh = blockIdx.x;
  fb::backward_kv_block<HD, BQ, NW>(blk, smem, dkv_qkv, dout, q_qkv, kv_qkv, lse, delta, pb, sp, bh / pb.NH, bh % pb.NH,
                                    (int)blockIdx.y);
}

template <int HD>
void forward_hd(float* out, float* lse, const float* q_qkv, const float* kv_qkv, const fb::Problem& pb,
                const flash::Span& sp) {
  constexpr int BK = fb::Config<HD>::fwd_BK, NW = fb::Config<HD>::fwd_W, rows = FwdL<HD>::ROWS;
  const int tiles = (sp.Tq + rows - 1) / rows;
  const dim3 grid = grid_for(pb, tiles, kWhat);
  static std::atomic<unsigned> ready{0};
  flash_launch::prepare(flash_bf16_forward_kernel<HD, BK, NW>, fwd_bytes<HD>(), ready, 8, kWhat);
  flash_bf16_forward_kernel<HD, BK, NW><<<grid, 32 * NW, fwd_bytes<HD>()>>>(out, lse, q_qkv, kv_qkv, pb, sp, tiles);
  CAIRN_CUDA_CHECK_LAUNCH("flash_attention_bf16_forward");
}

// The dK/dV grid covers the keys some query sees (keys_seen): a block op leaves the rows past them untouched.
template <int HD>
void backward_hd(float* dq_qkv, float* dkv_qkv, const float* dout, const float* q_qkv, const float* kv_qkv,
                 const float* lse, const float* delta, const fb::Problem& pb, const flash::Span& sp) {
  {
    constexpr int BK = fb::Config<HD>::q_BK, NW = fb::Config<HD>::q_W, rows = QL<HD>::ROWS;
    const int tiles = (sp.Tq + rows - 1) / rows;
    const dim3 grid = grid_for(pb, tiles, kWhat);
    static std::atomic<unsigned> ready{0};
    flash_launch::prepare(flash_bf16_backward_q_kernel<HD, BK, NW>, q_bytes<HD>(), ready, 8, kWhat);
    flash_bf16_backward_q_kernel<HD, BK, NW>
        <<<grid, 32 * NW, q_bytes<HD>()>>>(dq_qkv, dout, q_qkv, kv_qkv, lse, delta, pb, sp, tiles);
    CAIRN_CUDA_CHECK_LAUNCH("flash_attention_bf16_backward (dq)");
  }
  {
    constexpr int BQ = fb::Config<HD>::kv_BQ, NW = fb::Config<HD>::kv_W, rows = KvL<HD>::ROWS;
    const dim3 grid = grid_for(pb, (sp.keys_seen() + rows - 1) / rows, kWhat);
    static std::atomic<unsigned> ready{0};
    flash_launch::prepare(flash_bf16_backward_kv_kernel<HD, BQ, NW>, kv_bytes<HD>(), ready, 8, kWhat);
    flash_bf16_backward_kv_kernel<HD, BQ, NW>
        <<<grid, 32 * NW, kv_bytes<HD>()>>>(dkv_qkv, dout, q_qkv, kv_qkv, lse, delta, pb, sp);
    CAIRN_CUDA_CHECK_LAUNCH("flash_attention_bf16_backward (dk, dv)");
  }
}

void require_supported(int C, int NH) {
  if (!flash_attention_bf16_supported(C, NH))
    throw std::runtime_error("CUDA bf16 flash attention: head dim " + std::to_string(NH > 0 ? C / NH : 0) +
                             " not supported (64 or 128)");
}

}  // namespace

bool flash_attention_bf16_supported(int C, int NH) { return NH > 0 && C % NH == 0 && fb::head_dim_supported(C / NH); }

void flash_attention_bf16_forward_block(float* out, float* lse, const float* q_qkv, const float* kv_qkv, int B, int Tq,
                                        int Tk, int q_pos, int C, int NH) {
  require_supported(C, NH);
  if ((long long)B * Tq * NH == 0) return;
  const fb::Problem pb = flash::problem_for<fb::Problem>(B, Tq, C, NH);
  const flash::Span sp{Tq, Tk, q_pos, false};
  if (pb.hd == 64) forward_hd<64>(out, lse, q_qkv, kv_qkv, pb, sp);
  else forward_hd<128>(out, lse, q_qkv, kv_qkv, pb, sp);
}

void flash_attention_bf16_backward_block(float* dq_qkv, float* dkv_qkv, const float* dout, const float* q_qkv,
                                         const float* kv_qkv, const float* out, const float* lse, float* delta, int B,
                                         int Tq, int Tk, int q_pos, int C, int NH, bool accumulate_kv) {
  require_supported(C, NH);
  if ((long long)B * Tq * NH == 0) return;
  const fb::Problem pb = flash::problem_for<fb::Problem>(B, Tq, C, NH);  // D over the Tq query rows
  const flash::Span sp{Tq, Tk, q_pos, accumulate_kv};
  flash_launch::launch_delta(delta, dout, out, pb, "flash_attention_bf16_backward (delta)");
  if (pb.hd == 64) backward_hd<64>(dq_qkv, dkv_qkv, dout, q_qkv, kv_qkv, lse, delta, pb, sp);
  else backward_hd<128>(dq_qkv, dkv_qkv, dout, q_qkv, kv_qkv, lse, delta, pb, sp);
}

void flash_attention_bf16_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH) {
  flash_attention_bf16_forward_block(out, lse, qkv, qkv, B, T, T, 0, C, NH);
}

void flash_attention_bf16_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                                   float* delta, int B, int T, int C, int NH) {
  flash_attention_bf16_backward_block(dqkv, dqkv, dout, qkv, qkv, out, lse, delta, B, T, T, 0, C, NH, false);
}

}  // namespace cairn::kernels
