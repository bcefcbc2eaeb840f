// Host emulation of the bf16 tensor-core flash-attention kernels (block code in
// kernels/cuda/flash_attention_bf16_tiles.h) for tests on machines without GPUs: a host executor that runs each
// block's phases for all tids in turn, emulates each warp's mma.sync.m16n8k16 from the PTX fragment layout and checks
// shared-memory races (smem_race_check.h), and the emulate_ drivers over the kernels' grids. Host code only; never
// compiled by nvcc.
#pragma once
#ifdef __CUDACC__
#error "kernels/emulation/ is host code: the CUDA kernels use flash_launch.cuh's device executor"
#endif
#include <cstring>
#include <vector>

#include "../cuda/flash_attention_bf16_tiles.h"
#include "flash_host.h"

namespace cairn::kernels::flash_bf16 {

// Runs a block's phases for all 32 NW tids in turn (barrier() only starts a new interval of the race checker: phases
// never overlap here; `reverse` runs each phase's tids backwards, so a phase that read another thread's write from the
// same phase changes the result).
// reduce is the device's xor butterfly over groups of lanes (flash::host_reduce). mma() is one warp-wide
// mma.sync.m16n8k16.row.col.f32.bf16.bf16.f32 per warp, emulated as the PTX ISA defines it: every lane's operands are
// gathered into A (16 x 16), B (16 x 8), C (16 x 8) through the fragment maps, D = A B + C is computed from the bf16
// values in fp32 (products of two bf16 are exact in fp32; summed in k order after C: the hardware's order and
// internal rounding are unspecified, so the GPU may differ in the last bits), and D is scattered back to each lane's
// four accumulators. Registers and (in the emulate_ functions) shared memory start as all-ones bytes: a float NaN and
// a bf16 NaN in every half, so any read before a write poisons the output.
template <class Regs, int NW>
struct HostBlock {
  static constexpr int kThreads = 32 * NW;
  std::vector<Regs> regs;
  bool reverse = false;
  explicit HostBlock(bool rev) : regs(kThreads), reverse(rev) {
    for (auto& r : regs) std::memset(static_cast<void*>(&r), 0xff, sizeof(Regs));
  }
  void barrier() {
    if (SmemRaceCheck* c = race_check()) c->epoch++;
  }
  template <class F>
  void each(F&& f) {
    for (int n = 0; n < kThreads; n++) {
      const int tid = reverse ? kThreads - 1 - n : n;
      if (SmemRaceCheck* c = race_check()) c->tid = tid;
      f(tid, regs[tid]);
    }
  }
  template <int Lanes, int N, bool kMax, class Sel>
  void reduce(Sel sel) {
    flash::host_reduce<Lanes, N, kMax>(regs, kThreads, sel);
  }
  template <class Ops>
  void mma(Ops ops) {
    for (int w = 0; w < NW; w++) {
      float A[16][16], B[16][8], Cm[16][8];
      float* d[32];
      for (int n = 0; n < 32; n++) {
        const int lane = reverse ? 31 - n : n, tid = 32 * w + lane;
        if (SmemRaceCheck* c = race_check()) c->tid = tid;
        const Mma m = ops(tid, regs[tid]);
        for (int i = 0; i < 8; i++)
          A[a_row(lane, i)][a_col(lane, i)] = bf16_to_float((uint16_t)(m.a[i / 2] >> (16 * (i % 2))));
        for (int i = 0; i < 4; i++)
          B[b_row(lane, i)][b_col(lane, i)] = bf16_to_float((uint16_t)(m.b[i / 2] >> (16 * (i % 2))));
        for (int i = 0; i < 4; i++) Cm[c_row(lane, i)][c_col(lane, i)] = m.d[i];
        d[lane] = m.d;
      }
      float D[16][8];
      for (int r = 0; r < 16; r++)
        for (int c = 0; c < 8; c++) {
          float acc = Cm[r][c];
          for (int k = 0; k < 16; k++) acc += A[r][k] * B[k][c];
          D[r][c] = acc;
        }
      for (int lane = 0; lane < 32; lane++)
        for (int i = 0; i < 4; i++) d[lane][i] = D[c_row(lane, i)][c_col(lane, i)];
    }
  }
};

// Shared memory of one emulated block: 16-byte aligned like the device's, all-ones (bf16 and float NaN) bytes.
struct alignas(16) SmemChunk {
  uint16_t v[8];
};
// Poisons the block's shared memory and registers it with the race checker (when one is active).
inline uint16_t* poisoned(std::vector<SmemChunk>& smem) {
  std::memset(static_cast<void*>(smem.data()), 0xff, smem.size() * sizeof(SmemChunk));
  uint16_t* p = reinterpret_cast<uint16_t*>(smem.data());
  if (SmemRaceCheck* c = race_check()) c->reset(p, smem.size() * 8);
  return p;
}
// Activates a race checker for the emulation calls in its scope.
struct RaceCheckScope {
  SmemRaceCheck check;
  RaceCheckScope() { race_check() = &check; }
  ~RaceCheckScope() { race_check() = nullptr; }
  RaceCheckScope(const RaceCheckScope&) = delete;
  RaceCheckScope& operator=(const RaceCheckScope&) = delete;
};

// The grids the CUDA launchers use: x = b * NH + h, y = tile (forward and dQ: heaviest tile first; dK/dV: the key
// tiles some query sees).
template <int HD>
void emulate_forward_hd(float* out, float* lse, const float* q_qkv, const float* kv_qkv, const Problem& pb,
                        const flash::Span& sp, bool reverse) {
  RaceCheckScope race;
  constexpr int BK = Config<HD>::fwd_BK, NW = Config<HD>::fwd_W;
  using L = FwdLayout<HD, BK, NW>;
  const int n_qt = (sp.Tq + L::ROWS - 1) / L::ROWS;
  std::vector<SmemChunk> smem((L::halves + 7) / 8);
  for (int bh = 0; bh < pb.B * pb.NH; bh++)
    for (int y = 0; y < n_qt; y++) {
      HostBlock<FwdRegs<HD, BK>, NW> blk(reverse);
      forward_block<HD, BK, NW>(blk, poisoned(smem), out, lse, q_qkv, kv_qkv, pb, sp, bh / pb.NH, bh % pb.NH,
                                n_qt - 1 - y);
    }
}

template <int HD>
void emulate_backward_hd(float* dq_qkv, float* dkv_qkv, const float* dout, const float* q_qkv, const float* kv_qkv,
                         const float* lse, const float* delta, const Problem& pb, const flash::Span& sp, bool reverse) {
  RaceCheckScope race;
  {
    constexpr int BK = Config<HD>::q_BK, NW = Config<HD>::q_W;
    using L = QLayout<HD, BK, NW>;
    const int n_qt = (sp.Tq + L::ROWS - 1) / L::ROWS;
    std::vector<SmemChunk> smem((L::halves + 7) / 8);
    for (int bh = 0; bh < pb.B * pb.NH; bh++)
      for (int y = 0; y < n_qt; y++) {
        HostBlock<QRegs<HD, BK>, NW> blk(reverse);
        backward_q_block<HD, BK, NW>(blk, poisoned(smem), dq_qkv, dout, q_qkv, kv_qkv, lse, delta, pb, sp, bh / pb.NH,
                                     bh % pb.NH, n_qt - 1 - y);
      }
  }
  {
    constexpr int BQ = Config<HD>::kv_BQ, NW = Config<HD>::kv_W;
    using L = KvLayout<HD, BQ, NW>;
    const int n_kt = (sp.keys_seen() + L::ROWS - 1) / L::ROWS;
    std::vector<SmemChunk> smem((L::halves + 7) / 8);
    for (int bh = 0; bh < pb.B * pb.NH; bh++)
      for (int y = 0; y < n_kt; y++) {
        HostBlock<KvRegs<HD, BQ>, NW> blk(reverse);
        backward_kv_block<HD, BQ, NW>(blk, poisoned(smem), dkv_qkv, dout, q_qkv, kv_qkv, lse, delta, pb, sp, bh / pb.NH,
                                      bh % pb.NH, y);
      }
  }
}

// The CUDA backend's bf16 flash path on the host: false (nothing written) where the kernels do not handle the shape.
// The block ops (flash_attention_bf16_*_block: Tq queries at q_pos against Tk keys, dK/dV accumulated when asked) and
// the plain ops, which are the block with q = kv, Tq = Tk = T, q_pos = 0 and dK/dV written.
inline bool emulate_forward_block(float* out, float* lse, const float* q_qkv, const float* kv_qkv, int B, int Tq,
                                  int Tk, int q_pos, int C, int NH, bool reverse = false) {
  if (NH <= 0 || C % NH != 0 || !head_dim_supported(C / NH)) return false;
  const Problem pb = flash::problem_for<Problem>(B, Tq, C, NH);
  const flash::Span sp{Tq, Tk, q_pos, false};
  if (pb.hd == 64) emulate_forward_hd<64>(out, lse, q_qkv, kv_qkv, pb, sp, reverse);
  else emulate_forward_hd<128>(out, lse, q_qkv, kv_qkv, pb, sp, reverse);
  return true;
}

inline bool emulate_backward_block(float* dq_qkv, float* dkv_qkv, const float* dout, const float* q_qkv,
                                   const float* kv_qkv, const float* out, const float* lse, int B, int Tq, int Tk,
                                   int q_pos, int C, int NH, bool accumulate_kv, bool reverse = false) {
  if (NH <= 0 || C % NH != 0 || !head_dim_supported(C / NH)) return false;
  const Problem pb = flash::problem_for<Problem>(B, Tq, C, NH);
  const flash::Span sp{Tq, Tk, q_pos, accumulate_kv};
  const std::vector<float> delta = flash::host_delta(dout, out, B, Tq, C, NH);
  if (pb.hd == 64) emulate_backward_hd<64>(dq_qkv, dkv_qkv, dout, q_qkv, kv_qkv, lse, delta.data(), pb, sp, reverse);
  else emulate_backward_hd<128>(dq_qkv, dkv_qkv, dout, q_qkv, kv_qkv, lse, delta.data(), pb, sp, reverse);
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

}  // namespace cairn::kernels::flash_bf16
