// Checks the bf16 tensor-core flash attention (kernels/cuda/flash_attention_bf16_tiles.h) on the CPU: the host executor
// (kernels/emulation/flash_bf16_host.h) runs the kernels' block code tid by tid and emulates each warp's
// mma.sync.m16n8k16 from the PTX ISA's fragment layout, so this test checks the tiling, causal tile skipping, tail
// masks, online softmax, fragment bookkeeping (fragment loads from shared memory, accumulator -> A-fragment reuse, the
// C layout of every output and mask) and index math without a GPU. It cannot check that the hardware's fragment layout
// is the transcribed one (kernels_cuda compares the GPU with this emulation for that).
// Tolerances (ops_checks.h: relative plus a tensor-scaled floor):
//  - tight, 1e-2: against the reference run on the same bf16-rounded q, k, v, dO, so the errors left are the bf16
//    rounding of P (forward) and of P, dS (backward) as mma inputs (2^-9 relative each, averaged over a row);
//  - loose, 3e-2: against the fp32 reference on the unrounded inputs (the bf16 rounding of q, k, v, dO as well),
//    like the bf16 matmuls' 2e-2 in kernels_cuda plus the softmax's amplification of score errors.
// Measured worst errors are printed with --log_level=message. Also: every output element is written (outputs start
// as NaN; registers and shared memory are NaN-poisoned by the emulator), the reverse thread order gives bitwise the
// same result, the forward rounds every input on load (rounded and unrounded inputs give bitwise equal outputs), and
// the emulator's shared-memory race checker finds no access of another thread's data without a barrier in between
// (each of the kernels' barriers, removed, was caught). The block ops of context parallelism (a flash::Span: Tq
// queries at q_pos against Tk keys, dK/dV accumulated) pass ops_checks.h's block checks and agree with the reference
// on bf16-rounded inputs over several tiles, in both thread orders.
#define BOOST_TEST_MODULE kernels_flash_bf16_emulation
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../../kernels/emulation/flash_bf16_host.h"
#include "ops_checks.h"

using namespace ops_checks;
namespace fb = cairn::kernels::flash_bf16;

namespace {
constexpr double kTight = 4e-3, kLoose = 2e-2, kTightLse = 1e-5;
const float kNaN = std::numeric_limits<float>::quiet_NaN();

using Shape = AttentionShape;

std::vector<float> rounded(std::vector<float> v) {
  for (auto& x : v) x = fb::round_bf16(x);
  return v;
}

struct Result {
  std::vector<float> out, lse, dqkv;
};

Result reference(const Shape& s, const std::vector<float>& qkv, const std::vector<float>& dout) {
  Result r{std::vector<float>((size_t)s.B * s.T * s.C), std::vector<float>((size_t)s.B * s.NH * s.T),
           std::vector<float>(qkv.size())};
  ref().attention_forward(r.out.data(), r.lse.data(), qkv.data(), s.B, s.T, s.C, s.NH);
  ref().attention_backward(r.dqkv.data(), dout.data(), qkv.data(), r.out.data(), r.lse.data(), s.B, s.T, s.C, s.NH);
  return r;
}

// The backward runs from the reference's out and lse (as the GPU test does), so it is checked on its own.
Result emulate(const Shape& s, const std::vector<float>& qkv, const std::vector<float>& dout, const Result& ref_fwd,
               bool reverse) {
  Result r{std::vector<float>((size_t)s.B * s.T * s.C, kNaN), std::vector<float>((size_t)s.B * s.NH * s.T, kNaN),
           std::vector<float>(qkv.size(), kNaN)};
  BOOST_REQUIRE_MESSAGE(fb::emulate_forward(r.out.data(), r.lse.data(), qkv.data(), s.B, s.T, s.C, s.NH, reverse),
                        "bf16 flash forward declined " << describe(s));
  BOOST_REQUIRE_MESSAGE(fb::emulate_backward(r.dqkv.data(), dout.data(), qkv.data(), ref_fwd.out.data(),
                                             ref_fwd.lse.data(), s.B, s.T, s.C, s.NH, reverse),
                        "bf16 flash backward declined " << describe(s));
  return r;
}

void check_shape(const Shape& s, uint32_t seed) {
  const auto qkv = randn((size_t)s.B * s.T * 3 * s.C, seed, 1.5f);
  const auto dout = randn((size_t)s.B * s.T * s.C, seed + 1);
  const auto qkv_r = rounded(qkv), dout_r = rounded(dout);
  const Result ref_r = reference(s, qkv_r, dout_r), ref_f = reference(s, qkv, dout);
  const Result got_r = emulate(s, qkv_r, dout_r, ref_r, false);
  check_close(got_r.out, ref_r.out, "bf16 out (rounded inputs) " + describe(s), kTight);
  check_close(got_r.lse, ref_r.lse, "bf16 lse (rounded inputs) " + describe(s), kTightLse);
  check_close(got_r.dqkv, ref_r.dqkv, "bf16 dqkv (rounded inputs) " + describe(s), kTight);
  const Result got_f = emulate(s, qkv, dout, ref_f, false);
  check_close(got_f.out, ref_f.out, "bf16 out vs fp32 " + describe(s), kLoose);
  check_close(got_f.lse, ref_f.lse, "bf16 lse vs fp32 " + describe(s), kLoose);
  check_close(got_f.dqkv, ref_f.dqkv, "bf16 dqkv vs fp32 " + describe(s), kLoose);
  BOOST_CHECK_MESSAGE(got_f.out == got_r.out && got_f.lse == got_r.lse,
                      "bf16 " << describe(s) << ": the forward does not round every input to bf16 on load");
  const Result rev = emulate(s, qkv_r, dout_r, ref_r, true);
  BOOST_CHECK_MESSAGE(rev.out == got_r.out && rev.lse == got_r.lse && rev.dqkv == got_r.dqkv,
                      "bf16 " << describe(s) << ": thread order changes the result (a phase reads another thread's write)");
}
}  // namespace

// Each fragment map places the 32 lanes' elements on every matrix position exactly once.
BOOST_AUTO_TEST_CASE(fragment_maps_are_bijections) {
  int a[16][16] = {}, b[16][8] = {}, c[16][8] = {};
  for (int lane = 0; lane < 32; lane++) {
    for (int i = 0; i < 8; i++) a[fb::a_row(lane, i)][fb::a_col(lane, i)]++;
    for (int i = 0; i < 4; i++) b[fb::b_row(lane, i)][fb::b_col(lane, i)]++;
    for (int i = 0; i < 4; i++) c[fb::c_row(lane, i)][fb::c_col(lane, i)]++;
  }
  for (int r = 0; r < 16; r++)
    for (int k = 0; k < 16; k++) BOOST_TEST(a[r][k] == 1);
  for (int r = 0; r < 16; r++)
    for (int n = 0; n < 8; n++) BOOST_TEST((b[r][n] == 1 && c[r][n] == 1));
  // the element pairs packed in one register are neighbours along the reduction dimension (one 32-bit load)
  for (int lane = 0; lane < 32; lane++) {
    for (int i = 0; i < 8; i += 2)
      BOOST_TEST((fb::a_row(lane, i) == fb::a_row(lane, i + 1) && fb::a_col(lane, i) + 1 == fb::a_col(lane, i + 1)));
    for (int i = 0; i < 4; i += 2)
      BOOST_TEST((fb::b_col(lane, i) == fb::b_col(lane, i + 1) && fb::b_row(lane, i) + 1 == fb::b_row(lane, i + 1)));
  }
}

// One emulated block of warp mmas through the fragment loaders: D = A B (+ C) for a 64 x 16 (4 warps x 16 rows) A
// in a row-major bf16 tile and B stored n-major, against a plain triple loop; and the accumulator -> A fragment reuse
// (acc_to_a) carries a product on as the next mma's A operand: E = (A B) B2.
BOOST_AUTO_TEST_CASE(warp_mma_matches_matrix_product) {
  const auto av = rounded(randn(64 * 16, 7)), bv = rounded(randn(16 * 16, 8)), b2v = rounded(randn(16 * 8, 9));
  constexpr int LD = 24;  // padded row stride, as the kernels' tiles
  std::vector<uint16_t> sa(64 * LD), sb(16 * LD), sb2(8 * LD);
  for (int r = 0; r < 64; r++)
    for (int k = 0; k < 16; k++) sa[r * LD + k] = fb::bf16_bits(av[r * 16 + k]);
  for (int k = 0; k < 16; k++)
    for (int n = 0; n < 16; n++) sb[n * LD + k] = fb::bf16_bits(bv[k * 16 + n]);  // B[k][n] stored [n][k]
  for (int k = 0; k < 16; k++)
    for (int n = 0; n < 8; n++) sb2[n * LD + k] = fb::bf16_bits(b2v[k * 8 + n]);
  struct Regs {
    float d[2][4], e[4];
    uint32_t a[4];
  };
  fb::HostBlock<Regs, 4> blk(false);
  blk.each([&](int tid, Regs& r) {
    for (int i = 0; i < 4; i++) r.d[0][i] = r.d[1][i] = r.e[i] = 0.0f;
    fb::load_a(r.a, sa.data(), LD, 16 * (tid >> 5), 0, tid & 31);
  });
  for (int nt = 0; nt < 2; nt++)
    blk.mma([&](int tid, Regs& r) {
      fb::Mma m{r.d[nt], {r.a[0], r.a[1], r.a[2], r.a[3]}, {}};
      fb::load_b(m.b, sb.data(), LD, 8 * nt, 0, tid & 31);
      return m;
    });
  std::vector<float> d(64 * 16);
  blk.each([&](int tid, Regs& r) {
    for (int nt = 0; nt < 2; nt++)
      for (int i = 0; i < 4; i++) d[(16 * (tid >> 5) + fb::c_row(tid & 31, i)) * 16 + 8 * nt + fb::c_col(tid & 31, i)] =
          r.d[nt][i];
    fb::acc_to_a(r.a, r.d[0], r.d[1]);
  });
  blk.mma([&](int tid, Regs& r) {
    fb::Mma m{r.e, {r.a[0], r.a[1], r.a[2], r.a[3]}, {}};
    fb::load_b(m.b, sb2.data(), LD, 0, 0, tid & 31);
    return m;
  });
  for (int r = 0; r < 64; r++)
    for (int n = 0; n < 16; n++) {
      float want = 0.0f;
      for (int k = 0; k < 16; k++) want += av[r * 16 + k] * bv[k * 16 + n];
      BOOST_TEST(std::fabs(d[r * 16 + n] - want) <= 1e-5f * (1.0f + std::fabs(want)));
    }
  blk.each([&](int tid, Regs& r) {
    for (int i = 0; i < 4; i++) {
      const int row = 16 * (tid >> 5) + fb::c_row(tid & 31, i), col = fb::c_col(tid & 31, i);
      float want = 0.0f;  // (A B) rounded to bf16 (the A operand), times B2
      for (int k = 0; k < 16; k++) want += fb::round_bf16(d[row * 16 + k]) * b2v[k * 8 + col];
      BOOST_TEST(std::fabs(r.e[i] - want) <= 1e-5f * (1.0f + std::fabs(want)));
    }
  });
}

// The race checker itself: a read of another thread's shared-memory write needs a barrier in between.
BOOST_AUTO_TEST_CASE(race_checker_needs_barriers) {
  struct Regs {
    float x;
  };
  auto races = [](bool with_barrier) {
    fb::RaceCheckScope race;
    std::vector<fb::SmemChunk> smem(8);
    uint16_t* s = fb::poisoned(smem);
    fb::HostBlock<Regs, 1> blk(false);
    blk.each([&](int tid, Regs&) { fb::sts32(s + 2 * tid, (uint32_t)tid); });
    if (with_barrier) blk.barrier();
    try {
      blk.each([&](int tid, Regs& r) { r.x = (float)fb::lds32(s + 2 * ((tid + 1) % 32)); });
    } catch (const std::logic_error&) {
      return true;
    }
    return false;
  };
  BOOST_TEST(!races(true));
  BOOST_TEST(races(false));
}

BOOST_AUTO_TEST_CASE(bf16_rounding) {
  BOOST_TEST(fb::round_bf16(1.0f) == 1.0f);
  BOOST_TEST(fb::round_bf16(1.0f + 1.0f / 256) == 1.0f);  // halfway between 1 and 1 + 2^-7: to even (1)
  BOOST_TEST(fb::round_bf16(1.0f + 3.0f / 256) == 1.0f + 1.0f / 64);  // halfway, odd below: up
  BOOST_TEST(fb::round_bf16(-2.5e-3f) == -0.00250244140625f);
  BOOST_TEST(std::isinf(fb::round_bf16(3.4e38f)));
}

BOOST_AUTO_TEST_CASE(unsupported_head_dims_decline) {
  std::vector<float> dummy(1);
  BOOST_TEST(!fb::emulate_forward(dummy.data(), dummy.data(), dummy.data(), 1, 1, 64, 2));   // hd 32
  BOOST_TEST(!fb::emulate_forward(dummy.data(), dummy.data(), dummy.data(), 1, 1, 96, 1));   // hd 96
  BOOST_TEST(!fb::emulate_forward(dummy.data(), dummy.data(), dummy.data(), 1, 1, 100, 3));  // C % NH != 0
  BOOST_TEST(fb::head_dim_supported(64));
  BOOST_TEST(fb::head_dim_supported(128));
}

// Tiles (flash_bf16::Config): hd 64: forward and dQ 128 queries x 64 keys, dK/dV 64 keys x 64 queries; hd 128: forward
// 64 x 64, dQ 64 queries x 32 keys, dK/dV 64 keys x 32 queries.
BOOST_AUTO_TEST_CASE(head_dim_64) {
  for (auto s : {Shape{1, 1, 64, 1}, Shape{2, 15, 128, 2}, Shape{1, 64, 64, 1}, Shape{2, 65, 128, 2},
                 Shape{1, 128, 64, 1}, Shape{1, 130, 192, 3}, Shape{1, 257, 64, 1}})
    check_shape(s, 40);
}

BOOST_AUTO_TEST_CASE(head_dim_128) {
  for (auto s : {Shape{1, 1, 128, 1}, Shape{1, 31, 128, 1}, Shape{2, 33, 256, 2}, Shape{1, 97, 128, 1},
                 Shape{1, 160, 256, 2}})
    check_shape(s, 41);
}

// GPT-2's head dim at a longer sequence with a tail (several query and key tiles per head, 12 heads).
BOOST_AUTO_TEST_CASE(gpt2_heads) { check_shape(Shape{1, 300, 768, 12}, 43); }

// ---- the block ops (context parallelism): flash_attention_bf16_*_block, Tq queries at q_pos against Tk keys

namespace {
// The CUDA backend's block ops in bf16 mode, on host memory: the tensor-core kernels where they take the head dim, the
// fp32 flash kernels otherwise (attention.cu's dispatch).
void bf16_forward_block(float* out, float* lse, const float* q_qkv, const float* kv_qkv, int B, int Tq, int Tk,
                        int q_pos, int C, int NH) {
  if (!fb::emulate_forward_block(out, lse, q_qkv, kv_qkv, B, Tq, Tk, q_pos, C, NH))
    BOOST_REQUIRE(cairn::kernels::flash::emulate_forward_block(out, lse, q_qkv, kv_qkv, B, Tq, Tk, q_pos, C, NH));
}
void bf16_backward_block(float* dq_qkv, float* dkv_qkv, const float* dout, const float* q_qkv, const float* kv_qkv,
                         const float* out, const float* lse, int B, int Tq, int Tk, int q_pos, int C, int NH) {
  if (!fb::emulate_backward_block(dq_qkv, dkv_qkv, dout, q_qkv, kv_qkv, out, lse, B, Tq, Tk, q_pos, C, NH, true))
    BOOST_REQUIRE(cairn::kernels::flash::emulate_backward_block(dq_qkv, dkv_qkv, dout, q_qkv, kv_qkv, out, lse, B, Tq,
                                                                Tk, q_pos, C, NH, true));
}
const cairn::kernels::Backend& emulated_bf16_blocks() {
  static const cairn::kernels::Backend b =
      emulated_block_backend("bf16 flash emulation", bf16_forward_block, bf16_backward_block);
  return b;
}
}  // namespace

// ops_checks.h's block checks (q_pos inside, at and past the keys; unread inputs NaN-poisoned, dK/dV accumulated,
// untouched regions bitwise) through the bf16 dispatch: its hd 64 and 128 shapes run the tensor-core kernels, at the
// bf16-vs-fp32 tolerance.
BOOST_AUTO_TEST_CASE(block_ops) { check_attention_block(emulated_bf16_blocks(), kLoose); }

// The ring (cp 2 and 4: chunks of 64 and 32 tokens, blocks merged by attention_merge) at hd 64 and 128 through the
// tensor-core blocks, against the fp32 reference's whole-sequence attention.
BOOST_AUTO_TEST_CASE(ring_on_tensor_core_blocks) {
  check_attention_ring(emulated_bf16_blocks(), ref(), kLoose, 256, 128, 2);
  check_attention_ring(emulated_bf16_blocks(), ref(), kLoose, 128, 256, 2);
}

// Blocks over several query and key tiles at both head dims, on bf16-rounded inputs against the reference (tight),
// the plain ops as the square block, and thread order: reversing each phase's threads gives bitwise the same results.
BOOST_AUTO_TEST_CASE(block_ops_multi_tile) {
  check_emulated_blocks(
      {{1, 150, 130, 20, 128, 2},     // hd 64: a prefix with a diagonal
       {1, 100, 90, 40, 128, 2},      // keys clipped at Tk
       {1, 96, 80, 200, 256, 2},      // hd 128: an earlier block, seen whole
       {2, 70, 100, 30, 192, 3},      // hd 64, the mask crossing tiles
       {1, 40, 200, 130, 256, 2}},    // hd 128, keys past the last query
      rounded,
      [](float* o, float* l, const float* q, const float* kv, const AttentionBlockShape& s, bool rev) {
        return fb::emulate_forward_block(o, l, q, kv, s.B, s.Tq, s.Tk, s.q_pos, s.C, s.NH, rev);
      },
      [](float* dq, float* dkv, const float* dout, const float* q, const float* kv, const float* o, const float* l,
         const AttentionBlockShape& s, bool rev) {
        return fb::emulate_backward_block(dq, dkv, dout, q, kv, o, l, s.B, s.Tq, s.Tk, s.q_pos, s.C, s.NH, true,
                                         rev);
      },
      kTight, kTightLse, "bf16");
  // the plain ops are the square block with dK/dV written: the same code, so bitwise the same results
  const Shape s{1, 150, 128, 2};
  const auto qkv = rounded(randn((size_t)s.B * s.T * 3 * s.C, 160, 1.5f));
  const auto dout = rounded(randn((size_t)s.B * s.T * s.C, 161));
  std::vector<float> o1((size_t)s.B * s.T * s.C, kNaN), l1((size_t)s.B * s.NH * s.T, kNaN), o2 = o1, l2 = l1;
  BOOST_REQUIRE(fb::emulate_forward(o1.data(), l1.data(), qkv.data(), s.B, s.T, s.C, s.NH));
  BOOST_REQUIRE(fb::emulate_forward_block(o2.data(), l2.data(), qkv.data(), qkv.data(), s.B, s.T, s.T, 0, s.C, s.NH));
  BOOST_TEST((o1 == o2 && l1 == l2));
  std::vector<float> d1(qkv.size(), kNaN), d2(qkv.size(), kNaN);
  BOOST_REQUIRE(fb::emulate_backward(d1.data(), dout.data(), qkv.data(), o1.data(), l1.data(), s.B, s.T, s.C, s.NH));
  BOOST_REQUIRE(fb::emulate_backward_block(d2.data(), d2.data(), dout.data(), qkv.data(), qkv.data(), o1.data(),
                                           l1.data(), s.B, s.T, s.T, 0, s.C, s.NH, false));
  BOOST_TEST((d1 == d2));
}
