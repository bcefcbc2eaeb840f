// Tiled causal flash attention (FlashAttention-2 scheme, fp32), written once for two executors: the CUDA kernels in
// flash_attention.cu run each block with one thread per `tid` and __syncthreads() at every barrier(), and the host
// emulation (kernels/emulation/flash_host.h) runs every phase for all 128 tids in turn (barriers fall between
// phases), so the CPU test tests/kernels/kernels_flash_emulation_test.cpp checks exactly the tile loops, causal tile
// skipping, tail masks, online softmax and index math that the GPU runs. This header holds only the block code.
//
// Thread layout: 128 threads = 8 thread rows (ty = tid / 16) x 16 thread columns (tx = tid % 16); the 16 threads of
// a thread row are one half-warp, so row reductions are 16-lane shuffles. A thread owns the tile rows ty + 8 i
// (i < R) and the tile columns tx + 16 j (j < CC) of a score tile, and the head-dim columns tx + 16 c (c < HD / 16)
// of its accumulators. Inner loops read shared memory 4 floats at a time (float4, 16-byte aligned) along the
// reduction dimension: shared tiles are stored [rows][HD + 4] (16 different rows read by a quarter-warp then fall in
// different 4-bank groups) and score tiles [rows][cols + pad] with (cols + pad) % 32 == 16 (the two half-warps of a
// warp then hit disjoint banks). Head dims are zero-padded to 32, 64 or 128 (zeros change no dot product).
//
// Forward, per (b, h, query tile of BQ rows): Q tile in shared memory; for each key tile at or below the diagonal
// (later tiles are skipped: key_tiles_for): load K, V; S = Q K^T scale, masked where key > query or key >= T;
// online softmax (running row max m and sum l, the accumulator rescaled by exp(m_old - m_new)); P to shared memory;
// O += P V. Out = O / l, lse = m + log l.
// Backward (D = rowsum(dO o O) first, flash_attention.cu): the key/value pass, per key tile, loops over the query
// tiles at or after it, recomputes P = exp(S - lse), dP = dO V^T, dS = P (dP - D) scale and accumulates
// dV += P^T dO, dK += dS^T Q in registers; the query pass, per query tile, loops over key tiles like the forward and
// accumulates dQ += dS K. No atomics: every output element has one owner thread, so results are deterministic.
// Every kernel takes a Span (below): the plain ops are the square causal case; the block ops of context parallelism
// shift the diagonal by q_pos (key > q_pos + query is masked) and read queries and keys from separate buffers.
#pragma once
#include <math.h>
#include <stddef.h>

#ifdef __CUDACC__
#define CAIRN_FA_FN __device__ __forceinline__
#define CAIRN_FA_HD __host__ __device__ inline  // also called by the host launchers
#define CAIRN_FA_UNROLL _Pragma("unroll")
#define CAIRN_FA_UNROLL2 _Pragma("unroll 2")
#else
#include <cstdint>
#include <stdexcept>
#define CAIRN_FA_FN inline
#define CAIRN_FA_HD inline
#define CAIRN_FA_UNROLL
#define CAIRN_FA_UNROLL2
#endif

namespace cairn::kernels::flash {

constexpr int kThreads = 128;

// One attention call: qkv [B,T,3C] (q | k | v, head h owning columns h*hd..), out/dout [B,T,C], lse/D [B,NH,T].
struct Problem {
  int B, T, C, NH, hd;
  float scale;  // 1 / sqrt(hd)
};

// The Problem of one call, for P = flash::Problem or flash_bf16::Problem (the same fields). Host code.
template <class P>
inline P problem_for(int B, int T, int C, int NH) {
  const int hd = C / NH;
  return P{B, T, C, NH, hd, 1.0f / sqrtf((float)hd)};
}

// The head dims these kernels handle, zero-padded to an instantiated size; 0: not handled (the caller falls back).
constexpr int padded_head_dim(int hd) { return hd <= 0 ? 0 : hd <= 32 ? 32 : hd <= 64 ? 64 : hd <= 128 ? 128 : 0; }

// Row stride of a score tile with `cols` columns (a multiple of 16): stride % 32 == 16.
constexpr int score_ld(int cols) { return cols % 32 == 0 ? cols + 16 : cols; }

// Tile shapes per padded head dim. R = tile rows per thread (tile rows 8 R), CC/CQ = tile columns per thread (tile
// columns 16 CC). Sized so accumulators stay in registers (<= 64 floats per thread) and shared memory stays under
// 80 KB (2-3 blocks per SM on A100/H100).
template <int HD>
struct Config;
template <>
struct Config<32> {
  static constexpr int fwd_R = 8, fwd_CC = 4, kv_R = 8, kv_CQ = 2, q_R = 8, q_CC = 2;
};
template <>
struct Config<64> {
  static constexpr int fwd_R = 8, fwd_CC = 4, kv_R = 8, kv_CQ = 2, q_R = 8, q_CC = 2;
};
template <>
struct Config<128> {
  static constexpr int fwd_R = 8, fwd_CC = 2, kv_R = 4, kv_CQ = 2, q_R = 4, q_CC = 2;
};

// Shared-memory layouts (offsets in floats, all multiples of 4: every tile starts 16-byte aligned).
template <int HD, int R, int CC>
struct FwdLayout {
  static constexpr int BQ = 8 * R, BK = 16 * CC, LD = HD + 4, LDP = score_ld(BK);
  static constexpr int q = 0, k = q + BQ * LD, v = k + BK * LD, p = v + BK * LD, floats = p + BQ * LDP;
};
template <int HD, int R, int CQ>
struct KvLayout {  // rows are keys (8 R per block), columns queries (16 CQ per query tile)
  static constexpr int BK = 8 * R, BQ = 16 * CQ, LD = HD + 4, LDP = score_ld(BQ);
  static constexpr int k = 0, v = k + BK * LD, q = v + BK * LD, dout = q + BQ * LD, p = dout + BQ * LD,
                       ds = p + BK * LDP, lse = ds + BK * LDP, delta = lse + BQ, floats = delta + BQ;
};
template <int HD, int R, int CC>
struct QLayout {  // rows are queries (8 R per block), columns keys (16 CC per key tile)
  static constexpr int BQ = 8 * R, BK = 16 * CC, LD = HD + 4, LDP = score_ld(BK);
  static constexpr int q = 0, dout = q + BQ * LD, k = dout + BQ * LD, v = k + BK * LD, ds = v + BK * LD,
                       floats = ds + BQ * LDP;
};

// Per-thread registers of each kernel.
template <int R, int CC, int DC>
struct FwdRegs {
  float o[R][DC];
  float s[R][CC];
  float m[R], l[R], red[R];
};
template <int R, int CQ, int DC>
struct KvRegs {
  float dk[R][DC], dv[R][DC];
  float s[R][CQ], dp[R][CQ];
};
template <int R, int CC, int DC>
struct QRegs {
  float dq[R][DC];
  float s[R][CC], dp[R][CC];
  float lse[R], delta[R];
};

// Four consecutive floats of shared memory (p 16-byte aligned): one 128-bit load on the device; the host emulation
// checks the alignment the device needs.
struct F4 {
  float x, y, z, w;
};
CAIRN_FA_FN F4 load4(const float* p) {
#ifdef __CUDACC__
  const float4 v = *reinterpret_cast<const float4*>(p);
  return F4{v.x, v.y, v.z, v.w};
#else
  if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0) throw std::logic_error("flash attention: misaligned float4 load");
  return F4{p[0], p[1], p[2], p[3]};
#endif
}
// a + x.x y.x + x.y y.y + x.z y.z + x.w y.w, in that order (the same order as four scalar steps)
CAIRN_FA_FN float dot4(float a, const F4& x, const F4& y) {
  a += x.x * y.x;
  a += x.y * y.y;
  a += x.z * y.z;
  a += x.w * y.w;
  return a;
}

// The two score tiles of the backward passes in one sweep over the head dim: s[i][j] = a[row i] . b[col j] and
// dp[i][j] = a2[row i] . b2[col j], for the thread's tile rows ty + 8 i of (a, a2) and tile columns tx + 16 j of
// (b, b2), every operand a shared tile with row stride ld. The key/value pass calls it with keys as rows
// (S^T = K Q^T, dP^T = V dO^T), the query pass with queries as rows (S = Q K^T, dP = dO V^T).
template <int HD, int R, int CC>
CAIRN_FA_FN void score_tile_pair(float (&s)[R][CC], float (&dp)[R][CC], const float* a, const float* a2, const float* b,
                                 const float* b2, int ld, int ty, int tx) {
  CAIRN_FA_UNROLL
  for (int i = 0; i < R; i++) {
    CAIRN_FA_UNROLL
    for (int j = 0; j < CC; j++) s[i][j] = dp[i][j] = 0.0f;
  }
  CAIRN_FA_UNROLL2
  for (int d = 0; d < HD; d += 4) {
    F4 bv[CC], b2v[CC];
    CAIRN_FA_UNROLL
    for (int j = 0; j < CC; j++) {
      bv[j] = load4(b + (tx + 16 * j) * ld + d);
      b2v[j] = load4(b2 + (tx + 16 * j) * ld + d);
    }
    CAIRN_FA_UNROLL
    for (int i = 0; i < R; i++) {
      const F4 av = load4(a + (ty + 8 * i) * ld + d), a2v = load4(a2 + (ty + 8 * i) * ld + d);
      CAIRN_FA_UNROLL
      for (int j = 0; j < CC; j++) {
        s[i][j] = dot4(s[i][j], av, bv[j]);
        dp[i][j] = dot4(dp[i][j], a2v, b2v[j]);
      }
    }
  }
}

// acc[i][c] += P[row ty + 8 i][0..K) . M[0..K)[column tx + 16 c]: a score tile (row stride ldp) times the rows of a
// shared tile (row stride ld), K a multiple of 4. The forward's O += P V and the query pass's dQ += dS K.
template <int R, int DC, int K>
CAIRN_FA_FN void accumulate_scores_times_tile(float (&acc)[R][DC], const float* p, int ldp, const float* m, int ld,
                                              int ty, int tx) {
  CAIRN_FA_UNROLL2
  for (int kc = 0; kc < K; kc += 4) {
    F4 mv[DC];  // M[kc..kc+3][tx + 16 c]
    CAIRN_FA_UNROLL
    for (int c = 0; c < DC; c++) {
      const float* col = m + kc * ld + tx + 16 * c;
      mv[c] = F4{col[0], col[ld], col[2 * ld], col[3 * ld]};
    }
    CAIRN_FA_UNROLL
    for (int i = 0; i < R; i++) {
      const F4 pv = load4(p + (ty + 8 * i) * ldp + kc);
      CAIRN_FA_UNROLL
      for (int c = 0; c < DC; c++) acc[i][c] = dot4(acc[i][c], pv, mv[c]);
    }
  }
}

// Rows [row0, row0 + rows) of one head's slice of a [*, T, ld] tensor into dst[rows][dst_ld]; rows >= T and columns
// >= hd are written as 0 (never read from global memory), so tails need no other special case.
template <int HD>
CAIRN_FA_FN void load_tile(float* dst, int dst_ld, int rows, const float* src, size_t src_ld, int row0, int T, int hd,
                           int tid) {
  for (int idx = tid; idx < rows * HD; idx += kThreads) {
    const int r = idx / HD, d = idx % HD, t = row0 + r;
    dst[r * dst_ld + d] = (t < T && d < hd) ? src[(size_t)t * src_ld + d] : 0.0f;
  }
}

// Key tiles of BK keys a query tile [q0, q0 + BQ) needs under the causal mask (later tiles are all masked).
CAIRN_FA_FN int key_tiles_for(int q0, int BQ, int BK, int T) {
  const int last = q0 + BQ - 1 < T - 1 ? q0 + BQ - 1 : T - 1;
  return last / BK + 1;
}

// The rows of one fp32 call. The plain ops: one qkv for both sides, Tq = Tk = T, q_pos = 0, dK/dV written. The block
// ops (context parallelism, the Backend's attention_*_block): Tq queries (rows of q_qkv and of dq_qkv, out, dout,
// lse, D) at positions q_pos.. counted from the first of Tk keys (rows of kv_qkv and dkv_qkv); query i sees keys
// 0 .. min(q_pos + i, Tk - 1), and dK/dV are added to dkv_qkv. Key rows no query sees (from keys_seen() on) are
// never read: tiles load them as zeros, like rows past T.
struct Span {
  int Tq, Tk, q_pos;
  bool accumulate_kv;
  // Keys some query sees: 0 .. keys_seen() - 1 (the dK/dV rows a call touches).
  CAIRN_FA_HD int keys_seen() const { return q_pos + Tq < Tk ? q_pos + Tq : Tk; }
};
CAIRN_FA_HD Span square_span(int T) { return Span{T, T, 0, false}; }

// Key tiles a query tile [q0, q0 + BQ) of a Span needs: up to the last key its last query sees.
CAIRN_FA_FN int key_tiles_for(int q0, int BQ, int BK, const Span& sp) {
  const int last_q = q0 + BQ - 1 < sp.Tq - 1 ? q0 + BQ - 1 : sp.Tq - 1;
  const int last_k = sp.q_pos + last_q < sp.Tk - 1 ? sp.q_pos + last_q : sp.Tk - 1;
  return last_k / BK + 1;
}

// ---------------------------------------------------------------- forward
// One block: query tile qt of head (b, h). Writes out rows and lse of the tile's rows < Tq.
template <int HD, int R, int CC, class Block>
CAIRN_FA_FN void forward_block(Block& blk, float* smem, float* out, float* lse, const float* q_qkv, const float* kv_qkv,
                               const Problem& pb, const Span& sp, int b, int h, int qt) {
  using L = FwdLayout<HD, R, CC>;
  constexpr int DC = HD / 16;
  using Regs = FwdRegs<R, CC, DC>;
  float* sQ = smem + L::q;
  float* sK = smem + L::k;
  float* sV = smem + L::v;
  float* sP = smem + L::p;
  const int Tq = sp.Tq, Tk = sp.Tk, C = pb.C, hd = pb.hd;
  const float scale = pb.scale;
  const size_t ld3 = (size_t)3 * C;
  const float* q_base = q_qkv + (size_t)b * Tq * ld3 + (size_t)h * hd;
  const float* kv_base = kv_qkv + (size_t)b * Tk * ld3 + (size_t)h * hd;
  const int q0 = qt * L::BQ;

  blk.each([&](int tid, Regs& r) {
    CAIRN_FA_UNROLL
    for (int i = 0; i < R; i++) {
      r.m[i] = -INFINITY;
      r.l[i] = 0.0f;
      CAIRN_FA_UNROLL
      for (int c = 0; c < DC; c++) r.o[i][c] = 0.0f;
    }
    load_tile<HD>(sQ, L::LD, L::BQ, q_base, ld3, q0, Tq, hd, tid);
  });
  const int n_kt = key_tiles_for(q0, L::BQ, L::BK, sp);
  for (int kt = 0; kt < n_kt; kt++) {
    const int k0 = kt * L::BK;
    blk.barrier();  // the previous iteration's readers of sK, sV, sP are done (first time: sQ is complete)
    blk.each([&](int tid, Regs&) {
      load_tile<HD>(sK, L::LD, L::BK, kv_base + C, ld3, k0, sp.keys_seen(), hd, tid);
      load_tile<HD>(sV, L::LD, L::BK, kv_base + 2 * C, ld3, k0, sp.keys_seen(), hd, tid);
    });
    blk.barrier();
    // S = Q K^T * scale, masked; the thread's part of each row max
    blk.each([&](int tid, Regs& r) {
      const int ty = tid / 16, tx = tid % 16;
      CAIRN_FA_UNROLL
      for (int i = 0; i < R; i++) {
        CAIRN_FA_UNROLL
        for (int j = 0; j < CC; j++) r.s[i][j] = 0.0f;
      }
      CAIRN_FA_UNROLL2
      for (int d = 0; d < HD; d += 4) {
        F4 kv[CC];
        CAIRN_FA_UNROLL
        for (int j = 0; j < CC; j++) kv[j] = load4(sK + (tx + 16 * j) * L::LD + d);
        CAIRN_FA_UNROLL
        for (int i = 0; i < R; i++) {
          const F4 qv = load4(sQ + (ty + 8 * i) * L::LD + d);
          CAIRN_FA_UNROLL
          for (int j = 0; j < CC; j++) r.s[i][j] = dot4(r.s[i][j], qv, kv[j]);
        }
      }
      CAIRN_FA_UNROLL
      for (int i = 0; i < R; i++) {
        const int qi = q0 + ty + 8 * i;
        float mx = -INFINITY;
        CAIRN_FA_UNROLL
        for (int j = 0; j < CC; j++) {
          const int kj = k0 + tx + 16 * j;
          const float s = (kj > sp.q_pos + qi || kj >= Tk) ? -INFINITY : r.s[i][j] * scale;
          r.s[i][j] = s;
          mx = fmaxf(mx, s);
        }
        r.red[i] = mx;
      }
    });
    blk.template reduce<16, R, true>([](Regs& r) { return r.red; });  // red = the tile's row max
    // online softmax: P = exp(S - m_new) into shared memory, rescale the accumulator and the running sum
    blk.each([&](int tid, Regs& r) {
      const int ty = tid / 16, tx = tid % 16;
      CAIRN_FA_UNROLL
      for (int i = 0; i < R; i++) {
        const float m_new = fmaxf(r.m[i], r.red[i]);
        // Key 0 lies in key tile 0 and every query sees it, so after tile 0 each row's max is finite; the guard keeps
        // a row that had no unmasked score yet at exp(-inf) = 0 instead of exp(-inf - -inf) = NaN.
        const float m_use = m_new == -INFINITY ? 0.0f : m_new;
        const float corr = expf(r.m[i] - m_use);
        float sum = 0.0f;
        CAIRN_FA_UNROLL
        for (int j = 0; j < CC; j++) {
          const float p = expf(r.s[i][j] - m_use);
          sP[(ty + 8 * i) * L::LDP + tx + 16 * j] = p;
          sum += p;
        }
        CAIRN_FA_UNROLL
        for (int c = 0; c < DC; c++) r.o[i][c] *= corr;
        r.l[i] *= corr;
        r.m[i] = m_new;
        r.red[i] = sum;
      }
    });
    blk.template reduce<16, R, false>([](Regs& r) { return r.red; });  // red = the tile's row sum of P
    blk.barrier();                                                     // sP complete
    // O += P V
    blk.each([&](int tid, Regs& r) {
      const int ty = tid / 16, tx = tid % 16;
      CAIRN_FA_UNROLL
      for (int i = 0; i < R; i++) r.l[i] += r.red[i];
      accumulate_scores_times_tile<R, DC, L::BK>(r.o, sP, L::LDP, sV, L::LD, ty, tx);
    });
  }
  blk.each([&](int tid, Regs& r) {
    const int ty = tid / 16, tx = tid % 16;
    CAIRN_FA_UNROLL
    for (int i = 0; i < R; i++) {
      const int qi = q0 + ty + 8 * i;
      if (qi >= Tq) continue;
      float* dst = out + ((size_t)b * Tq + qi) * C + (size_t)h * hd;
      CAIRN_FA_UNROLL
      for (int c = 0; c < DC; c++) {
        const int d = tx + 16 * c;
        if (d < hd) dst[d] = r.o[i][c] / r.l[i];
      }
      if (tx == 0) lse[((size_t)b * pb.NH + h) * Tq + qi] = r.m[i] + logf(r.l[i]);
    }
  });
}

// One head's slices of a backward call's inputs: the query side (q columns of q_qkv, row stride ld3; dO, row stride
// C; the head's lse and D rows: Tq rows) and the key side (k and v columns of kv_qkv at kv + C, kv + 2C: Tk rows).
struct BackwardHead {
  size_t ld3;
  const float *q, *kv, *dout, *lse, *delta;
};
template <class P>  // flash::Problem or flash_bf16::Problem
CAIRN_FA_FN BackwardHead span_head(const P& pb, const Span& sp, const float* q_qkv, const float* kv_qkv,
                                   const float* dout, const float* lse, const float* delta, int b, int h) {
  const size_t ld3 = (size_t)3 * pb.C, col = (size_t)h * pb.hd, row = ((size_t)b * pb.NH + h) * sp.Tq;
  return BackwardHead{ld3,
                      q_qkv + (size_t)b * sp.Tq * ld3 + col,
                      kv_qkv + (size_t)b * sp.Tk * ld3 + col,
                      dout + (size_t)b * sp.Tq * pb.C + col,
                      lse + row,
                      delta + row};
}

// ---------------------------------------------------------------- backward: dK, dV
// One block: key tile kt of head (b, h); writes (or, accumulate_kv, adds to) the dK and dV columns of the tile's key
// rows < keys_seen() in dkv_qkv.
template <int HD, int R, int CQ, class Block>
CAIRN_FA_FN void backward_kv_block(Block& blk, float* smem, float* dkv_qkv, const float* dout, const float* q_qkv,
                                   const float* kv_qkv, const float* lse, const float* delta, const Problem& pb,
                                   const Span& sp, int b, int h, int kt) {
  using L = KvLayout<HD, R, CQ>;
  constexpr int DC = HD / 16;
  using Regs = KvRegs<R, CQ, DC>;
  float* sK = smem + L::k;
  float* sV = smem + L::v;
  float* sQ = smem + L::q;
  float* sdO = smem + L::dout;
  float* sP = smem + L::p;
  float* sdS = smem + L::ds;
  float* sLse = smem + L::lse;
  float* sD = smem + L::delta;
  const int Tq = sp.Tq, Tk = sp.Tk, C = pb.C, hd = pb.hd;
  const float scale = pb.scale;
  const BackwardHead head = span_head(pb, sp, q_qkv, kv_qkv, dout, lse, delta, b, h);
  const size_t ld3 = head.ld3;
  const float *q_base = head.q, *kv_base = head.kv, *do_base = head.dout, *lse_row = head.lse, *d_row = head.delta;
  const int k0 = kt * L::BK;

  blk.each([&](int tid, Regs& r) {
    CAIRN_FA_UNROLL
    for (int i = 0; i < R; i++) {
      CAIRN_FA_UNROLL
      for (int c = 0; c < DC; c++) r.dk[i][c] = r.dv[i][c] = 0.0f;
    }
    load_tile<HD>(sK, L::LD, L::BK, kv_base + C, ld3, k0, sp.keys_seen(), hd, tid);
    load_tile<HD>(sV, L::LD, L::BK, kv_base + 2 * C, ld3, k0, sp.keys_seen(), hd, tid);
  });
  const int n_qt = (Tq + L::BQ - 1) / L::BQ;
  // query tiles entirely above the diagonal (every query before k0 - q_pos) see none of these keys: start at the tile
  // holding the first query that sees key k0
  for (int qt = (k0 - sp.q_pos > 0 ? k0 - sp.q_pos : 0) / L::BQ; qt < n_qt; qt++) {
    const int q0 = qt * L::BQ;
    blk.barrier();  // the previous iteration's readers of sQ, sdO, sP, sdS are done (first time: sK, sV complete)
    blk.each([&](int tid, Regs&) {
      load_tile<HD>(sQ, L::LD, L::BQ, q_base, ld3, q0, Tq, hd, tid);
      load_tile<HD>(sdO, L::LD, L::BQ, do_base, (size_t)C, q0, Tq, hd, tid);
      for (int idx = tid; idx < L::BQ; idx += kThreads) {
        const int t = q0 + idx;
        sLse[idx] = t < Tq ? lse_row[t] : 0.0f;
        sD[idx] = t < Tq ? d_row[t] : 0.0f;
      }
    });
    blk.barrier();
    // S^T = K Q^T, dP^T = V dO^T; P = exp(S scale - lse), dS = P (dP - D) scale, both into shared memory
    blk.each([&](int tid, Regs& r) {
      const int ty = tid / 16, tx = tid % 16;
      score_tile_pair<HD, R, CQ>(r.s, r.dp, sK, sV, sQ, sdO, L::LD, ty, tx);
      CAIRN_FA_UNROLL
      for (int i = 0; i < R; i++) {
        const int kj = k0 + ty + 8 * i;
        CAIRN_FA_UNROLL
        for (int j = 0; j < CQ; j++) {
          const int qc = tx + 16 * j, qi = q0 + qc;
          const bool valid = qi < Tq && kj <= sp.q_pos + qi && kj < Tk;
          const float p = valid ? expf(r.s[i][j] * scale - sLse[qc]) : 0.0f;
          sP[(ty + 8 * i) * L::LDP + qc] = p;
          sdS[(ty + 8 * i) * L::LDP + qc] = p * (r.dp[i][j] - sD[qc]) * scale;
        }
      }
    });
    blk.barrier();  // sP, sdS complete
    // dV += P^T dO, dK += dS^T Q
    blk.each([&](int tid, Regs& r) {
      const int ty = tid / 16, tx = tid % 16;
      CAIRN_FA_UNROLL2
      for (int qc = 0; qc < L::BQ; qc += 4) {
        F4 ov[DC], qv[DC];  // dO, Q [qc..qc+3][tx + 16 c]
        CAIRN_FA_UNROLL
        for (int c = 0; c < DC; c++) {
          const float* o = sdO + qc * L::LD + tx + 16 * c;
          const float* q = sQ + qc * L::LD + tx + 16 * c;
          ov[c] = F4{o[0], o[L::LD], o[2 * L::LD], o[3 * L::LD]};
          qv[c] = F4{q[0], q[L::LD], q[2 * L::LD], q[3 * L::LD]};
        }
        CAIRN_FA_UNROLL
        for (int i = 0; i < R; i++) {
          const F4 pv = load4(sP + (ty + 8 * i) * L::LDP + qc), dsv = load4(sdS + (ty + 8 * i) * L::LDP + qc);
          CAIRN_FA_UNROLL
          for (int c = 0; c < DC; c++) {
            r.dv[i][c] = dot4(r.dv[i][c], pv, ov[c]);
            r.dk[i][c] = dot4(r.dk[i][c], dsv, qv[c]);
          }
        }
      }
    });
  }
  blk.each([&](int tid, Regs& r) {
    const int ty = tid / 16, tx = tid % 16;
    CAIRN_FA_UNROLL
    for (int i = 0; i < R; i++) {
      const int kj = k0 + ty + 8 * i;
      if (kj >= sp.keys_seen()) continue;
      float* row = dkv_qkv + ((size_t)b * Tk + kj) * ld3 + (size_t)h * hd;
      CAIRN_FA_UNROLL
      for (int c = 0; c < DC; c++) {
        const int d = tx + 16 * c;
        if (d < hd) {
          row[C + d] = sp.accumulate_kv ? row[C + d] + r.dk[i][c] : r.dk[i][c];
          row[2 * C + d] = sp.accumulate_kv ? row[2 * C + d] + r.dv[i][c] : r.dv[i][c];
        }
      }
    }
  });
}

// ---------------------------------------------------------------- backward: dQ
// One block: query tile qt of head (b, h); writes the dQ columns of the tile's query rows < Tq in dq_qkv.
template <int HD, int R, int CC, class Block>
CAIRN_FA_FN void backward_q_block(Block& blk, float* smem, float* dq_qkv, const float* dout, const float* q_qkv,
                                  const float* kv_qkv, const float* lse, const float* delta, const Problem& pb,
                                  const Span& sp, int b, int h, int qt) {
  using L = QLayout<HD, R, CC>;
  constexpr int DC = HD / 16;
  using Regs = QRegs<R, CC, DC>;
  float* sQ = smem + L::q;
  float* sdO = smem + L::dout;
  float* sK = smem + L::k;
  float* sV = smem + L::v;
  float* sdS = smem + L::ds;
  const int Tq = sp.Tq, Tk = sp.Tk, C = pb.C, hd = pb.hd;
  const float scale = pb.scale;
  const BackwardHead head = span_head(pb, sp, q_qkv, kv_qkv, dout, lse, delta, b, h);
  const size_t ld3 = head.ld3;
  const float *q_base = head.q, *kv_base = head.kv, *do_base = head.dout, *lse_row = head.lse, *d_row = head.delta;
  const int q0 = qt * L::BQ;

  blk.each([&](int tid, Regs& r) {
    const int ty = tid / 16;
    CAIRN_FA_UNROLL
    for (int i = 0; i < R; i++) {
      const int qi = q0 + ty + 8 * i;
      r.lse[i] = qi < Tq ? lse_row[qi] : 0.0f;
      r.delta[i] = qi < Tq ? d_row[qi] : 0.0f;
      CAIRN_FA_UNROLL
      for (int c = 0; c < DC; c++) r.dq[i][c] = 0.0f;
    }
    load_tile<HD>(sQ, L::LD, L::BQ, q_base, ld3, q0, Tq, hd, tid);
    load_tile<HD>(sdO, L::LD, L::BQ, do_base, (size_t)C, q0, Tq, hd, tid);
  });
  const int n_kt = key_tiles_for(q0, L::BQ, L::BK, sp);
  for (int kt = 0; kt < n_kt; kt++) {
    const int k0 = kt * L::BK;
    blk.barrier();  // the previous iteration's readers of sK, sdS are done (first time: sQ, sdO complete)
    blk.each([&](int tid, Regs&) {
      load_tile<HD>(sK, L::LD, L::BK, kv_base + C, ld3, k0, sp.keys_seen(), hd, tid);
      load_tile<HD>(sV, L::LD, L::BK, kv_base + 2 * C, ld3, k0, sp.keys_seen(), hd, tid);
    });
    blk.barrier();
    // S = Q K^T, dP = dO V^T; dS = P (dP - D) scale into shared memory
    blk.each([&](int tid, Regs& r) {
      const int ty = tid / 16, tx = tid % 16;
      score_tile_pair<HD, R, CC>(r.s, r.dp, sQ, sdO, sK, sV, L::LD, ty, tx);
      CAIRN_FA_UNROLL
      for (int i = 0; i < R; i++) {
        const int qi = q0 + ty + 8 * i;
        CAIRN_FA_UNROLL
        for (int j = 0; j < CC; j++) {
          const int kj = k0 + tx + 16 * j;
          const bool valid = qi < Tq && kj <= sp.q_pos + qi && kj < Tk;
          const float p = valid ? expf(r.s[i][j] * scale - r.lse[i]) : 0.0f;
          sdS[(ty + 8 * i) * L::LDP + tx + 16 * j] = p * (r.dp[i][j] - r.delta[i]) * scale;
        }
      }
    });
    blk.barrier();  // sdS complete
    // dQ += dS K
    blk.each([&](int tid, Regs& r) {
      const int ty = tid / 16, tx = tid % 16;
      accumulate_scores_times_tile<R, DC, L::BK>(r.dq, sdS, L::LDP, sK, L::LD, ty, tx);
    });
  }
  blk.each([&](int tid, Regs& r) {
    const int ty = tid / 16, tx = tid % 16;
    CAIRN_FA_UNROLL
    for (int i = 0; i < R; i++) {
      const int qi = q0 + ty + 8 * i;
      if (qi >= Tq) continue;
      float* row = dq_qkv + ((size_t)b * Tq + qi) * ld3 + (size_t)h * hd;
      CAIRN_FA_UNROLL
      for (int c = 0; c < DC; c++) {
        const int d = tx + 16 * c;
        if (d < hd) row[d] = r.dq[i][c];
      }
    }
  });
}

}  // namespace cairn::kernels::flash
