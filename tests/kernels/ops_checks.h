// Backend-generic op checks: run each op on a backend under test (through its own memory hooks) and compare
// with the CPU reference backend. Used by kernels_ops_test (fast CPU) and kernels_cuda_test (GPU).
//
// Tolerance: an element passes when |x - ref| <= rtol * |ref| + rtol * max|ref| over the tensor, i.e. `rtol`
// relative with an absolute floor scaled to the tensor, so cancellation-sized entries (near 0) are judged
// against the tensor's magnitude. rtol is 1e-5 for the fast CPU backend, 1e-4 for fp32 CUDA (stated where used).
#pragma once
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <deque>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "../../kernels/cpu/cpu_common.h"
#include "cairn/kernels/backend.h"

namespace ops_checks {

using namespace cairn::kernels;

inline std::vector<float> randn(size_t n, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

inline std::vector<int32_t> randint(size_t n, int hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(0, hi - 1);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// A buffer in the memory of the backend under test, filled from / read back to the host.
template <typename T>
struct Buf {
  const Backend& be;
  size_t n;
  T* ptr;
  Buf(const Backend& b, const std::vector<T>& host) : be(b), n(host.size()) {
    ptr = static_cast<T*>(be.alloc(std::max<size_t>(1, n) * sizeof(T)));
    be.copy_to_device(ptr, host.data(), n * sizeof(T));
  }
  Buf(const Backend& b, size_t count, T fill) : Buf(b, std::vector<T>(count, fill)) {}
  ~Buf() { be.free(ptr); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  std::vector<T> host() const {
    be.synchronize();
    std::vector<T> h(n);
    be.copy_to_host(h.data(), ptr, n * sizeof(T));
    return h;
  }
  operator T*() const { return ptr; }
};

inline void check_close(const std::vector<float>& got, const std::vector<float>& ref, const std::string& what,
                        double rtol) {
  BOOST_REQUIRE_EQUAL(got.size(), ref.size());
  double scale = 0.0;
  for (float r : ref) scale = std::max(scale, (double)std::fabs(r));
  double worst = 0.0;
  size_t worst_i = 0;
  for (size_t i = 0; i < ref.size(); i++) {
    BOOST_REQUIRE_MESSAGE(std::isfinite(got[i]), what << ": non-finite at " << i);
    double excess = std::fabs((double)got[i] - ref[i]) / (rtol * std::fabs(ref[i]) + rtol * scale + 1e-30);
    if (excess > worst) {
      worst = excess;
      worst_i = i;
    }
  }
  BOOST_TEST_MESSAGE(what << ": worst error " << worst << " x tolerance");
  BOOST_CHECK_MESSAGE(worst <= 1.0, what << ": element " << worst_i << " got=" << got[worst_i]
                                         << " ref=" << ref[worst_i] << " (" << worst << " x tolerance)");
}

inline const Backend& ref() { return cpu_reference_backend(); }

inline void check_embedding(const Backend& be, double rtol) {
  for (auto [B, T, C, V] : {std::tuple{1, 1, 3, 5}, {2, 9, 17, 4}, {4, 16, 64, 11}}) {
    auto wte = randn((size_t)V * C, 1), wpe = randn((size_t)T * C, 2);
    auto inp = randint((size_t)B * T, V, 3);  // V small: repeated tokens exercise accumulation
    std::vector<float> o1((size_t)B * T * C);
    ref().embedding_forward(o1.data(), inp.data(), wte.data(), wpe.data(), B, T, C);
    Buf<float> d_wte(be, wte), d_wpe(be, wpe), o2(be, o1.size(), 0.0f);
    Buf<int32_t> d_inp(be, inp);
    be.embedding_forward(o2, d_inp, d_wte, d_wpe, B, T, C);
    BOOST_TEST(o1 == o2.host());  // a single addition: exact
    auto dout = randn(o1.size(), 4);
    auto dwte1 = randn(wte.size(), 5), dwpe1 = randn(wpe.size(), 6);
    Buf<float> d_dout(be, dout), dwte2(be, dwte1), dwpe2(be, dwpe1);
    ref().embedding_backward(dwte1.data(), dwpe1.data(), dout.data(), inp.data(), B, T, C);
    be.embedding_backward(dwte2, dwpe2, d_dout, d_inp, B, T, C);
    check_close(dwte2.host(), dwte1, "embedding dwte", rtol);
    check_close(dwpe2.host(), dwpe1, "embedding dwpe", rtol);
    // vocab-parallel forms: every third id on another rank (< 0), with and without the positional table
    auto inp_tp = inp;
    for (size_t i = 0; i < inp_tp.size(); i += 3) inp_tp[i] = -1 - (int32_t)i;  // any negative value
    Buf<int32_t> d_inp_tp(be, inp_tp);
    for (bool with_wpe : {true, false}) {
      const std::string tag = std::string(with_wpe ? " (negative ids)" : " (negative ids, no wpe)");
      std::vector<float> o3(o1.size());
      ref().embedding_forward(o3.data(), inp_tp.data(), wte.data(), with_wpe ? wpe.data() : nullptr, B, T, C);
      Buf<float> o4(be, o1.size(), 7.0f);  // must overwrite garbage
      be.embedding_forward(o4, d_inp_tp, d_wte, with_wpe ? d_wpe.ptr : nullptr, B, T, C);
      BOOST_TEST(o3 == o4.host(), "embedding out" << tag);
      auto dwte3 = randn(wte.size(), 7), dwpe3 = randn(wpe.size(), 8);
      Buf<float> dwte4(be, dwte3), dwpe4(be, dwpe3);
      ref().embedding_backward(dwte3.data(), with_wpe ? dwpe3.data() : nullptr, dout.data(), inp_tp.data(), B, T, C);
      be.embedding_backward(dwte4, with_wpe ? dwpe4.ptr : nullptr, d_dout, d_inp_tp, B, T, C);
      check_close(dwte4.host(), dwte3, "embedding dwte" + tag, rtol);
      check_close(dwpe4.host(), dwpe3, "embedding dwpe" + tag, rtol);  // untouched without wpe
      if (!with_wpe) BOOST_TEST(dwpe4.host() == randn(wpe.size(), 8), "dwpe == nullptr must skip the gradient");
    }
  }
}

// Vocab-parallel embedding on one backend: wte split by rows into [0, V0) and [V0, V), ids remapped per half
// (negative where the row is not local), wpe on the first half only. The halves' outputs summed are the unsplit
// output bitwise (each element is e + p, p + e or e + 0 plus a 0), and each half's dwte rows and the first half's
// dwpe are the unsplit gradients bitwise (the same additions in the same order).
inline void check_embedding_vocab_parallel(const Backend& be) {
  for (auto [B, T, C, V] : {std::tuple{2, 9, 17, 7}, {3, 16, 64, 50}}) {
    const std::string shape =
        std::to_string(B) + "x" + std::to_string(T) + " C=" + std::to_string(C) + " V=" + std::to_string(V);
    auto wte = randn((size_t)V * C, 90), wpe = randn((size_t)T * C, 91), dout = randn((size_t)B * T * C, 92);
    auto inp = randint((size_t)B * T, V, 93);
    Buf<float> d_wte(be, wte), d_wpe(be, wpe), d_dout(be, dout), out(be, dout.size(), 0.0f);
    Buf<float> dwte(be, wte.size(), 0.0f), dwpe(be, wpe.size(), 0.0f);
    Buf<int32_t> d_inp(be, inp);
    be.embedding_forward(out, d_inp, d_wte, d_wpe, B, T, C);
    be.embedding_backward(dwte, dwpe, d_dout, d_inp, B, T, C);
    const auto want_out = out.host(), want_dwte = dwte.host(), want_dwpe = dwpe.host();
    const int V0 = V / 2;
    std::vector<float> sum(want_out.size(), 0.0f);
    for (int half : {0, 1}) {
      const int off = half ? V0 : 0, Vk = half ? V - V0 : V0;
      const bool with_wpe = half == 0;
      std::vector<float> wte_k(wte.begin() + (size_t)off * C, wte.begin() + (size_t)(off + Vk) * C);
      std::vector<int32_t> inp_k(inp.size());
      for (size_t i = 0; i < inp.size(); i++) inp_k[i] = inp[i] >= off && inp[i] < off + Vk ? inp[i] - off : -1;
      Buf<float> d_wte_k(be, wte_k), out_k(be, want_out.size(), 3.0f), dwte_k(be, wte_k.size(), 0.0f),
          dwpe_k(be, wpe.size(), 0.0f);
      Buf<int32_t> d_inp_k(be, inp_k);
      be.embedding_forward(out_k, d_inp_k, d_wte_k, with_wpe ? d_wpe.ptr : nullptr, B, T, C);
      be.embedding_backward(dwte_k, with_wpe ? dwpe_k.ptr : nullptr, d_dout, d_inp_k, B, T, C);
      const auto o = out_k.host();
      for (size_t i = 0; i < sum.size(); i++) sum[i] += o[i];
      const std::vector<float> want_rows(want_dwte.begin() + (size_t)off * C,
                                         want_dwte.begin() + (size_t)(off + Vk) * C);
      BOOST_TEST(dwte_k.host() == want_rows, "vocab-parallel dwte half " << half << " " << shape);
      if (with_wpe) BOOST_TEST(dwpe_k.host() == want_dwpe, "vocab-parallel dwpe " << shape);
    }
    BOOST_TEST(sum == want_out, "vocab-parallel embedding sum " << shape);
  }
}

inline void check_layernorm(const Backend& be, double rtol) {
  // 2000 x 777: the CUDA column sums' row splits (32 of 63 rows, the last one 47) over 25 ragged column blocks
  for (auto [N, C] : {std::pair{1, 1}, {5, 7}, {33, 64}, {70, 129}, {2000, 777}}) {
    auto x = randn((size_t)N * C, 10, 2.0f), w = randn(C, 11), b = randn(C, 12);
    for (auto& v : x) v += 0.5f;  // non-zero mean
    std::vector<float> o1(x.size()), m1(N), r1(N);
    ref().layernorm_forward(o1.data(), m1.data(), r1.data(), x.data(), w.data(), b.data(), N, C);
    Buf<float> dx_(be, x), dw_(be, w), db_(be, b), o2(be, x.size(), 0.0f), m2(be, N, 0.0f), r2(be, N, 0.0f);
    be.layernorm_forward(o2, m2, r2, dx_, dw_, db_, N, C);
    check_close(o2.host(), o1, "layernorm out", rtol);
    check_close(m2.host(), m1, "layernorm mean", rtol);
    check_close(r2.host(), r1, "layernorm rstd", rtol);
    auto dout = randn(x.size(), 13);
    auto dx1 = randn(x.size(), 14), dw1 = randn(C, 15), db1 = randn(C, 16);  // accumulate onto non-zero
    Buf<float> d_dout(be, dout), dx2(be, dx1), dw2(be, dw1), db2(be, db1), m1d(be, m1), r1d(be, r1);
    ref().layernorm_backward(dx1.data(), dw1.data(), db1.data(), dout.data(), x.data(), w.data(), m1.data(), r1.data(),
                             N, C);
    be.layernorm_backward(dx2, dw2, db2, d_dout, dx_, dw_, m1d, r1d, N, C);
    check_close(dx2.host(), dx1, "layernorm dinp", rtol);
    check_close(dw2.host(), dw1, "layernorm dweight", rtol);
    check_close(db2.host(), db1, "layernorm dbias", rtol);
  }
}

inline void check_matmul(const Backend& be, double rtol) {
  for (auto layout : {WeightLayout::InOut, WeightLayout::OutIn})
    for (auto [N, C, OC] : {std::tuple{1, 1, 1}, {7, 13, 5}, {33, 64, 192}, {65, 31, 129}})
      for (bool with_bias : {true, false}) {
        const std::string tag = std::string(layout == WeightLayout::InOut ? "InOut" : "OutIn") +
                                (with_bias ? " bias " : " nobias ") + std::to_string(N) + "x" + std::to_string(C) +
                                "x" + std::to_string(OC);
        auto x = randn((size_t)N * C, 20), w = randn((size_t)C * OC, 21), b = randn(OC, 22);
        std::vector<float> o1((size_t)N * OC);
        ref().matmul_forward(o1.data(), x.data(), w.data(), with_bias ? b.data() : nullptr, N, C, OC, layout);
        Buf<float> dx_(be, x), dw_(be, w), db_(be, b), o2(be, o1.size(), 123.0f);  // must overwrite garbage
        be.matmul_forward(o2, dx_, dw_, with_bias ? db_.ptr : nullptr, N, C, OC, layout);
        check_close(o2.host(), o1, "matmul out " + tag, rtol);
        auto dout = randn(o1.size(), 23);
        std::vector<float> dx1(x.size());
        auto dw1 = randn(w.size(), 24), db1 = randn(OC, 25);
        Buf<float> d_dout(be, dout), dx2(be, x.size(), -7.0f), dw2(be, dw1), db2(be, db1), dw3(be, dw1);
        ref().matmul_backward(dx1.data(), dw1.data(), with_bias ? db1.data() : nullptr, dout.data(), x.data(), w.data(),
                              N, C, OC, layout);
        be.matmul_backward(dx2, dw2, with_bias ? db2.ptr : nullptr, d_dout, dx_, dw_, N, C, OC, layout);
        check_close(dx2.host(), dx1, "matmul dinp " + tag, rtol);
        check_close(dw2.host(), dw1, "matmul dweight " + tag, rtol);
        check_close(db2.host(), db1, "matmul dbias " + tag, rtol);
        be.matmul_backward(nullptr, dw3, nullptr, d_dout, dx_, dw_, N, C, OC, layout);  // dinp may be skipped
        check_close(dw3.host(), dw1, "matmul dweight without dinp " + tag, rtol);
      }
}

struct AttentionShape {
  int B, T, C, NH;
};
// "BxT C=C/NH (hd d)" for messages.
inline std::string describe(const AttentionShape& s) {
  return std::to_string(s.B) + "x" + std::to_string(s.T) + " C=" + std::to_string(s.C) + "/" + std::to_string(s.NH) +
         " (hd " + std::to_string(s.NH > 0 ? s.C / s.NH : 0) + ")";
}

inline void check_attention_shapes(const Backend& be, double rtol, const std::vector<AttentionShape>& shapes) {
  for (auto s : shapes) {
    const std::string tag = describe(s);
    auto qkv = randn((size_t)s.B * s.T * 3 * s.C, 30, 1.5f);
    std::vector<float> o1((size_t)s.B * s.T * s.C), l1((size_t)s.B * s.NH * s.T);
    ref().attention_forward(o1.data(), l1.data(), qkv.data(), s.B, s.T, s.C, s.NH);
    Buf<float> d_qkv(be, qkv), o2(be, o1.size(), 0.0f), l2(be, l1.size(), 0.0f);
    be.attention_forward(o2, l2, d_qkv, s.B, s.T, s.C, s.NH);
    check_close(o2.host(), o1, "attention out " + tag, rtol);
    check_close(l2.host(), l1, "attention lse " + tag, rtol);
    auto dout = randn(o1.size(), 31);
    std::vector<float> d1(qkv.size());
    ref().attention_backward(d1.data(), dout.data(), qkv.data(), o1.data(), l1.data(), s.B, s.T, s.C, s.NH);
    Buf<float> d_dout(be, dout), o1d(be, o1), l1d(be, l1), d2(be, qkv.size(), 5.0f);
    be.attention_backward(d2, d_dout, d_qkv, o1d, l1d, s.B, s.T, s.C, s.NH);
    check_close(d2.host(), d1, "attention dqkv " + tag, rtol);
  }
}

// ---- attention blocks (context parallelism): attention_forward_block / attention_backward_block ----

// Rows t0 .. t0 + n - 1 of each sequence of x [B, T, width], as [B, n, width].
inline std::vector<float> take_rows(const std::vector<float>& x, int B, int T, int width, int t0, int n) {
  std::vector<float> y((size_t)B * n * width);
  for (int b = 0; b < B; b++)
    for (int i = 0; i < n; i++)
      for (int c = 0; c < width; c++) y[((size_t)b * n + i) * width + c] = x[((size_t)b * T + t0 + i) * width + c];
  return y;
}

// Columns c0 .. c1 - 1 of y [B, n, width] into rows t0 .. t0 + n - 1 of each sequence of x [B, T, width].
inline void put_rows(std::vector<float>& x, const std::vector<float>& y, int B, int T, int width, int t0, int n, int c0,
                     int c1) {
  for (int b = 0; b < B; b++)
    for (int i = 0; i < n; i++)
      for (int c = c0; c < c1; c++) x[((size_t)b * T + t0 + i) * width + c] = y[((size_t)b * n + i) * width + c];
}

// check_close passes a NaN reference element (every comparison with NaN is false), so reference results are
// checked for NaN first: an op that reads a NaN-poisoned input must fail.
inline void require_finite(const std::vector<float>& x, const std::string& what) {
  for (size_t i = 0; i < x.size(); i++) BOOST_REQUIRE_MESSAGE(std::isfinite(x[i]), what << ": non-finite at " << i);
}

// `full`'s attention_forward and attention_backward over whole sequences: out, lse, dqkv (the references of the
// context-parallel checks).
inline std::tuple<std::vector<float>, std::vector<float>, std::vector<float>> whole_sequence_attention(
    const Backend& full, const std::vector<float>& qkv, const std::vector<float>& dout, int B, int T, int C, int NH) {
  Buf<float> f_qkv(full, qkv), f_dout(full, dout), o(full, (size_t)B * T * C, 0.0f), l(full, (size_t)B * NH * T, 0.0f),
      d(full, qkv.size(), 5.0f);
  full.attention_forward(o, l, f_qkv, B, T, C, NH);
  full.attention_backward(d, f_dout, f_qkv, o, l, B, T, C, NH);
  return {o.host(), l.host(), d.host()};
}

// Context parallelism on `be`: the sequence in 2 cp chunks, rank r holding chunks r and 2 cp - 1 - r (Megatron's
// load-balanced order, so the chunks run out of order); each chunk's queries run against the whole kv buffer (Tk = T:
// the keys past the chunk are there and must not count). The chunks' out and lse must be the rows of `full`'s
// attention_forward; their dq the rows of `full`'s attention_backward, and their dK, dV, accumulated into one zeroed
// buffer, its k and v thirds. Then the block that is its own key range (q_pos 0, Tq = Tk = T), backward in place
// (dq_qkv == dkv_qkv, k and v thirds zero) = attention_backward.
inline void check_attention_context_parallel(const Backend& be, const Backend& full, double rtol) {
  const int B = 2, T = 24, C = 32, NH = 4, C3 = 3 * C, cp = 2, chunk = T / (2 * cp);
  const std::string tag = std::string(" (") + be.name + " blocks vs " + full.name + ")";
  auto qkv = randn((size_t)B * T * C3, 100, 1.5f), dout = randn((size_t)B * T * C, 101);
  const auto [out_full, lse_full, dqkv_full] = whole_sequence_attention(full, qkv, dout, B, T, C, NH);
  require_finite(dqkv_full, "full attention dqkv" + tag);
  Buf<float> d_qkv(be, qkv), dkv(be, qkv.size(), 0.0f);
  std::vector<float> out_cp(out_full.size(), NAN), lse_cp(lse_full.size(), NAN), dqkv_cp(qkv.size(), NAN);
  for (int r = 0; r < cp; r++)
    for (int c : {r, 2 * cp - 1 - r}) {
      const int q_pos = c * chunk;
      Buf<float> q_c(be, take_rows(qkv, B, T, C3, q_pos, chunk)), dout_c(be, take_rows(dout, B, T, C, q_pos, chunk));
      Buf<float> o_c(be, (size_t)B * chunk * C, NAN), l_c(be, (size_t)B * NH * chunk, NAN);
      Buf<float> dq_c(be, (size_t)B * chunk * C3, 7.0f);
      be.attention_forward_block(o_c, l_c, q_c, d_qkv, B, chunk, T, q_pos, C, NH);
      be.attention_backward_block(dq_c, dkv, dout_c, q_c, d_qkv, o_c, l_c, B, chunk, T, q_pos, C, NH);
      put_rows(out_cp, o_c.host(), B, T, C, q_pos, chunk, 0, C);
      const auto l = l_c.host();
      for (int bh = 0; bh < B * NH; bh++)
        for (int i = 0; i < chunk; i++) lse_cp[(size_t)bh * T + q_pos + i] = l[(size_t)bh * chunk + i];
      const auto dq = dq_c.host();
      put_rows(dqkv_cp, dq, B, T, C3, q_pos, chunk, 0, C);
      bool kv_thirds_untouched = true;
      for (size_t row = 0; row < (size_t)B * chunk; row++)
        for (int col = C; col < C3; col++) kv_thirds_untouched &= dq[row * C3 + col] == 7.0f;
      BOOST_TEST(kv_thirds_untouched, "dq_qkv's k and v thirds must stay untouched, chunk " << c << tag);
    }
  const auto dkv_h = dkv.host();
  bool q_third_untouched = true;
  for (size_t row = 0; row < (size_t)B * T; row++)
    for (int col = 0; col < C; col++) q_third_untouched &= dkv_h[row * C3 + col] == 0.0f;
  BOOST_TEST(q_third_untouched, "dkv_qkv's q third must stay untouched" << tag);
  put_rows(dqkv_cp, dkv_h, B, T, C3, 0, T, C, C3);
  check_close(out_cp, out_full, "context-parallel attention out" + tag, rtol);
  check_close(lse_cp, lse_full, "context-parallel attention lse" + tag, rtol);
  check_close(dqkv_cp, dqkv_full, "context-parallel attention dqkv" + tag, rtol);

  // the whole sequence as one block, backward in place
  Buf<float> o(be, out_full.size(), NAN), l(be, lse_full.size(), NAN), d_dout(be, dout);
  be.attention_forward_block(o, l, d_qkv, d_qkv, B, T, T, 0, C, NH);
  check_close(o.host(), out_full, "self-block attention out" + tag, rtol);
  check_close(l.host(), lse_full, "self-block attention lse" + tag, rtol);
  std::vector<float> d_init(qkv.size(), 0.0f);
  for (size_t row = 0; row < (size_t)B * T; row++)
    for (int col = 0; col < C; col++) d_init[row * C3 + col] = 9.0f;  // the q third is overwritten
  Buf<float> d(be, d_init), f_out(be, out_full), f_lse(be, lse_full);
  be.attention_backward_block(d, d, d_dout, d_qkv, d_qkv, f_out, f_lse, B, T, T, 0, C, NH);
  check_close(d.host(), dqkv_full, "self-block attention dqkv in place" + tag, rtol);
}

struct AttentionBlockShape {
  int B, Tq, Tk, q_pos, C, NH;
};

// `be`'s block ops vs the reference's, with q_pos > 0 and keys past the block's last query (Tk > q_pos + Tq) on most
// shapes. Inputs never to be read hold NaN: q_qkv's k and v thirds, kv_qkv's q third and its rows from q_pos + Tq
// on, so any read of them shows up as a non-finite result. Output semantics, checked bitwise on both backends: dq_qkv's
// k and v thirds, dkv_qkv's q third and its rows from q_pos + Tq on are untouched; out, lse and dq_qkv's q third are
// overwritten (they start as NaN); dkv_qkv's k and v thirds are accumulated (starting from X gives X + the result
// from zero).
inline void check_attention_block(const Backend& be, double rtol) {
  for (auto s : std::vector<AttentionBlockShape>{{2, 5, 23, 7, 24, 3},
                                                 {1, 1, 9, 0, 8, 2},
                                                 {3, 1, 9, 8, 8, 2},
                                                 {2, 17, 40, 20, 64, 2},
                                                 {1, 33, 70, 30, 30, 5},
                                                 {1, 20, 50, 12, 128, 2},
                                                 {2, 9, 30, 16, 128, 1},
                                                 // keys clipped at Tk: a part of the queries (q_pos + Tq > Tk), and
                                                 // every query seeing the whole block (q_pos >= Tk, ring CP)
                                                 {2, 11, 9, 4, 24, 3},
                                                 {1, 16, 16, 16, 64, 2},
                                                 {2, 7, 12, 30, 32, 4}}) {
    const int C3 = 3 * s.C, Tn = std::min(s.Tk, s.q_pos + s.Tq);
    const std::string tag = std::to_string(s.B) + "x" + std::to_string(s.Tq) + " at " + std::to_string(s.q_pos) +
                            " of " + std::to_string(s.Tk) + " C=" + std::to_string(s.C) + "/" + std::to_string(s.NH);
    auto q_qkv = randn((size_t)s.B * s.Tq * C3, 110, 1.5f), kv_qkv = randn((size_t)s.B * s.Tk * C3, 111, 1.5f);
    auto dout = randn((size_t)s.B * s.Tq * s.C, 112), dkv_x = randn(kv_qkv.size(), 113);
    for (size_t row = 0; row < (size_t)s.B * s.Tq; row++)
      for (int col = s.C; col < C3; col++) q_qkv[row * C3 + col] = NAN;
    for (int b = 0; b < s.B; b++)
      for (int t = 0; t < s.Tk; t++)
        for (int col = 0; col < C3; col++)
          if (col < s.C || t >= Tn) kv_qkv[((size_t)b * s.Tk + t) * C3 + col] = NAN;
    std::vector<float> dq_init(q_qkv.size(), 3.0f);
    for (size_t row = 0; row < (size_t)s.B * s.Tq; row++)
      for (int col = 0; col < s.C; col++) dq_init[row * C3 + col] = NAN;

    struct Result {
      std::vector<float> out, lse, dq, dkv, dkv_from_zero;
    };
    auto run = [&](const Backend& b) {
      Buf<float> d_q(b, q_qkv), d_kv(b, kv_qkv), d_dout(b, dout), o(b, (size_t)s.B * s.Tq * s.C, NAN),
          l(b, (size_t)s.B * s.NH * s.Tq, NAN), dq(b, dq_init), dkv(b, dkv_x), dkv0(b, dkv_x.size(), 0.0f);
      b.attention_forward_block(o, l, d_q, d_kv, s.B, s.Tq, s.Tk, s.q_pos, s.C, s.NH);
      b.attention_backward_block(dq, dkv, d_dout, d_q, d_kv, o, l, s.B, s.Tq, s.Tk, s.q_pos, s.C, s.NH);
      b.attention_backward_block(dq, dkv0, d_dout, d_q, d_kv, o, l, s.B, s.Tq, s.Tk, s.q_pos, s.C, s.NH);
      return Result{o.host(), l.host(), dq.host(), dkv.host(), dkv0.host()};
    };
    const Result want = run(ref()), got = run(be);
    for (const auto* r : {&want, &got}) {
      const std::string who = std::string(r == &want ? " (reference) " : " ") + tag;
      require_finite(r->out, "attention block out" + who);
      require_finite(r->lse, "attention block lse" + who);
      bool untouched = true, finite = true;
      for (size_t row = 0; row < (size_t)s.B * s.Tq; row++)
        for (int col = 0; col < C3; col++) {
          const float x = r->dq[row * C3 + col];
          if (col < s.C) finite &= std::isfinite(x);
          else untouched &= x == 3.0f;
        }
      BOOST_TEST(finite, "dq_qkv's q third must be overwritten" << who);
      BOOST_TEST(untouched, "dq_qkv's k and v thirds must stay untouched" << who);
      untouched = true;
      std::vector<float> sum(dkv_x.size());
      for (int b = 0; b < s.B; b++)
        for (int t = 0; t < s.Tk; t++)
          for (int col = 0; col < C3; col++) {
            const size_t e = ((size_t)b * s.Tk + t) * C3 + col;
            if (col < s.C || t >= Tn) untouched &= r->dkv[e] == dkv_x[e] && r->dkv_from_zero[e] == 0.0f;
            sum[e] = dkv_x[e] + r->dkv_from_zero[e];
          }
      BOOST_TEST(untouched, "dkv_qkv's q third and rows past the block's keys must stay untouched" << who);
      require_finite(r->dkv, "attention block dkv" + who);
      check_close(r->dkv, sum, "attention block dkv accumulates" + who, rtol);
    }
    check_close(got.out, want.out, "attention block out " + tag, rtol);
    check_close(got.lse, want.lse, "attention block lse " + tag, rtol);
    check_close(got.dq, want.dq, "attention block dq_qkv " + tag, rtol);
    check_close(got.dkv, want.dkv, "attention block dkv_qkv " + tag, rtol);
  }
}

// Ring context parallelism on `be` (what the model runs with [parallel] cp_comm = "p2p"): the sequence in 2 cp
// chunks; each query chunk meets the key chunks at or before it one block at a time (the diagonal first, causal;
// earlier chunks whole: q_pos >= Tk), in ring order, and attention_merge folds each block into the running (out,
// lse). Backward runs every block with the merged out and lse, its dq into a scratch buffer summed per chunk, dK/dV
// accumulated per key chunk. All must equal `full`'s whole-sequence attention. T, C, NH: the shape (T divisible by 8;
// the default keeps every kernel at one tile, a GPU family's own head dims need larger C / NH).
inline void check_attention_ring(const Backend& be, const Backend& full, double rtol, int T = 32, int C = 32,
                                 int NH = 4) {
  const int B = 2, C3 = 3 * C;
  const std::string tag = std::string(" (") + be.name + " ring vs " + full.name + ")";
  auto qkv = randn((size_t)B * T * C3, 120, 1.5f), dout = randn((size_t)B * T * C, 121);
  const auto [out_full, lse_full, dqkv_full] = whole_sequence_attention(full, qkv, dout, B, T, C, NH);
  for (int cp : {2, 4}) {
    const int S = T / (2 * cp), chunks = 2 * cp;
    std::vector<std::vector<float>> q(chunks), dq_sum(chunks, std::vector<float>((size_t)B * S * C3, 0.0f));
    std::deque<Buf<float>> kv, dkv;  // Buf neither copies nor moves
    for (int c = 0; c < chunks; c++) {
      q[c] = take_rows(qkv, B, T, C3, c * S, S);
      kv.emplace_back(be, q[c]);
      dkv.emplace_back(be, q[c].size(), 0.0f);
    }
    std::vector<float> out_ring(out_full.size(), NAN), lse_ring(lse_full.size(), NAN), dqkv_ring(qkv.size(), NAN);
    for (int r = 0; r < cp; r++)
      for (int c : {r, chunks - 1 - r}) {
        // the key chunks in the order the ring brings them: rank r's own first (its diagonal), then r-1, r-2, ...
        std::vector<int> keys;
        for (int t = 0; t < cp; t++) {
          const int from = ((r - t) % cp + cp) % cp;
          for (int k : {from, chunks - 1 - from})
            if (k == c) keys.insert(keys.begin(), k);
            else if (k < c) keys.push_back(k);
        }
        Buf<float> o(be, (size_t)B * S * C, NAN), l(be, (size_t)B * NH * S, NAN), po(be, (size_t)B * S * C, NAN),
            pl(be, (size_t)B * NH * S, NAN), dout_c(be, take_rows(dout, B, T, C, c * S, S));
        for (size_t i = 0; i < keys.size(); i++) {
          const int k = keys[i];
          const int q_pos = (c - k) * S;  // 0 on the diagonal; >= S (every key seen) for an earlier chunk
          if (i == 0) be.attention_forward_block(o, l, kv[c], kv[k], B, S, S, q_pos, C, NH);
          else {
            be.attention_forward_block(po, pl, kv[c], kv[k], B, S, S, q_pos, C, NH);
            be.attention_merge(o, l, po, pl, B, S, C, NH);
          }
        }
        for (int k : keys) {
          Buf<float> dq(be, (size_t)B * S * C3, 0.0f);
          be.attention_backward_block(dq, dkv[k], dout_c, kv[c], kv[k], o, l, B, S, S, (c - k) * S, C, NH);
          const auto h = dq.host();
          for (size_t e = 0; e < h.size(); e++) dq_sum[c][e] += h[e];
        }
        put_rows(out_ring, o.host(), B, T, C, c * S, S, 0, C);
        const auto lh = l.host();
        for (int bh = 0; bh < B * NH; bh++)
          for (int i = 0; i < S; i++) lse_ring[(size_t)bh * T + c * S + i] = lh[(size_t)bh * S + i];
        put_rows(dqkv_ring, dq_sum[c], B, T, C3, c * S, S, 0, C);
      }
    for (int c = 0; c < chunks; c++) put_rows(dqkv_ring, dkv[c].host(), B, T, C3, c * S, S, C, C3);
    const std::string at = " cp=" + std::to_string(cp) + tag;
    check_close(out_ring, out_full, "ring attention out" + at, rtol);
    check_close(lse_ring, lse_full, "ring attention lse" + at, rtol);
    check_close(dqkv_ring, dqkv_full, "ring attention dqkv" + at, rtol);
  }
}

// attention_merge vs the reference's (bitwise on CPU; rtol on GPU), including a row where one side dominates.
inline void check_attention_merge(const Backend& be, double rtol) {
  const int B = 2, T = 7, C = 24, NH = 3;
  auto out = randn((size_t)B * T * C, 130), part = randn(out.size(), 131);
  auto lse = randn((size_t)B * NH * T, 132, 4.0f), plse = randn(lse.size(), 133, 4.0f);
  lse[0] = 80.0f, plse[1] = 90.0f;  // exp() of either alone would overflow
  std::vector<float> want_o = out, want_l = lse;
  ref().attention_merge(want_o.data(), want_l.data(), part.data(), plse.data(), B, T, C, NH);
  require_finite(want_o, "attention_merge out (reference)");
  Buf<float> o(be, out), l(be, lse), p(be, part), pl(be, plse);
  be.attention_merge(o, l, p, pl, B, T, C, NH);
  check_close(o.host(), want_o, std::string("attention_merge out (") + be.name + ")", rtol);
  check_close(l.host(), want_l, std::string("attention_merge lse (") + be.name + ")", rtol);
}

// A host-memory backend whose attention block ops are a GPU kernel family's host emulation and whose merge is the CPU
// backends': what check_attention_block, check_attention_context_parallel and check_attention_ring call.
inline Backend emulated_block_backend(const char* name, decltype(Backend::attention_forward_block) fwd,
                                      decltype(Backend::attention_backward_block) bwd) {
  Backend e = host_memory_backend(name);
  e.attention_forward_block = fwd;
  e.attention_backward_block = bwd;
  e.attention_merge = attention_merge_host;
  return e;
}

// A GPU kernel family's block ops through its host emulation over several query and key tiles: fwd(out, lse, q_qkv,
// kv_qkv, shape, reverse) and bwd(dq_qkv, dkv_qkv, dout, q_qkv, kv_qkv, out, lse, shape, reverse) (dK/dV accumulated;
// each returns whether it ran) against the reference's block ops at rtol (lse at lse_rtol), on random inputs passed
// through prep (bf16 rounding, or none), and bitwise the same when each phase's threads run in reverse order.
template <class Prep, class Fwd, class Bwd>
inline void check_emulated_blocks(const std::vector<AttentionBlockShape>& shapes, Prep prep, Fwd fwd, Bwd bwd,
                                  double rtol, double lse_rtol, const std::string& what) {
  for (const auto& s : shapes) {
    const int C3 = 3 * s.C;
    const auto q = prep(randn((size_t)s.B * s.Tq * C3, 140, 1.5f));
    const auto kv = prep(randn((size_t)s.B * s.Tk * C3, 141, 1.5f));
    const auto dout = prep(randn((size_t)s.B * s.Tq * s.C, 142)), dkv0 = randn(kv.size(), 143);
    std::vector<float> ro((size_t)s.B * s.Tq * s.C), rl((size_t)s.B * s.NH * s.Tq), rdq(q.size(), 0.0f), rdkv = dkv0;
    ref().attention_forward_block(ro.data(), rl.data(), q.data(), kv.data(), s.B, s.Tq, s.Tk, s.q_pos, s.C, s.NH);
    ref().attention_backward_block(rdq.data(), rdkv.data(), dout.data(), q.data(), kv.data(), ro.data(), rl.data(), s.B,
                                   s.Tq, s.Tk, s.q_pos, s.C, s.NH);
    std::vector<float> runs[2][4];
    for (int rev = 0; rev < 2; rev++) {
      std::vector<float> o(ro.size(), NAN), l(rl.size(), NAN), dq(q.size(), 0.0f), dkv = dkv0;
      BOOST_REQUIRE(fwd(o.data(), l.data(), q.data(), kv.data(), s, rev == 1));
      BOOST_REQUIRE(bwd(dq.data(), dkv.data(), dout.data(), q.data(), kv.data(), ro.data(), rl.data(), s, rev == 1));
      runs[rev][0] = o, runs[rev][1] = l, runs[rev][2] = dq, runs[rev][3] = dkv;
    }
    const std::string tag = what + " " + std::to_string(s.Tq) + " at " + std::to_string(s.q_pos) + " of " +
                            std::to_string(s.Tk) + ", hd " + std::to_string(s.C / s.NH);
    check_close(runs[0][0], ro, "block out " + tag, rtol);
    check_close(runs[0][1], rl, "block lse " + tag, lse_rtol);
    check_close(runs[0][2], rdq, "block dq " + tag, rtol);
    check_close(runs[0][3], rdkv, "block dkv " + tag, rtol);
    for (int k = 0; k < 4; k++)
      BOOST_TEST((runs[0][k] == runs[1][k]), "thread order changes result " << k << " " << tag);
  }
}

// The plain ops on odd shapes, then the block ops (the CUDA backend runs its simple kernels for those): vs the
// reference, and a context-parallel split vs the reference's whole-sequence attention.
inline void check_attention(const Backend& be, double rtol) {
  check_attention_shapes(be, rtol, {{1, 1, 8, 2}, {2, 7, 24, 3}, {3, 33, 30, 5}, {2, 64, 64, 4}, {1, 80, 128, 2}});
  check_attention_block(be, rtol);
  check_attention_context_parallel(be, ref(), rtol);
  check_attention_merge(be, rtol);
  check_attention_ring(be, ref(), rtol);
}

// The reference evaluates 0.5x(1 + tanh(y)) as GPT-2/PyTorch write it; where tanh(y) ~ -1 that form loses ~1 ulp
// of 1 to cancellation, an absolute error ~1e-7 |x| (and |x|^3 in the derivative). Tolerance: rtol relative plus
// 1e-6 |x| (1 + x^2) (times |dout| for the gradient).
inline void check_gelu_residual(const Backend& be, double rtol, bool residual_exact) {
  for (size_t n : {1ul, 17ul, 40000ul}) {
    auto x = randn(n, 50, 3.0f);
    if (n > 2) {
      x[0] = 0.0f;
      x[1] = 20.0f;
      x[2] = -20.0f;
    }
    auto dout = randn(n, 51);
    std::vector<float> o1(n), d1(n);
    ref().gelu_forward(o1.data(), x.data(), n);
    ref().gelu_backward(d1.data(), x.data(), dout.data(), n);
    Buf<float> dx(be, x), o2(be, n, 0.0f), d2(be, dout);
    be.gelu_forward(o2, dx, n);
    be.gelu_backward(d2, dx, d2, n);  // in place, as the model uses it
    const auto o2h = o2.host(), d2h = d2.host();
    for (size_t i = 0; i < n; i++) {
      const double ax = std::fabs(x[i]), cancel = 1e-6 * ax * (1.0 + ax * ax);
      BOOST_CHECK_MESSAGE(std::fabs(o2h[i] - o1[i]) <= rtol * std::fabs(o1[i]) + cancel,
                          "gelu out x=" << x[i] << " got=" << o2h[i] << " ref=" << o1[i]);
      BOOST_CHECK_MESSAGE(std::fabs(d2h[i] - d1[i]) <= rtol * std::fabs(d1[i]) + cancel * std::fabs(dout[i]),
                          "gelu dinp x=" << x[i] << " got=" << d2h[i] << " ref=" << d1[i]);
    }
    auto y = randn(n, 52);
    ref().residual_forward(o1.data(), x.data(), y.data(), n);
    Buf<float> dy(be, y);
    be.residual_forward(o2, dx, dy, n);
    if (residual_exact) BOOST_TEST(o1 == o2.host());
    else check_close(o2.host(), o1, "residual", rtol);
  }
}

inline void check_crossentropy(const Backend& be, double rtol) {
  for (auto [N, V, Vp] : {std::tuple{1, 1, 1}, {9, 37, 64}, {64, 128, 128}, {17, 300, 320}}) {
    auto logits = randn((size_t)N * Vp, 60, 3.0f);
    auto targets = randint(N, V, 61);
    if (N > 3) targets[2] = -1;  // ignored position
    for (int n = 0; n < N; n++)  // padded columns hold large values that must not leak into the loss
      for (int j = V; j < Vp; j++) logits[(size_t)n * Vp + j] = 50.0f;
    // targets >= V: the target column is on another rank (vocab-parallel). Column V is NaN where it exists and
    // 1 << 30 lies outside the buffer, so reading logits at the target column shows up.
    if (N > 3) targets[3] = V;
    if (N > 3 && Vp > V) logits[(size_t)3 * Vp + V] = NAN;
    if (N > 5) targets[N - 1] = 1 << 30;
    std::vector<float> loss1(N), lse1(N, NAN);
    ref().crossentropy_forward(loss1.data(), lse1.data(), logits.data(), targets.data(), N, V, Vp);
    for (int n = 0; n < N; n++) BOOST_REQUIRE_MESSAGE(std::isfinite(lse1[n]), "reference lse not written, row " << n);
    Buf<float> d_logits(be, logits), loss2(be, N, 0.0f), lse2(be, N, NAN);  // lse must be written on every row
    Buf<int32_t> d_targets(be, targets);
    be.crossentropy_forward(loss2, lse2, d_logits, d_targets, N, V, Vp);
    const auto loss2h = loss2.host(), lse2h = lse2.host();
    check_close(loss2h, loss1, "crossentropy losses", rtol);
    check_close(lse2h, lse1, "crossentropy lse", rtol);
    if (N > 3) BOOST_TEST(loss2h[2] == 0.0f);
    for (int n = 0; n < N; n++)
      if (targets[n] >= V) BOOST_TEST(loss2h[n] == lse2h[n], "target >= V: loss == lse, row " << n);
    std::vector<float> d1(logits.size());
    ref().crossentropy_backward(d1.data(), logits.data(), lse1.data(), targets.data(), 0.25f, N, V, Vp);
    Buf<float> lse1d(be, lse1);
    be.crossentropy_backward(d_logits, d_logits, lse1d, d_targets, 0.25f, N, V, Vp);  // in place
    const auto d2 = d_logits.host();
    check_close(d2, d1, "crossentropy dlogits (in place)", rtol);
    for (int n = 0; n < N; n++) {
      double rowsum = 0.0;
      for (int j = 0; j < Vp; j++) rowsum += d2[(size_t)n * Vp + j];
      // softmax - onehot sums to zero; softmax alone (target >= V) to dloss; an ignored row is all zeros
      BOOST_CHECK_SMALL(rowsum - (targets[n] >= V ? 0.25 : 0.0), 1e-5);
      for (int j = V; j < Vp; j++) BOOST_REQUIRE_EQUAL(d2[(size_t)n * Vp + j], 0.0f);
      if (targets[n] < 0)
        for (int j = 0; j < Vp; j++) BOOST_REQUIRE_EQUAL(d2[(size_t)n * Vp + j], 0.0f);
    }
  }
}

// Vocab-parallel cross-entropy on one backend: the columns [0, V) of [N, Vp] logits split into [0, V0) and [V0, V),
// each half a padded [N, Vk + 3] matrix with local targets (target - offset where the column is local, a value >= Vk
// otherwise, -1 kept for ignored rows). The halves' lse combined by log-sum-exp in double give the global lse, and
// loss = lse_global - (lse_holder - loss_holder) (the holder's loss is its lse minus the target logit) equals the
// unsplit loss within 1e-5 relative (absolute 1e-5 below 1: a loss near 0 is a difference of two ~lse-sized numbers).
// Backward on each half with the global lse equals the unsplit backward's columns within 1e-6 absolute.
inline void check_crossentropy_vocab_parallel(const Backend& be) {
  const float dloss = 0.25f;
  for (auto [N, V, Vp, V0] : {std::tuple{9, 37, 64, 18}, {40, 300, 320, 160}, {5, 2, 2, 1}}) {
    const std::string shape = std::to_string(N) + "x" + std::to_string(V) + "/" + std::to_string(Vp);
    auto logits = randn((size_t)N * Vp, 94, 3.0f);
    for (int n = 0; n < N; n++)
      for (int j = V; j < Vp; j++) logits[(size_t)n * Vp + j] = 50.0f;
    auto targets = randint(N, V, 95);
    targets[1] = -1;  // ignored
    targets[2] = 0;   // first column of the first half
    targets[3] = V0;  // first column of the second half
    Buf<float> d_logits(be, logits), loss(be, N, 0.0f), lse(be, N, 0.0f), dlogits(be, logits.size(), 0.0f);
    Buf<int32_t> d_targets(be, targets);
    be.crossentropy_forward(loss, lse, d_logits, d_targets, N, V, Vp);
    be.crossentropy_backward(dlogits, d_logits, lse, d_targets, dloss, N, V, Vp);
    const auto want_loss = loss.host(), want_lse = lse.host(), want_d = dlogits.host();
    std::vector<float> loss_k[2], lse_k[2], logits_k[2];
    std::vector<int32_t> targets_k[2];
    const int offs[2] = {0, V0}, widths[2] = {V0, V - V0};
    for (int k : {0, 1}) {
      const int off = offs[k], Vk = widths[k], Vpk = Vk + 3;
      logits_k[k].assign((size_t)N * Vpk, 50.0f);
      targets_k[k].resize(N);
      for (int n = 0; n < N; n++) {
        for (int j = 0; j < Vk; j++) logits_k[k][(size_t)n * Vpk + j] = logits[(size_t)n * Vp + off + j];
        const int t = targets[n];
        targets_k[k][n] = t < 0 ? -1 : t >= off && t < off + Vk ? t - off : Vk + n % 4;  // Vk..Vk+3: the padding
      }
      Buf<float> d_lk(be, logits_k[k]), d_loss(be, N, 0.0f), d_lse(be, N, 0.0f);
      Buf<int32_t> d_tk(be, targets_k[k]);
      be.crossentropy_forward(d_loss, d_lse, d_lk, d_tk, N, Vk, Vpk);
      loss_k[k] = d_loss.host();
      lse_k[k] = d_lse.host();
    }
    std::vector<float> lse_global(N);
    for (int n = 0; n < N; n++) {
      const double a = lse_k[0][n], b = lse_k[1][n], m = std::max(a, b);
      const double g = m + std::log(std::exp(a - m) + std::exp(b - m));
      lse_global[n] = (float)g;
      BOOST_CHECK_MESSAGE(std::fabs(g - want_lse[n]) <= 1e-5 * std::max(1.0, std::fabs((double)want_lse[n])),
                          "vocab-parallel lse " << shape << " row " << n << ": " << g << " vs " << want_lse[n]);
      if (targets[n] < 0) continue;
      const int holder = targets[n] < V0 ? 0 : 1;
      const double got = g - ((double)lse_k[holder][n] - loss_k[holder][n]);
      BOOST_CHECK_MESSAGE(std::fabs(got - want_loss[n]) <= 1e-5 * std::max(1.0, std::fabs((double)want_loss[n])),
                          "vocab-parallel loss " << shape << " row " << n << ": " << got << " vs " << want_loss[n]);
      BOOST_TEST(loss_k[1 - holder][n] == lse_k[1 - holder][n], "non-holder loss == lse, row " << n);
    }
    BOOST_TEST((loss_k[0][1] == 0.0f && loss_k[1][1] == 0.0f), "ignored row: loss 0 on both halves");
    Buf<float> d_lse_global(be, lse_global);
    for (int k : {0, 1}) {
      const int off = offs[k], Vk = widths[k], Vpk = Vk + 3;
      Buf<float> d_lk(be, logits_k[k]), d_dk(be, logits_k[k].size(), 9.0f);
      Buf<int32_t> d_tk(be, targets_k[k]);
      be.crossentropy_backward(d_dk, d_lk, d_lse_global, d_tk, dloss, N, Vk, Vpk);
      const auto dk = d_dk.host();
      double worst = 0.0;
      for (int n = 0; n < N; n++) {
        for (int j = 0; j < Vk; j++)
          worst = std::max(worst, (double)std::fabs(dk[(size_t)n * Vpk + j] - want_d[(size_t)n * Vp + off + j]));
        for (int j = Vk; j < Vpk; j++) BOOST_REQUIRE_EQUAL(dk[(size_t)n * Vpk + j], 0.0f);
      }
      BOOST_CHECK_MESSAGE(worst <= 1e-6, "vocab-parallel dlogits half " << k << " " << shape << ": worst " << worst);
    }
  }
}

// argmax_rows: exact (an index), against a plain loop with torch.argmax's rule, including ties (the first wins),
// NaN (the first NaN wins, also in column 0), padding columns >= V holding larger values, and rows wider than a
// GPU block.
inline void check_argmax(const Backend& be) {
  for (auto [N, V, Vp] : {std::tuple{1, 1, 1}, {7, 5, 8}, {33, 300, 320}, {4, 50257, 50304}}) {
    auto x = randn((size_t)N * Vp, 70);
    for (int n = 0; n < N; n++) {
      float* row = x.data() + (size_t)n * Vp;
      for (int j = V; j < Vp; j++) row[j] = 100.0f;                     // never real: must be ignored
      if (n % 4 == 1 && V > 3) row[V - 1] = row[V / 2] = 50.0f;         // tie: the first index wins
      if (n % 4 == 2 && V > 3) row[V - 2] = NAN, row[V / 3 + 1] = NAN;  // NaN: the first NaN wins
      if (n % 4 == 3) row[0] = NAN;
    }
    std::vector<int32_t> want(N);
    for (int n = 0; n < N; n++) {
      const float* row = x.data() + (size_t)n * Vp;
      int best = -1;
      for (int j = 0; j < V && best < 0; j++)
        if (std::isnan(row[j])) best = j;
      if (best < 0) {
        best = 0;
        for (int j = 1; j < V; j++)
          if (row[j] > row[best]) best = j;
      }
      want[n] = best;
    }
    Buf<float> d_x(be, x);
    Buf<int32_t> d_out(be, (size_t)N, -1);
    be.argmax_rows(d_out, d_x, N, V, Vp);
    BOOST_TEST(d_out.host() == want, "argmax N=" << N << " V=" << V << " Vp=" << Vp);
  }
}

// copy_rows: the k|v columns of 5 qkv rows (pitch 3C) into a packed [5, 2C] buffer and back into a [5, 3C] one whose
// q columns must stay as they were (context parallelism's K/V all-gather packs and unpacks this way).
inline void check_copy_rows(const Backend& be) {
  const int rows = 5, C = 6;
  const auto qkv = randn((size_t)rows * 3 * C, 71);
  Buf<float> d_qkv(be, qkv), d_kv(be, (size_t)rows * 2 * C, -1.0f), d_back(be, (size_t)rows * 3 * C, 7.0f);
  const size_t kv_row = sizeof(float) * 2 * C, qkv_row = sizeof(float) * 3 * C;
  be.copy_rows(d_kv, kv_row, static_cast<const float*>(d_qkv) + C, qkv_row, kv_row, rows);
  be.copy_rows(static_cast<float*>(d_back) + C, qkv_row, d_kv, kv_row, kv_row, rows);
  const std::vector<float> kv = d_kv.host(), back = d_back.host();
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < 3 * C; c++) {
      const float want_back = c < C ? 7.0f : qkv[(size_t)r * 3 * C + c];
      BOOST_TEST(back[(size_t)r * 3 * C + c] == want_back, "copy_rows back row " << r << " column " << c);
      if (c >= C) BOOST_TEST(kv[(size_t)r * 2 * C + c - C] == qkv[(size_t)r * 3 * C + c], "copy_rows packed");
    }
}

inline void check_optimizer(const Backend& be, double rtol, bool exact) {
  const size_t n = 100003;
  auto p1 = randn(n, 70), g = randn(n, 71), m1 = randn(n, 72, 0.1f), v1 = randn(n, 73, 0.1f);
  for (auto& x : v1) x = x * x;
  Buf<float> p2(be, p1), dg(be, g), m2(be, m1), v2(be, v1);
  AdamWParams hp;
  hp.lr = 3e-3f;
  hp.weight_decay = 0.1f;
  hp.step = 7;
  hp.grad_scale = 0.5f;
  ref().adamw_update(p1.data(), g.data(), m1.data(), v1.data(), n, hp);
  be.adamw_update(p2, dg, m2, v2, n, hp);
  if (exact) {
    BOOST_TEST(p1 == p2.host());
    BOOST_TEST(m1 == m2.host());
    BOOST_TEST(v1 == v2.host());
  } else {
    check_close(p2.host(), p1, "adamw params", rtol);
    check_close(m2.host(), m1, "adamw m", rtol);
    check_close(v2.host(), v1, "adamw v", rtol);
  }
  BOOST_CHECK_CLOSE(ref().squared_norm(g.data(), n), be.squared_norm(dg, n), 1e-10);
  auto s1 = g;
  ref().scale(s1.data(), 0.3f, n);
  be.scale(dg, 0.3f, n);
  BOOST_TEST(s1 == dg.host());
}

}  // namespace ops_checks
