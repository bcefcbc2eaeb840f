// Checks the CUDA flash-attention algorithm on the CPU: kernels/cuda/flash_attention_tiles.h holds the kernels' block
// code once, and the host executor (kernels/emulation/flash_host.h) runs it tid by tid (same tiles, causal tile
// skipping, tail masks, online softmax, 16-lane butterflies, index math). Compared with the CPU reference attention
// forward and backward on shapes that cover each padded head dim (32, 64, 128, and head dims padded up to them), T
// below, at and off tile multiples.
// Tolerance 2e-5 (ops_checks.h: relative plus tensor-scaled floor): the online softmax and tile-order sums round
// differently from the reference's row-at-a-time loops (measured worst errors are printed with --log_level=message).
// Also: every output element is written (outputs start as NaN, shared memory and registers are NaN-poisoned by the
// emulator), and running each phase's threads in reverse order gives bitwise the same result (no intra-phase races).
#define BOOST_TEST_MODULE kernels_flash_emulation
#include <boost/test/unit_test.hpp>
#include <limits>
#include <string>
#include <vector>

#include "../../kernels/emulation/flash_host.h"
#include "ops_checks.h"

using namespace ops_checks;
namespace flash = cairn::kernels::flash;

namespace {
constexpr double kRtol = 2e-5;
const float kNaN = std::numeric_limits<float>::quiet_NaN();

using Shape = AttentionShape;

struct Result {
  std::vector<float> out, lse, dqkv;
};

Result run_emulation(const Shape& s, const std::vector<float>& qkv, const std::vector<float>& dout,
                     const std::vector<float>& ref_out, const std::vector<float>& ref_lse, bool reverse) {
  Result r{std::vector<float>((size_t)s.B * s.T * s.C, kNaN), std::vector<float>((size_t)s.B * s.NH * s.T, kNaN),
           std::vector<float>(qkv.size(), kNaN)};
  BOOST_REQUIRE_MESSAGE(flash::emulate_forward(r.out.data(), r.lse.data(), qkv.data(), s.B, s.T, s.C, s.NH, reverse),
                        "flash forward declined " << describe(s));
  // backward from the reference's out and lse, as the GPU test does, so it is checked on its own
  BOOST_REQUIRE_MESSAGE(flash::emulate_backward(r.dqkv.data(), dout.data(), qkv.data(), ref_out.data(),
                                                ref_lse.data(), s.B, s.T, s.C, s.NH, reverse),
                        "flash backward declined " << describe(s));
  return r;
}

void check_shape(const Shape& s, uint32_t seed) {
  auto qkv = randn((size_t)s.B * s.T * 3 * s.C, seed, 1.5f);
  auto dout = randn((size_t)s.B * s.T * s.C, seed + 1);
  std::vector<float> out((size_t)s.B * s.T * s.C), lse((size_t)s.B * s.NH * s.T), dqkv(qkv.size());
  ref().attention_forward(out.data(), lse.data(), qkv.data(), s.B, s.T, s.C, s.NH);
  ref().attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), s.B, s.T, s.C, s.NH);
  const Result got = run_emulation(s, qkv, dout, out, lse, false);
  check_close(got.out, out, "flash out " + describe(s), kRtol);
  check_close(got.lse, lse, "flash lse " + describe(s), kRtol);
  check_close(got.dqkv, dqkv, "flash dqkv " + describe(s), kRtol);
  const Result rev = run_emulation(s, qkv, dout, out, lse, true);
  BOOST_CHECK_MESSAGE(rev.out == got.out && rev.lse == got.lse && rev.dqkv == got.dqkv,
                      "flash " << describe(s) << ": thread order changes the result (a phase reads another thread's write)");
}
}  // namespace

BOOST_AUTO_TEST_CASE(padded_head_dims) {
  BOOST_TEST(flash::padded_head_dim(1) == 32);
  BOOST_TEST(flash::padded_head_dim(32) == 32);
  BOOST_TEST(flash::padded_head_dim(33) == 64);
  BOOST_TEST(flash::padded_head_dim(64) == 64);
  BOOST_TEST(flash::padded_head_dim(96) == 128);
  BOOST_TEST(flash::padded_head_dim(128) == 128);
  BOOST_TEST(flash::padded_head_dim(129) == 0);
  std::vector<float> dummy(1);  // head dim 160: not handled, nothing written
  BOOST_TEST(!flash::emulate_forward(dummy.data(), dummy.data(), dummy.data(), 1, 1, 320, 2));
}

// Forward tiles (64 queries) and key tiles (64 / 32 keys): the last query tile's key-tile count under the mask.
BOOST_AUTO_TEST_CASE(causal_tile_counts) {
  BOOST_TEST(flash::key_tiles_for(0, 64, 64, 1) == 1);      // T below one tile
  BOOST_TEST(flash::key_tiles_for(0, 64, 64, 64) == 1);     // exactly one tile
  BOOST_TEST(flash::key_tiles_for(64, 64, 64, 65) == 2);    // one-row tail tile
  BOOST_TEST(flash::key_tiles_for(64, 64, 32, 100) == 4);   // 100 keys in 32-key tiles
  BOOST_TEST(flash::key_tiles_for(64, 64, 32, 1024) == 4);  // diagonal tile: keys 96..127
  BOOST_TEST(flash::key_tiles_for(960, 64, 64, 1024) == 16);
}

BOOST_AUTO_TEST_CASE(head_dim_64) {
  for (auto s : {Shape{1, 1, 64, 1}, Shape{2, 63, 128, 2}, Shape{1, 64, 64, 1}, Shape{2, 65, 128, 2},
                 Shape{1, 130, 192, 3}, Shape{1, 257, 64, 1}})
    check_shape(s, 40);
}

BOOST_AUTO_TEST_CASE(head_dim_128) {
  for (auto s : {Shape{1, 1, 128, 1}, Shape{1, 31, 128, 1}, Shape{2, 33, 256, 2}, Shape{1, 97, 128, 1},
                 Shape{1, 160, 256, 2}})
    check_shape(s, 41);
}

BOOST_AUTO_TEST_CASE(head_dim_32_and_padded) {
  // hd 32; hd 4, 6, 8, 16 (padded to 32); 48 (to 64); 80 and 100 (to 128)
  for (auto s : {Shape{2, 70, 64, 2}, Shape{1, 1, 8, 2}, Shape{3, 33, 30, 5}, Shape{2, 7, 24, 3}, Shape{2, 64, 64, 4},
                 Shape{1, 50, 96, 2}, Shape{1, 45, 160, 2}, Shape{1, 66, 100, 1}})
    check_shape(s, 42);
}

// GPT-2's head dim at a longer sequence with a tail (several query and key tiles per head, 12 heads).
BOOST_AUTO_TEST_CASE(gpt2_heads) { check_shape(Shape{1, 300, 768, 12}, 43); }

// ---- the block ops (context parallelism): flash_attention_*_block, Tq queries at q_pos against Tk keys

namespace {
void emulated_forward_block(float* out, float* lse, const float* q_qkv, const float* kv_qkv, int B, int Tq, int Tk,
                            int q_pos, int C, int NH) {
  BOOST_REQUIRE(flash::emulate_forward_block(out, lse, q_qkv, kv_qkv, B, Tq, Tk, q_pos, C, NH));
}
void emulated_backward_block(float* dq_qkv, float* dkv_qkv, const float* dout, const float* q_qkv, const float* kv_qkv,
                             const float* out, const float* lse, int B, int Tq, int Tk, int q_pos, int C, int NH) {
  BOOST_REQUIRE(
      flash::emulate_backward_block(dq_qkv, dkv_qkv, dout, q_qkv, kv_qkv, out, lse, B, Tq, Tk, q_pos, C, NH, true));
}
// The CUDA backend's block ops as its flash path runs them, on host memory (the ops the checks below use).
const cairn::kernels::Backend& emulated_blocks() {
  static const cairn::kernels::Backend b =
      emulated_block_backend("flash emulation", emulated_forward_block, emulated_backward_block);
  return b;
}
}  // namespace

// The span key-tile count: the last key the tile's last query sees, clipped to the block's keys.
BOOST_AUTO_TEST_CASE(span_tile_counts) {
  BOOST_TEST(flash::key_tiles_for(0, 64, 64, flash::square_span(100)) == flash::key_tiles_for(0, 64, 64, 100));
  BOOST_TEST(flash::key_tiles_for(64, 64, 32, flash::square_span(100)) == flash::key_tiles_for(64, 64, 32, 100));
  BOOST_TEST(flash::key_tiles_for(0, 64, 64, flash::Span{10, 200, 100, true}) == 2);  // queries see keys 0..109
  BOOST_TEST(flash::key_tiles_for(0, 64, 64, flash::Span{10, 70, 100, true}) == 2);   // all 70 keys (q_pos >= Tk)
  BOOST_TEST(flash::key_tiles_for(0, 64, 32, flash::Span{5, 70, 0, true}) == 1);      // keys 0..4
  BOOST_TEST((flash::Span{10, 70, 100, true}.keys_seen() == 70));
  BOOST_TEST((flash::Span{10, 200, 100, true}.keys_seen() == 110));
}

// The emulated flash block ops against the reference's: q_pos inside, at and past the keys, tails off tile multiples,
// each padded head dim; unread inputs NaN-poisoned, dK/dV accumulated, untouched regions checked (ops_checks.h). Then
// a context-parallel split and the ring (blocks merged by attention_merge) against whole-sequence attention.
BOOST_AUTO_TEST_CASE(block_ops) {
  check_attention_block(emulated_blocks(), kRtol);
  check_attention_context_parallel(emulated_blocks(), ref(), kRtol);
  check_attention_ring(emulated_blocks(), ref(), kRtol);
}

// Longer blocks than ops_checks.h's (several query and key tiles, 128-wide heads) and thread order: reversing each
// phase's threads gives bitwise the same block results.
BOOST_AUTO_TEST_CASE(block_ops_multi_tile) {
  check_emulated_blocks(
      {{1, 150, 130, 20, 256, 2},   // prefix with a causal diagonal
       {1, 96, 80, 200, 128, 2},    // an earlier block, seen whole
       {2, 70, 100, 30, 96, 3}},    // hd 32, the mask crossing tiles
      [](std::vector<float> v) { return v; },
      [](float* o, float* l, const float* q, const float* kv, const AttentionBlockShape& s, bool rev) {
        return flash::emulate_forward_block(o, l, q, kv, s.B, s.Tq, s.Tk, s.q_pos, s.C, s.NH, rev);
      },
      [](float* dq, float* dkv, const float* dout, const float* q, const float* kv, const float* o, const float* l,
         const AttentionBlockShape& s, bool rev) {
        return flash::emulate_backward_block(dq, dkv, dout, q, kv, o, l, s.B, s.Tq, s.Tk, s.q_pos, s.C, s.NH, true,
                                            rev);
      },
      kRtol, kRtol, "flash");
}
