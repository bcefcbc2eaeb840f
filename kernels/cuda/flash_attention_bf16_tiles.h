// Tiled causal flash attention on tensor cores (bf16 mma.sync, fp32 accumulation; FlashAttention-2 scheme) for
// precision = "bf16", written once for two executors like flash_attention_tiles.h: the CUDA kernels in
// flash_attention_bf16.cu (one thread per tid, __syncthreads at barrier(), PTX mma.sync.m16n8k16 for mma()), and the
// host executor in kernels/emulation/flash_bf16_host.h, which runs each phase for all tids in turn and emulates each
// warp's mma exactly as the PTX ISA defines it (gathers the 32 lanes' fragments into the 16x16 A, 16x8 B and C matrices
// through the fragment maps below, multiplies the bf16 values in fp32, scatters D back to the lanes' registers), so
// the CPU test tests/kernels/kernels_flash_bf16_emulation_test.cpp checks the tiling, causal tile skipping, tail
// masks, online softmax, fragment bookkeeping (which lane holds which element, the accumulator-to-A-fragment reuse)
// and index math against the CPU reference; its shared-memory race checker (SmemRaceCheck) also checks that every
// cross-thread use of shared memory is separated by a barrier().
//
// What the host CANNOT prove: that the hardware's fragment layout is the one the maps below transcribe from the PTX
// ISA ("Matrix Fragments for mma.m16n8k16 with floating point type"; a typo there would be consistent on both sides
// of the emulation), the tensor cores' own summation order and internal precision (the emulation sums the exact
// bf16 products in fp32 in k order), and device-only matters (bank conflicts, registers, the inline PTX operand
// order). The GPU test kernels_cuda compares the GPU with this emulation on the same inputs for that.
//
// Numerics (autocast style): q, k, v, dO are fp32 in global memory and rounded to bf16 (round to nearest even) when
// a tile is stored in shared memory; S = Q K^T and every product accumulate in fp32; softmax statistics (m, l, lse,
// D) stay fp32; P (forward), P and dS (backward) are rounded to bf16 only as mma inputs. Outputs are fp32.
//
// Warps: a block of NW warps (Config: 4 or 8) owns a tile of 16 NW rows, each warp 16 of them (queries in the forward
// and dQ passes, keys in the dK/dV pass), and computes its 16 x N products as m16n8k16 mmas: the A operand (16 x 16) is
// the warp's rows, B (16 x 8) 8 columns, and a thread's accumulator element i of an n-tile lies at row
// groupID + 8 (i / 2), column 2 threadID_in_group + i % 2 (so each thread holds two rows; row reductions are
// 4-lane xor butterflies). The probabilities (forward) and P, dS (backward) never go through shared memory: the
// accumulators of n-tiles 2j and 2j+1 are exactly the A fragment of k-step j (acc_to_a).
// Shared memory holds bf16 tiles: row-major [rows][HD + 8] (operands whose reduction dimension is the head dim) and
// transposed [HD][cols + 8] (V in the forward, read transposed from global memory; Q and dO in the dK/dV pass and K
// in the dQ pass, transposed from their row-major shared copies: operands reduced over keys or queries), so every
// fragment load is one 32-bit load of two neighbouring bf16; the +8 pad puts the 32 lanes of a fragment load in 32
// different banks. No atomics: every output element has one owner thread (deterministic).
#pragma once
#include <stdint.h>

#include "flash_attention_tiles.h"

#ifdef __CUDACC__
#include <cuda_bf16.h>
#else
// The host side of the shared-memory primitives below: bf16 rounding and the race checker's hook (emulation only).
#include "../emulation/bf16_host.h"
#include "../emulation/smem_race_check.h"
#endif

namespace cairn::kernels::flash_bf16 {

// One attention call (same fields as flash::Problem; a type of its own so calls never reach the fp32 namespace by ADL).
struct Problem {
  int B, T, C, NH, hd;
  float scale;  // 1 / sqrt(hd)
};
constexpr int kWarpRows = 16;  // rows of a block's own tile per warp (one m16 A operand)

// Head dims with instantiated tensor-core kernels; others use the fp32 flash kernels.
constexpr bool head_dim_supported(int hd) { return hd == 64 || hd == 128; }

// Per pass: warps per block (the block's own tile has 16 rows per warp: more rows = fewer global reads of the other
// side per FLOP) and the width of the tiles it loops over (keys in the forward and dQ passes, queries in the dK/dV
// pass). hd 64 runs the forward and dQ passes with 8 warps (128 rows; ~128 registers: two blocks per SM); the
// dK/dV pass (~180 registers) and hd 128 stay at 4 warps (64 rows) so two or more blocks fit on an SM, and hd 128
// halves the dQ and dK/dV tiles so two full-width accumulator sets plus the score tiles stay in registers.
template <int HD>
struct Config {
  static constexpr int fwd_W = HD == 64 ? 8 : 4, fwd_BK = 64;
  static constexpr int kv_W = 4, kv_BQ = HD == 64 ? 64 : 32;
  static constexpr int q_W = HD == 64 ? 8 : 4, q_BK = HD == 64 ? 64 : 32;
};

// ---------------------------------------------------------------- mma.m16n8k16 fragment maps (PTX ISA)
// lane = laneid, groupID = lane >> 2, threadID_in_group = lane % 4. A (16 x 16, .row): 8 bf16 a0..a7 in 4 32-bit
// registers (a_i in register i / 2, bits 16 (i % 2) and up); B (16 x 8, .col): 4 bf16 b0..b3 in 2 registers; C and
// D (16 x 8, f32): 4 floats c0..c3.
CAIRN_FA_FN int a_row(int lane, int i) { return (lane >> 2) + 8 * ((i >> 1) & 1); }
CAIRN_FA_FN int a_col(int lane, int i) { return 2 * (lane & 3) + (i & 1) + 8 * (i >> 2); }
CAIRN_FA_FN int b_row(int lane, int i) { return 2 * (lane & 3) + (i & 1) + 8 * (i >> 1); }  // k
CAIRN_FA_FN int b_col(int lane, int) { return lane >> 2; }                                  // n
CAIRN_FA_FN int c_row(int lane, int i) { return (lane >> 2) + 8 * (i >> 1); }
CAIRN_FA_FN int c_col(int lane, int i) { return 2 * (lane & 3) + (i & 1); }

// One lane's operands of a warp mma: D = A B + C with C = D's previous value (d points at the lane's 4 accumulators).
struct Mma {
  float* d;
  uint32_t a[4];
  uint32_t b[2];
};

// Two floats rounded to bf16 in one 32-bit register: lo in bits 0-15 (the lower-indexed element), hi in 16-31.
CAIRN_FA_FN uint32_t pack_bf16(float lo, float hi) {
#ifdef __CUDACC__
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
#else
  return (uint32_t)bf16_bits(lo) | ((uint32_t)bf16_bits(hi) << 16);
#endif
}

// 32-bit shared-memory access to two neighbouring bf16 (little endian: p[0] is the low half); the host checks the
// 4-byte alignment the device needs.
CAIRN_FA_FN uint32_t lds32(const uint16_t* p) {
#ifdef __CUDACC__
  return *reinterpret_cast<const uint32_t*>(p);
#else
  if (reinterpret_cast<std::uintptr_t>(p) % 4 != 0) throw std::logic_error("flash bf16: misaligned 32-bit load");
  race_access(p, 4, false);
  return (uint32_t)p[0] | ((uint32_t)p[1] << 16);
#endif
}
CAIRN_FA_FN void sts32(uint16_t* p, uint32_t v) {
#ifdef __CUDACC__
  *reinterpret_cast<uint32_t*>(p) = v;
#else
  if (reinterpret_cast<std::uintptr_t>(p) % 4 != 0) throw std::logic_error("flash bf16: misaligned 32-bit store");
  race_access(p, 4, true);
  p[0] = (uint16_t)(v & 0xffffu);
  p[1] = (uint16_t)(v >> 16);
#endif
}
CAIRN_FA_FN uint32_t lds16(const uint16_t* p) {
#ifndef __CUDACC__
  race_access(p, 2, false);
#endif
  return *p;
}
CAIRN_FA_FN float ldsf(const float* p) {
#ifndef __CUDACC__
  race_access(p, 4, false);
#endif
  return *p;
}
CAIRN_FA_FN void stsf(float* p, float v) {
#ifndef __CUDACC__
  race_access(p, 4, true);
#endif
  *p = v;
}

// A fragment of the 16 x 16 block at (row0, col0) of a row-major bf16 tile (row stride ld): registers j hold
// elements 2j, 2j + 1, which are neighbours in one row.
CAIRN_FA_FN void load_a(uint32_t (&a)[4], const uint16_t* tile, int ld, int row0, int col0, int lane) {
  CAIRN_FA_UNROLL
  for (int j = 0; j < 4; j++) a[j] = lds32(tile + (row0 + a_row(lane, 2 * j)) * ld + col0 + a_col(lane, 2 * j));
}
// B fragment (B[k][n], k0..k0+15, n0..n0+7) from a tile stored n-major, tile[n][k] (row stride ld): the two
// elements of a register are neighbours in k.
CAIRN_FA_FN void load_b(uint32_t (&b)[2], const uint16_t* tile_nk, int ld, int n0, int k0, int lane) {
  CAIRN_FA_UNROLL
  for (int j = 0; j < 2; j++) b[j] = lds32(tile_nk + (n0 + b_col(lane, 2 * j)) * ld + k0 + b_row(lane, 2 * j));
}
// One lane's operands for blk.mma: accumulators d, A fragment a, and the B fragment (n0.., k0..) of an n-major tile.
CAIRN_FA_FN Mma mma_op(float* d, const uint32_t (&a)[4], const uint16_t* b_nk, int ld, int n0, int k0, int lane) {
  Mma m{d, {a[0], a[1], a[2], a[3]}, {}};
  load_b(m.b, b_nk, ld, n0, k0, lane);
  return m;
}
// The A fragment of k-step j from the fp32 accumulators of n-tiles 2j (c0) and 2j + 1 (c1) of the same 16 rows:
// a0 a1 = row g, columns 2 tig + (0, 1) = c0[0..1]; a2 a3 = row g + 8 = c0[2..3]; a4..a7 the same 8 columns on = c1.
CAIRN_FA_FN void acc_to_a(uint32_t (&a)[4], const float (&c0)[4], const float (&c1)[4]) {
  a[0] = pack_bf16(c0[0], c0[1]);
  a[1] = pack_bf16(c0[2], c0[3]);
  a[2] = pack_bf16(c1[0], c1[1]);
  a[3] = pack_bf16(c1[2], c1[3]);
}

// Rows [row0, row0 + rows) of one head's slice of a [*, T, src_ld] fp32 tensor (HD columns) into dst[r][d] (row
// stride ld), rounded to bf16; rows >= T are zeros (never read from global memory).
template <int HD, int NT>
CAIRN_FA_FN void load_rows(uint16_t* dst, int ld, int rows, const float* src, size_t src_ld, int row0, int T, int tid) {
  CAIRN_FA_UNROLL2  // a few global loads in flight per thread, not all of them (registers)
      for (int idx = tid; idx < rows * (HD / 2); idx += NT) {
    const int r = idx / (HD / 2), d = 2 * (idx % (HD / 2)), t = row0 + r;
    float x = 0.0f, y = 0.0f;
    if (t < T) {
      const float* p = src + (size_t)t * src_ld + d;
      x = p[0];
      y = p[1];
    }
    sts32(dst + r * ld + d, pack_bf16(x, y));
  }
}
// The same rows transposed: dst[d][r] (row stride ld), two rows per 32-bit store; rows >= T are zeros.
template <int HD, int NT>
CAIRN_FA_FN void load_cols(uint16_t* dst, int ld, int rows, const float* src, size_t src_ld, int row0, int T, int tid) {
  CAIRN_FA_UNROLL2  // a few global loads in flight per thread, not all of them (registers)
      for (int idx = tid; idx < (rows / 2) * HD; idx += NT) {
    const int d = idx % HD, r = 2 * (idx / HD), t = row0 + r;
    const float x = t < T ? src[(size_t)t * src_ld + d] : 0.0f;
    const float y = t + 1 < T ? src[(size_t)(t + 1) * src_ld + d] : 0.0f;
    sts32(dst + d * ld + r, pack_bf16(x, y));
  }
}
// A shared bf16 tile transposed into another: dst[d][r] = src[r][d] (rows even), two rows per 32-bit store. Cheaper
// than a second pass over global memory when both layouts of one tile are needed.
template <int HD, int NT>
CAIRN_FA_FN void transpose_tile(uint16_t* dst, int ldt, const uint16_t* src, int ld, int rows, int tid) {
  CAIRN_FA_UNROLL2  // a few global loads in flight per thread, not all of them (registers)
      for (int idx = tid; idx < (rows / 2) * HD; idx += NT) {
    const int d = idx % HD, r = 2 * (idx / HD);
    sts32(dst + d * ldt + r, lds16(src + r * ld + d) | (lds16(src + (r + 1) * ld + d) << 16));
  }
}

// Shared-memory layouts, offsets in bf16 elements (all multiples of 8: 16-byte aligned). Row strides HD + 8 and
// cols + 8 halves are 4 mod 32 words (HD 64: 36, 128: 68; cols 64: 36, 32: 20 -> multiples of 4 distinct mod 32 over
// 8 rows): a fragment load's 8 groups x 4 lanes hit 32 different banks.
template <int HD, int BK, int NW>
struct FwdLayout {  // query tile Q [16 NW][HD], key tile K [BK][HD], V transposed [HD][BK]
  static constexpr int ROWS = kWarpRows * NW, LD = HD + 8, LDT = BK + 8;
  static constexpr int q = 0, k = q + ROWS * LD, vt = k + BK * LD, halves = vt + HD * LDT;
};
template <int HD, int BQ, int NW>
struct KvLayout {  // key tile K, V [16 NW][HD]; query tile Q, dO [BQ][HD] and transposed [HD][BQ]; lse, D floats [BQ]
  static constexpr int ROWS = kWarpRows * NW, LD = HD + 8, LDT = BQ + 8;
  static constexpr int k = 0, v = k + ROWS * LD, q = v + ROWS * LD, dout = q + BQ * LD, qt = dout + BQ * LD,
                       dot = qt + HD * LDT, lse = dot + HD * LDT, delta = lse + 2 * BQ, halves = delta + 2 * BQ;
};
template <int HD, int BK, int NW>
struct QLayout {  // query tile Q, dO [16 NW][HD]; key tile K, V [BK][HD] and K transposed [HD][BK]
  static constexpr int ROWS = kWarpRows * NW, LD = HD + 8, LDT = BK + 8;
  static constexpr int q = 0, dout = q + ROWS * LD, k = dout + ROWS * LD, v = k + BK * LD, kt = v + BK * LD,
                       halves = kt + HD * LDT;
};

// Per-thread registers: accumulators [n-tile][4] in the C layout, a scratch A fragment or two.
template <int HD, int BK>
struct FwdRegs {
  float o[HD / 8][4];
  float s[BK / 8][4];
  float m[2], l[2], red[2];
  uint32_t a[4];
};
template <int HD, int BQ>
struct KvRegs {
  float dk[HD / 8][4], dv[HD / 8][4];
  float s[BQ / 8][4], dp[BQ / 8][4];
  uint32_t a[4], a2[4];
};
template <int HD, int BK>
struct QRegs {
  float dq[HD / 8][4];
  float s[BK / 8][4], dp[BK / 8][4];
  float lse[2], delta[2];
  uint32_t a[4], a2[4];
};

template <int N>
CAIRN_FA_FN void zero_acc(float (&acc)[N][4]) {
  CAIRN_FA_UNROLL
  for (int n = 0; n < N; n++) {
    CAIRN_FA_UNROLL
    for (int i = 0; i < 4; i++) acc[n][i] = 0.0f;
  }
}

// ---------------------------------------------------------------- forward
// One block (NW warps): query tile qt (16 NW queries) of head (b, h); writes out and lse of the tile's rows < Tq.
// Every kernel takes a flash::Span, as the fp32 ones: Tq queries (rows of q_qkv) at positions q_pos.. against Tk keys
// (rows of kv_qkv), query i seeing keys 0 .. min(q_pos + i, Tk - 1); the plain ops are the square span.
// The two score tiles of the backward passes, S += A B^T and dP += A2 B2^T over the head dim: A, A2 = the warp's 16
// rows of two row-major tiles, B, B2 = NS 8-row slices of two row-major tiles read as B[d][n] (load_b). Registers
// r.a, r.a2 (A fragments) and r.s, r.dp (accumulators) of the block's Regs. The key/value pass calls it with keys as
// rows (S^T = K Q^T, dP^T = V dO^T), the query pass with queries as rows (S = Q K^T, dP = dO V^T).
template <int HD, int NS, class Block>
CAIRN_FA_FN void score_tile_pair(Block& blk, const uint16_t* a, const uint16_t* a2, const uint16_t* b,
                                 const uint16_t* b2, int ld) {
  CAIRN_FA_UNROLL
  for (int ks = 0; ks < HD / 16; ks++) {
    blk.each([&](int tid, auto& r) {
      load_a(r.a, a, ld, 16 * (tid >> 5), 16 * ks, tid & 31);
      load_a(r.a2, a2, ld, 16 * (tid >> 5), 16 * ks, tid & 31);
    });
    CAIRN_FA_UNROLL
    for (int nt = 0; nt < NS; nt++) {
      blk.mma([&](int tid, auto& r) { return mma_op(r.s[nt], r.a, b, ld, 8 * nt, 16 * ks, tid & 31); });
      blk.mma([&](int tid, auto& r) { return mma_op(r.dp[nt], r.a2, b2, ld, 8 * nt, 16 * ks, tid & 31); });
    }
  }
}

template <int HD, int BK, int NW, class Block>
CAIRN_FA_FN void forward_block(Block& blk, uint16_t* smem, float* out, float* lse, const float* q_qkv,
                               const float* kv_qkv, const Problem& pb, const flash::Span& sp, int b, int h, int qt) {
  using L = FwdLayout<HD, BK, NW>;
  constexpr int NT = 32 * NW, kRows = L::ROWS;
  using Regs = FwdRegs<HD, BK>;
  constexpr int NS = BK / 8, NO = HD / 8;
  uint16_t* sQ = smem + L::q;
  uint16_t* sK = smem + L::k;
  uint16_t* sVt = smem + L::vt;
  const int Tq = sp.Tq, Tk = sp.Tk, C = pb.C;
  const float scale = pb.scale;
  const size_t ld3 = (size_t)3 * C;
  const float* q_base = q_qkv + (size_t)b * Tq * ld3 + (size_t)h * HD;
  const float* kv_base = kv_qkv + (size_t)b * Tk * ld3 + (size_t)h * HD;
  const int q0 = qt * kRows;

  blk.each([&](int tid, Regs& r) {
    r.m[0] = r.m[1] = -INFINITY;
    r.l[0] = r.l[1] = 0.0f;
    zero_acc(r.o);
    load_rows<HD, NT>(sQ, L::LD, kRows, q_base, ld3, q0, Tq, tid);
  });
  const int n_kt = flash::key_tiles_for(q0, kRows, BK, sp);
  for (int kt = 0; kt < n_kt; kt++) {
    const int k0 = kt * BK;
    blk.barrier();  // the previous iteration's readers of sK, sVt are done (first time: sQ is complete)
    blk.each([&](int tid, Regs& r) {
      load_rows<HD, NT>(sK, L::LD, BK, kv_base + C, ld3, k0, sp.keys_seen(), tid);
      load_cols<HD, NT>(sVt, L::LDT, BK, kv_base + 2 * C, ld3, k0, sp.keys_seen(), tid);
      zero_acc(r.s);
    });
    blk.barrier();
    // S = Q K^T: A = the warp's 16 query rows of sQ, B[d][key] = sK[key][d]
    CAIRN_FA_UNROLL
    for (int ks = 0; ks < HD / 16; ks++) {
      blk.each([&](int tid, Regs& r) { load_a(r.a, sQ, L::LD, 16 * (tid >> 5), 16 * ks, tid & 31); });
      CAIRN_FA_UNROLL
      for (int nt = 0; nt < NS; nt++)
        blk.mma([&](int tid, Regs& r) { return mma_op(r.s[nt], r.a, sK, L::LD, 8 * nt, 16 * ks, tid & 31); });
    }
    // scale and mask (key > q_pos + query or key >= Tk); the thread's part of its two rows' maxima
    blk.each([&](int tid, Regs& r) {
      const int lane = tid & 31, row0 = q0 + 16 * (tid >> 5);
      r.red[0] = r.red[1] = -INFINITY;
      CAIRN_FA_UNROLL
      for (int nt = 0; nt < NS; nt++) {
        CAIRN_FA_UNROLL
        for (int i = 0; i < 4; i++) {
          const int qi = row0 + c_row(lane, i), kj = k0 + 8 * nt + c_col(lane, i);
          const float s = (kj > sp.q_pos + qi || kj >= Tk) ? -INFINITY : r.s[nt][i] * scale;
          r.s[nt][i] = s;
          r.red[i >> 1] = fmaxf(r.red[i >> 1], s);
        }
      }
    });
    blk.template reduce<4, 2, true>([](Regs& r) { return r.red; });  // red = the tile's row maxima
    // online softmax: P = exp(S - m_new) in place of S, the accumulator and the thread's partial row sums rescaled
    blk.each([&](int, Regs& r) {
      float m_use[2];
      CAIRN_FA_UNROLL
      for (int x = 0; x < 2; x++) {
        const float m_new = fmaxf(r.m[x], r.red[x]);
        // Key 0 lies in key tile 0 and every query sees it, so after tile 0 a row's max is finite for rows < Tq;
        // rows >= Tq stay at -inf: exp(-inf - 0) = 0 instead of exp(-inf - -inf) = NaN (never stored).
        m_use[x] = m_new == -INFINITY ? 0.0f : m_new;
        const float corr = expf(r.m[x] - m_use[x]);
        r.l[x] *= corr;
        r.m[x] = m_new;
        CAIRN_FA_UNROLL
        for (int nt = 0; nt < NO; nt++) {
          r.o[nt][2 * x] *= corr;
          r.o[nt][2 * x + 1] *= corr;
        }
      }
      CAIRN_FA_UNROLL
      for (int nt = 0; nt < NS; nt++) {
        CAIRN_FA_UNROLL
        for (int i = 0; i < 4; i++) {
          const float p = expf(r.s[nt][i] - m_use[i >> 1]);
          r.s[nt][i] = p;
          r.l[i >> 1] += p;  // the thread's columns only; the 4 lanes of a row add up at the end
        }
      }
    });
    // O += P V: A = P (k-step j from S's n-tiles 2j, 2j + 1), B[key][d] = sVt[d][key]
    CAIRN_FA_UNROLL
    for (int ks = 0; ks < BK / 16; ks++) {
      blk.each([&](int, Regs& r) { acc_to_a(r.a, r.s[2 * ks], r.s[2 * ks + 1]); });
      CAIRN_FA_UNROLL
      for (int nt = 0; nt < NO; nt++)
        blk.mma([&](int tid, Regs& r) { return mma_op(r.o[nt], r.a, sVt, L::LDT, 8 * nt, 16 * ks, tid & 31); });
    }
  }
  blk.template reduce<4, 2, false>([](Regs& r) { return r.l; });  // l = the full row sums
  blk.each([&](int tid, Regs& r) {
    const int lane = tid & 31, row0 = q0 + 16 * (tid >> 5);
    CAIRN_FA_UNROLL
    for (int x = 0; x < 2; x++) {
      const int qi = row0 + c_row(lane, 2 * x);
      if (qi >= Tq) continue;
      float* dst = out + ((size_t)b * Tq + qi) * C + (size_t)h * HD;
      const float inv = 1.0f / r.l[x];
      CAIRN_FA_UNROLL
      for (int nt = 0; nt < NO; nt++) {
        const int d = 8 * nt + c_col(lane, 2 * x);
        dst[d] = r.o[nt][2 * x] * inv;
        dst[d + 1] = r.o[nt][2 * x + 1] * inv;
      }
      if ((lane & 3) == 0) lse[((size_t)b * pb.NH + h) * Tq + qi] = r.m[x] + logf(r.l[x]);
    }
  });
}

// ---------------------------------------------------------------- backward: dK, dV
// One block (NW warps): key tile kt (16 NW keys) of head (b, h); loops over the query tiles from the diagonal on and
// writes (or, sp.accumulate_kv, adds to) the dK and dV columns of the tile's key rows < keys_seen() in dkv_qkv. S^T = K
// Q^T, dP^T = V dO^T (A = the warp's 16 keys), then dV += P^T dO and dK += dS^T Q with P^T, dS^T as A fragments
// straight from the accumulators.
template <int HD, int BQ, int NW, class Block>
CAIRN_FA_FN void backward_kv_block(Block& blk, uint16_t* smem, float* dkv_qkv, const float* dout, const float* q_qkv,
                                   const float* kv_qkv, const float* lse, const float* delta, const Problem& pb,
                                   const flash::Span& sp, int b, int h, int kt) {
  using L = KvLayout<HD, BQ, NW>;
  constexpr int NT = 32 * NW, kRows = L::ROWS;
  using Regs = KvRegs<HD, BQ>;
  constexpr int NS = BQ / 8, NO = HD / 8;
  uint16_t* sK = smem + L::k;
  uint16_t* sV = smem + L::v;
  uint16_t* sQ = smem + L::q;
  uint16_t* sdO = smem + L::dout;
  uint16_t* sQt = smem + L::qt;
  uint16_t* sdOt = smem + L::dot;
  float* sLse = reinterpret_cast<float*>(smem + L::lse);
  float* sD = reinterpret_cast<float*>(smem + L::delta);
  const int Tq = sp.Tq, Tk = sp.Tk, C = pb.C;
  const float scale = pb.scale;
  const flash::BackwardHead head = flash::span_head(pb, sp, q_qkv, kv_qkv, dout, lse, delta, b, h);
  const size_t ld3 = head.ld3;
  const float *q_base = head.q, *kv_base = head.kv, *do_base = head.dout, *lse_row = head.lse, *d_row = head.delta;
  const int k0 = kt * kRows;

  blk.each([&](int tid, Regs& r) {
    zero_acc(r.dk);
    zero_acc(r.dv);
    load_rows<HD, NT>(sK, L::LD, kRows, kv_base + C, ld3, k0, sp.keys_seen(), tid);
    load_rows<HD, NT>(sV, L::LD, kRows, kv_base + 2 * C, ld3, k0, sp.keys_seen(), tid);
  });
  const int n_qt = (Tq + BQ - 1) / BQ;
  // query tiles entirely above the diagonal (every query before k0 - q_pos) see none of these keys: start at the tile
  // holding the first query that sees key k0
  for (int qt = (k0 - sp.q_pos > 0 ? k0 - sp.q_pos : 0) / BQ; qt < n_qt; qt++) {
    const int q0 = qt * BQ;
    blk.barrier();  // the previous iteration's readers of the query-side tiles are done (first time: sK, sV complete)
    blk.each([&](int tid, Regs& r) {
      load_rows<HD, NT>(sQ, L::LD, BQ, q_base, ld3, q0, Tq, tid);
      load_rows<HD, NT>(sdO, L::LD, BQ, do_base, (size_t)C, q0, Tq, tid);
      for (int idx = tid; idx < BQ; idx += NT) {
        const int t = q0 + idx;
        stsf(sLse + idx, t < Tq ? lse_row[t] : 0.0f);
        stsf(sD + idx, t < Tq ? d_row[t] : 0.0f);
      }
      zero_acc(r.s);
      zero_acc(r.dp);
    });
    blk.barrier();  // sQ, sdO, sLse, sD complete
    // the transposed copies for dV, dK (read after the barrier below), while the score mmas read the row-major ones
    blk.each([&](int tid, Regs&) {
      transpose_tile<HD, NT>(sQt, L::LDT, sQ, L::LD, BQ, tid);
      transpose_tile<HD, NT>(sdOt, L::LDT, sdO, L::LD, BQ, tid);
    });
    // S^T = K Q^T and dP^T = V dO^T: B[d][query] = sQ[query][d], sdO[query][d]
    score_tile_pair<HD, NS>(blk, sK, sV, sQ, sdO, L::LD);
    // P^T = exp(S^T scale - lse) where key <= q_pos + query, query < Tq, key < Tk (else 0), dS^T = P^T (dP^T - D)
    // scale, in place
    blk.each([&](int tid, Regs& r) {
      const int lane = tid & 31, key0 = k0 + 16 * (tid >> 5);
      CAIRN_FA_UNROLL
      for (int nt = 0; nt < NS; nt++) {
        CAIRN_FA_UNROLL
        for (int i = 0; i < 4; i++) {
          const int kj = key0 + c_row(lane, i), qc = 8 * nt + c_col(lane, i), qi = q0 + qc;
          const bool valid = qi < Tq && kj <= sp.q_pos + qi && kj < Tk;
          const float p = valid ? expf(r.s[nt][i] * scale - ldsf(sLse + qc)) : 0.0f;
          r.s[nt][i] = p;
          r.dp[nt][i] = p * (r.dp[nt][i] - ldsf(sD + qc)) * scale;
        }
      }
    });
    blk.barrier();  // sQt, sdOt complete
    // dV += P^T dO, dK += dS^T Q: B[query][d] = sdOt[d][query], sQt[d][query]
    CAIRN_FA_UNROLL
    for (int ks = 0; ks < BQ / 16; ks++) {
      blk.each([&](int, Regs& r) {
        acc_to_a(r.a, r.s[2 * ks], r.s[2 * ks + 1]);
        acc_to_a(r.a2, r.dp[2 * ks], r.dp[2 * ks + 1]);
      });
      CAIRN_FA_UNROLL
      for (int nt = 0; nt < NO; nt++) {
        blk.mma([&](int tid, Regs& r) { return mma_op(r.dv[nt], r.a, sdOt, L::LDT, 8 * nt, 16 * ks, tid & 31); });
        blk.mma([&](int tid, Regs& r) { return mma_op(r.dk[nt], r.a2, sQt, L::LDT, 8 * nt, 16 * ks, tid & 31); });
      }
    }
  }
  blk.each([&](int tid, Regs& r) {
    const int lane = tid & 31, key0 = k0 + 16 * (tid >> 5);
    CAIRN_FA_UNROLL
    for (int x = 0; x < 2; x++) {
      const int kj = key0 + c_row(lane, 2 * x);
      if (kj >= sp.keys_seen()) continue;
      float* row = dkv_qkv + ((size_t)b * Tk + kj) * ld3 + (size_t)h * HD;
      auto put = [&](float* p, float v) { *p = sp.accumulate_kv ? *p + v : v; };  // add, or write
      CAIRN_FA_UNROLL
      for (int nt = 0; nt < NO; nt++) {
        const int d = 8 * nt + c_col(lane, 2 * x);
        put(row + C + d, r.dk[nt][2 * x]);
        put(row + C + d + 1, r.dk[nt][2 * x + 1]);
        put(row + 2 * C + d, r.dv[nt][2 * x]);
        put(row + 2 * C + d + 1, r.dv[nt][2 * x + 1]);
      }
    }
  });
}

// ---------------------------------------------------------------- backward: dQ
// One block (NW warps): query tile qt (16 NW queries) of head (b, h); loops over key tiles up to the diagonal like the
// forward and writes the dQ columns of the tile's query rows < Tq in dq_qkv. S = Q K^T, dP = dO V^T, dQ += dS K.
template <int HD, int BK, int NW, class Block>
CAIRN_FA_FN void backward_q_block(Block& blk, uint16_t* smem, float* dq_qkv, const float* dout, const float* q_qkv,
                                  const float* kv_qkv, const float* lse, const float* delta, const Problem& pb,
                                  const flash::Span& sp, int b, int h, int qt) {
  using L = QLayout<HD, BK, NW>;
  constexpr int NT = 32 * NW, kRows = L::ROWS;
  using Regs = QRegs<HD, BK>;
  constexpr int NS = BK / 8, NO = HD / 8;
  uint16_t* sQ = smem + L::q;
  uint16_t* sdO = smem + L::dout;
  uint16_t* sK = smem + L::k;
  uint16_t* sV = smem + L::v;
  uint16_t* sKt = smem + L::kt;
  const int Tq = sp.Tq, Tk = sp.Tk, C = pb.C;
  const float scale = pb.scale;
  const flash::BackwardHead head = flash::span_head(pb, sp, q_qkv, kv_qkv, dout, lse, delta, b, h);
  const size_t ld3 = head.ld3;
  const float *q_base = head.q, *kv_base = head.kv, *do_base = head.dout, *lse_row = head.lse, *d_row = head.delta;
  const int q0 = qt * kRows;

  blk.each([&](int tid, Regs& r) {
    const int lane = tid & 31, row0 = q0 + 16 * (tid >> 5);
    CAIRN_FA_UNROLL
    for (int x = 0; x < 2; x++) {
      const int qi = row0 + c_row(lane, 2 * x);
      r.lse[x] = qi < Tq ? lse_row[qi] : 0.0f;
      r.delta[x] = qi < Tq ? d_row[qi] : 0.0f;
    }
    zero_acc(r.dq);
    load_rows<HD, NT>(sQ, L::LD, kRows, q_base, ld3, q0, Tq, tid);
    load_rows<HD, NT>(sdO, L::LD, kRows, do_base, (size_t)C, q0, Tq, tid);
  });
  const int n_kt = flash::key_tiles_for(q0, kRows, BK, sp);
  for (int kt = 0; kt < n_kt; kt++) {
    const int k0 = kt * BK;
    blk.barrier();  // the previous iteration's readers of sK, sV, sKt are done (first time: sQ, sdO complete)
    blk.each([&](int tid, Regs& r) {
      load_rows<HD, NT>(sK, L::LD, BK, kv_base + C, ld3, k0, sp.keys_seen(), tid);
      load_rows<HD, NT>(sV, L::LD, BK, kv_base + 2 * C, ld3, k0, sp.keys_seen(), tid);
      zero_acc(r.s);
      zero_acc(r.dp);
    });
    blk.barrier();  // sK, sV complete
    // K transposed for dQ (read after the barrier below), while the score mmas read sK
    blk.each([&](int tid, Regs&) { transpose_tile<HD, NT>(sKt, L::LDT, sK, L::LD, BK, tid); });
    // S = Q K^T, dP = dO V^T: A = the warp's 16 rows of sQ, sdO; B[d][key] = sK[key][d], sV[key][d]
    score_tile_pair<HD, NS>(blk, sQ, sdO, sK, sV, L::LD);
    // dS = P (dP - D) scale with P = exp(S scale - lse) where key <= q_pos + query, query < Tq, key < Tk (else 0), in
    // place of S
    blk.each([&](int tid, Regs& r) {
      const int lane = tid & 31, row0 = q0 + 16 * (tid >> 5);
      CAIRN_FA_UNROLL
      for (int nt = 0; nt < NS; nt++) {
        CAIRN_FA_UNROLL
        for (int i = 0; i < 4; i++) {
          const int qi = row0 + c_row(lane, i), kj = k0 + 8 * nt + c_col(lane, i);
          const bool valid = qi < Tq && kj <= sp.q_pos + qi && kj < Tk;
          const float p = valid ? expf(r.s[nt][i] * scale - r.lse[i >> 1]) : 0.0f;
          r.s[nt][i] = p * (r.dp[nt][i] - r.delta[i >> 1]) * scale;
        }
      }
    });
    blk.barrier();  // sKt complete
    // dQ += dS K: B[key][d] = sKt[d][key]
    CAIRN_FA_UNROLL
    for (int ks = 0; ks < BK / 16; ks++) {
      blk.each([&](int, Regs& r) { acc_to_a(r.a, r.s[2 * ks], r.s[2 * ks + 1]); });
      CAIRN_FA_UNROLL
      for (int nt = 0; nt < NO; nt++)
        blk.mma([&](int tid, Regs& r) { return mma_op(r.dq[nt], r.a, sKt, L::LDT, 8 * nt, 16 * ks, tid & 31); });
    }
  }
  blk.each([&](int tid, Regs& r) {
    const int lane = tid & 31, row0 = q0 + 16 * (tid >> 5);
    CAIRN_FA_UNROLL
    for (int x = 0; x < 2; x++) {
      const int qi = row0 + c_row(lane, 2 * x);
      if (qi >= Tq) continue;
      float* row = dq_qkv + ((size_t)b * Tq + qi) * ld3 + (size_t)h * HD;
      CAIRN_FA_UNROLL
      for (int nt = 0; nt < NO; nt++) {
        const int d = 8 * nt + c_col(lane, 2 * x);
        row[d] = r.dq[nt][2 * x];
        row[d + 1] = r.dq[nt][2 * x + 1];
      }
    }
  });
}

}  // namespace cairn::kernels::flash_bf16
