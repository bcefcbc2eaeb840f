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
#include <random>
#include <string>
#include <tuple>
#include <vector>

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
  }
}

inline void check_layernorm(const Backend& be, double rtol) {
  for (auto [N, C] : {std::pair{1, 1}, {5, 7}, {33, 64}, {70, 129}}) {
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
    ref().layernorm_backward(dx1.data(), dw1.data(), db1.data(), dout.data(), x.data(), w.data(), m1.data(),
                             r1.data(), N, C);
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
        ref().matmul_backward(dx1.data(), dw1.data(), with_bias ? db1.data() : nullptr, dout.data(), x.data(),
                              w.data(), N, C, OC, layout);
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

inline void check_attention(const Backend& be, double rtol) {
  check_attention_shapes(be, rtol, {{1, 1, 8, 2}, {2, 7, 24, 3}, {3, 33, 30, 5}, {2, 64, 64, 4}, {1, 80, 128, 2}});
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
    std::vector<float> loss1(N), lse1(N);
    ref().crossentropy_forward(loss1.data(), lse1.data(), logits.data(), targets.data(), N, V, Vp);
    Buf<float> d_logits(be, logits), loss2(be, N, 0.0f), lse2(be, N, 0.0f);
    Buf<int32_t> d_targets(be, targets);
    be.crossentropy_forward(loss2, lse2, d_logits, d_targets, N, V, Vp);
    check_close(loss2.host(), loss1, "crossentropy losses", rtol);
    check_close(lse2.host(), lse1, "crossentropy lse", rtol);
    if (N > 3) BOOST_TEST(loss2.host()[2] == 0.0f);
    std::vector<float> d1(logits.size());
    ref().crossentropy_backward(d1.data(), logits.data(), lse1.data(), targets.data(), 0.25f, N, V, Vp);
    Buf<float> lse1d(be, lse1);
    be.crossentropy_backward(d_logits, d_logits, lse1d, d_targets, 0.25f, N, V, Vp);  // in place
    const auto d2 = d_logits.host();
    check_close(d2, d1, "crossentropy dlogits (in place)", rtol);
    for (int n = 0; n < N; n++) {
      double rowsum = 0.0;
      for (int j = 0; j < Vp; j++) rowsum += d2[(size_t)n * Vp + j];
      BOOST_CHECK_SMALL(rowsum, 1e-5);  // softmax - onehot sums to zero
      for (int j = V; j < Vp; j++) BOOST_REQUIRE_EQUAL(d2[(size_t)n * Vp + j], 0.0f);
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
      for (int j = V; j < Vp; j++) row[j] = 100.0f;  // never real: must be ignored
      if (n % 4 == 1 && V > 3) row[V - 1] = row[V / 2] = 50.0f;  // tie: the first index wins
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
