// Host emulation of the fp32 flash-attention kernels (block code: kernels/cuda/flash_attention_tiles.h) for tests on
// machines without GPUs: a host executor that runs each block's phases for all tids in turn with NaN-poisoned
// registers and shared memory, the kernels' grids, and emulate_forward / emulate_backward (the CUDA backend's flash
// path on the host). Host code only; never compiled by nvcc.
#pragma once
#ifdef __CUDACC__
#error "kernels/emulation/ is host code: the CUDA kernels use flash_launch.cuh's device executor"
#endif
#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "../cuda/flash_attention_tiles.h"

namespace cairn::kernels::flash {

// The device executor's reduce (flash_launch.cuh) on the host: in every group of Lanes consecutive tids, the xor
// butterfly with offsets Lanes/2 down to 1, the same pairing and order of operations. Both host executors use it.
template <int Lanes, int N, bool kMax, class RegsVec, class Sel>
void host_reduce(RegsVec& regs, int threads, Sel sel) {
  for (int g = 0; g < threads; g += Lanes)
    for (int i = 0; i < N; i++) {
      float v[Lanes], w[Lanes];
      for (int t = 0; t < Lanes; t++) v[t] = sel(regs[g + t])[i];
      for (int o = Lanes / 2; o >= 1; o >>= 1) {
        for (int t = 0; t < Lanes; t++) w[t] = kMax ? fmaxf(v[t], v[t ^ o]) : v[t] + v[t ^ o];
        std::copy(w, w + Lanes, v);
      }
      for (int t = 0; t < Lanes; t++) sel(regs[g + t])[i] = v[t];
    }
}

// Runs a block's phases for all kThreads tids in turn: each() is one phase of every thread, barrier() a no-op
// (phases never overlap), reduce the device's xor butterfly (host_reduce).
// `reverse` runs the tids of each phase backwards: a phase that read another thread's writes from the same phase (a
// missing barrier) would then change the result, so tests compare both orders bitwise. Registers start as NaN so a
// read before the first write poisons the output.
template <class Regs>
struct HostBlock {
  std::vector<Regs> regs;
  bool reverse = false;
  explicit HostBlock(bool rev) : regs(kThreads), reverse(rev) {
    std::vector<float> nan(sizeof(Regs) / sizeof(float) + 1, std::numeric_limits<float>::quiet_NaN());
    for (auto& r : regs) std::memcpy(static_cast<void*>(&r), nan.data(), sizeof(Regs));
  }
  void barrier() {}
  template <class F>
  void each(F&& f) {
    for (int n = 0; n < kThreads; n++) {
      const int tid = reverse ? kThreads - 1 - n : n;
      f(tid, regs[tid]);
    }
  }
  template <int Lanes, int N, bool kMax, class Sel>
  void reduce(Sel sel) {
    host_reduce<Lanes, N, kMax>(regs, kThreads, sel);
  }
};

// Shared memory of one emulated block: 16-byte aligned like the device's, NaN-filled so a read of a location no
// thread wrote poisons the output.
struct alignas(16) SmemQuad {
  float v[4];
};
struct HostSmem {
  std::vector<SmemQuad> quads;
  explicit HostSmem(int floats) : quads((size_t)(floats + 3) / 4) {}
};
inline float* poisoned(HostSmem& smem) {
  float* p = reinterpret_cast<float*>(smem.quads.data());
  std::fill(p, p + 4 * smem.quads.size(), std::numeric_limits<float>::quiet_NaN());
  return p;
}

// The grids the CUDA launchers use: x = b * NH + h, y = tile (forward and dQ: heaviest tile first).
template <int HD>
void emulate_forward_hd(float* out, float* lse, const float* q_qkv, const float* kv_qkv, const Problem& pb,
                        const Span& sp, bool reverse) {
  constexpr int R = Config<HD>::fwd_R, CC = Config<HD>::fwd_CC;
  using L = FwdLayout<HD, R, CC>;
  const int n_qt = (sp.Tq + L::BQ - 1) / L::BQ;
  HostSmem smem(L::floats);
  for (int bh = 0; bh < pb.B * pb.NH; bh++)
    for (int y = 0; y < n_qt; y++) {
      HostBlock<FwdRegs<R, CC, HD / 16>> blk(reverse);
      forward_block<HD, R, CC>(blk, poisoned(smem), out, lse, q_qkv, kv_qkv, pb, sp, bh / pb.NH, bh % pb.NH,
                               n_qt - 1 - y);
    }
}

// The dK/dV grid covers the keys some query sees (Span::keys_seen), as flash_attention.cu's.
template <int HD>
void emulate_backward_hd(float* dq_qkv, float* dkv_qkv, const float* dout, const float* q_qkv, const float* kv_qkv,
                         const float* lse, const float* delta, const Problem& pb, const Span& sp, bool reverse) {
  {
    constexpr int R = Config<HD>::q_R, CC = Config<HD>::q_CC;
    using L = QLayout<HD, R, CC>;
    const int n_qt = (sp.Tq + L::BQ - 1) / L::BQ;
    HostSmem smem(L::floats);
    for (int bh = 0; bh < pb.B * pb.NH; bh++)
      for (int y = 0; y < n_qt; y++) {
        HostBlock<QRegs<R, CC, HD / 16>> blk(reverse);
        backward_q_block<HD, R, CC>(blk, poisoned(smem), dq_qkv, dout, q_qkv, kv_qkv, lse, delta, pb, sp, bh / pb.NH,
                                    bh % pb.NH, n_qt - 1 - y);
      }
  }
  {
    constexpr int R = Config<HD>::kv_R, CQ = Config<HD>::kv_CQ;
    using L = KvLayout<HD, R, CQ>;
    const int n_kt = (sp.keys_seen() + L::BK - 1) / L::BK;
    HostSmem smem(L::floats);
    for (int bh = 0; bh < pb.B * pb.NH; bh++)
      for (int y = 0; y < n_kt; y++) {
        HostBlock<KvRegs<R, CQ, HD / 16>> blk(reverse);
        backward_kv_block<HD, R, CQ>(blk, poisoned(smem), dkv_qkv, dout, q_qkv, kv_qkv, lse, delta, pb, sp, bh / pb.NH,
                                     bh % pb.NH, y);
      }
  }
}

// D = rowsum(dO o O) per (b, h, query row) in fp32 over a head's columns: flash_launch.cuh's delta kernel, which both
// flash families run before their backward passes.
inline std::vector<float> host_delta(const float* dout, const float* out, int B, int Tq, int C, int NH) {
  const int hd = C / NH;
  std::vector<float> delta((size_t)B * NH * Tq);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < Tq; t++) {
        const size_t off = ((size_t)b * Tq + t) * C + (size_t)h * hd;
        float s = 0.0f;
        for (int d = 0; d < hd; d++) s += dout[off + d] * out[off + d];
        delta[((size_t)b * NH + h) * Tq + t] = s;
      }
  return delta;
}

// The CUDA backend's flash path on the host: false (nothing written) where the kernels do not handle the head dim.
// The block ops (flash_attention_*_block: Tq queries at q_pos against Tk keys, dK/dV accumulated) and the plain ops,
// which are the block with q = kv, Tq = Tk = T, q_pos = 0 and dK/dV written.
inline bool emulate_forward_block(float* out, float* lse, const float* q_qkv, const float* kv_qkv, int B, int Tq,
                                  int Tk, int q_pos, int C, int NH, bool reverse = false) {
  const Problem pb = problem_for<Problem>(B, Tq, C, NH);
  const Span sp{Tq, Tk, q_pos, false};
  switch (C % NH == 0 ? padded_head_dim(pb.hd) : 0) {
    case 32: emulate_forward_hd<32>(out, lse, q_qkv, kv_qkv, pb, sp, reverse); return true;
    case 64: emulate_forward_hd<64>(out, lse, q_qkv, kv_qkv, pb, sp, reverse); return true;
    case 128: emulate_forward_hd<128>(out, lse, q_qkv, kv_qkv, pb, sp, reverse); return true;
    default: return false;
  }
}

inline bool emulate_backward_block(float* dq_qkv, float* dkv_qkv, const float* dout, const float* q_qkv,
                                   const float* kv_qkv, const float* out, const float* lse, int B, int Tq, int Tk,
                                   int q_pos, int C, int NH, bool accumulate_kv, bool reverse = false) {
  const Problem pb = problem_for<Problem>(B, Tq, C, NH);
  const Span sp{Tq, Tk, q_pos, accumulate_kv};
  const int hdp = C % NH == 0 ? padded_head_dim(pb.hd) : 0;
  if (!hdp) return false;
  const std::vector<float> delta = host_delta(dout, out, B, Tq, C, NH);
  switch (hdp) {
    case 32: emulate_backward_hd<32>(dq_qkv, dkv_qkv, dout, q_qkv, kv_qkv, lse, delta.data(), pb, sp, reverse); break;
    case 64: emulate_backward_hd<64>(dq_qkv, dkv_qkv, dout, q_qkv, kv_qkv, lse, delta.data(), pb, sp, reverse); break;
    default: emulate_backward_hd<128>(dq_qkv, dkv_qkv, dout, q_qkv, kv_qkv, lse, delta.data(), pb, sp, reverse); break;
  }
  return true;
}

inline bool emulate_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH,
                            bool reverse = false) {
  return emulate_forward_block(out, lse, qkv, qkv, B, T, T, 0, C, NH, reverse);
}

inline bool emulate_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                             int B, int T, int C, int NH, bool reverse = false) {
  return emulate_backward_block(dqkv, dqkv, dout, qkv, qkv, out, lse, B, T, T, 0, C, NH, false, reverse);
}
}  // namespace cairn::kernels::flash
