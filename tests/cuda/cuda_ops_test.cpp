// Every CUDA op against the CPU reference, forward and backward, on odd shapes (fp32 tolerances stated).
#define BOOST_TEST_MODULE cuda_ops
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "cairn/kernels/backend.h"
#include "cairn/kernels/cuda.h"

using namespace cairn::kernels;

namespace {

// fp32 tolerance: both sides accumulate in fp32 in different orders; relative to the tensor's max.
constexpr double kRelTol = 1e-4;

const Backend& gpu() { return *cuda_backend_or_null(); }
const Backend& ref() { return cpu_reference_backend(); }

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

struct DeviceBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  DeviceBuffer(size_t b) : ptr(gpu().alloc(b)), bytes(b) {}
  template <typename T>
  DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size() * sizeof(T)) {
    gpu().copy_to_device(ptr, host.data(), bytes);
  }
  ~DeviceBuffer() { gpu().free(ptr); }
  float* f() { return static_cast<float*>(ptr); }
  int32_t* i() { return static_cast<int32_t*>(ptr); }
  std::vector<float> host() const {
    std::vector<float> out(bytes / sizeof(float));
    gpu().copy_to_host(out.data(), ptr, bytes);
    return out;
  }
};

void expect_close(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  BOOST_REQUIRE_EQUAL(got.size(), want.size());
  double maxabs = 1e-6, maxerr = 0.0;
  for (size_t i = 0; i < want.size(); i++) {
    maxabs = std::max(maxabs, (double)std::fabs(want[i]));
    maxerr = std::max(maxerr, (double)std::fabs(got[i] - want[i]));
  }
  BOOST_TEST_INFO(what << ": max abs error " << maxerr << " vs max |ref| " << maxabs);
  BOOST_TEST(maxerr / maxabs <= kRelTol);
}

struct RequireGpu {
  RequireGpu() {
    std::string why = cuda_unavailable_reason();
    if (!why.empty()) {
      std::printf("SKIPPED: %s (the gpu tests run on a machine with an NVIDIA GPU)\n", why.c_str());
      std::fflush(stdout);
      std::exit(77);
    }
  }
};
BOOST_TEST_GLOBAL_FIXTURE(RequireGpu);

}  // namespace

BOOST_AUTO_TEST_CASE(matmul_both_layouts_with_bias) {
  const int N = 37, C = 48, OC = 70;
  for (WeightLayout layout : {WeightLayout::InOut, WeightLayout::OutIn}) {
    auto inp = randn((size_t)N * C, 1), w = randn((size_t)C * OC, 2), bias = randn(OC, 3), dout = randn((size_t)N * OC, 4);
    std::vector<float> out(N * OC), dinp(N * C), dw(C * OC, 0.5f), db(OC, 0.25f);
    ref().matmul_forward(out.data(), inp.data(), w.data(), bias.data(), N, C, OC, layout);
    ref().matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, C, OC, layout);
    DeviceBuffer d_inp(inp), d_w(w), d_bias(bias), d_dout(dout), d_out(out.size() * 4), d_dinp(dinp.size() * 4),
        d_dw(std::vector<float>(C * OC, 0.5f)), d_db(std::vector<float>(OC, 0.25f));
    gpu().matmul_forward(d_out.f(), d_inp.f(), d_w.f(), d_bias.f(), N, C, OC, layout);
    gpu().matmul_backward(d_dinp.f(), d_dw.f(), d_db.f(), d_dout.f(), d_inp.f(), d_w.f(), N, C, OC, layout);
    expect_close(d_out.host(), out, "matmul out");
    expect_close(d_dinp.host(), dinp, "matmul dinp");
    expect_close(d_dw.host(), dw, "matmul dweight (accumulated)");
    expect_close(d_db.host(), db, "matmul dbias (accumulated)");
  }
}

BOOST_AUTO_TEST_CASE(layernorm_forward_backward) {
  const int N = 29, C = 96;
  auto inp = randn((size_t)N * C, 5, 2.0f), w = randn(C, 6), b = randn(C, 7), dout = randn((size_t)N * C, 8);
  std::vector<float> out(N * C), mean(N), rstd(N), dinp(N * C, 0.1f), dw(C, 0.0f), db(C, 0.0f);
  ref().layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
  ref().layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), mean.data(), rstd.data(), N, C);
  DeviceBuffer d_inp(inp), d_w(w), d_b(b), d_dout(dout), d_out(out.size() * 4), d_mean(N * 4), d_rstd(N * 4),
      d_dinp(std::vector<float>(N * C, 0.1f)), d_dw(C * 4), d_db(C * 4);
  gpu().layernorm_forward(d_out.f(), d_mean.f(), d_rstd.f(), d_inp.f(), d_w.f(), d_b.f(), N, C);
  gpu().layernorm_backward(d_dinp.f(), d_dw.f(), d_db.f(), d_dout.f(), d_inp.f(), d_w.f(), d_mean.f(), d_rstd.f(), N, C);
  expect_close(d_out.host(), out, "layernorm out");
  expect_close(d_dinp.host(), dinp, "layernorm dinp (accumulated)");
  expect_close(d_dw.host(), dw, "layernorm dweight");
  expect_close(d_db.host(), db, "layernorm dbias");
}

BOOST_AUTO_TEST_CASE(attention_forward_backward) {
  const int B = 2, T = 33, NH = 3, C = NH * 40;
  auto qkv = randn((size_t)B * T * 3 * C, 9), dout = randn((size_t)B * T * C, 10);
  std::vector<float> out(B * T * C), lse(B * NH * T), dqkv(B * T * 3 * C);
  ref().attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH);
  ref().attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH);
  DeviceBuffer d_qkv(qkv), d_dout(dout), d_out(out.size() * 4), d_lse(lse.size() * 4), d_dqkv(dqkv.size() * 4);
  gpu().attention_forward(d_out.f(), d_lse.f(), d_qkv.f(), B, T, C, NH);
  gpu().attention_backward(d_dqkv.f(), d_dout.f(), d_qkv.f(), d_out.f(), d_lse.f(), B, T, C, NH);
  expect_close(d_out.host(), out, "attention out");
  expect_close(d_lse.host(), lse, "attention lse");
  expect_close(d_dqkv.host(), dqkv, "attention dqkv");
}

BOOST_AUTO_TEST_CASE(embedding_gelu_residual_scale) {
  const int B = 3, T = 17, C = 24, V = 50;
  std::vector<int32_t> tokens(B * T);
  for (int i = 0; i < B * T; i++) tokens[i] = (i * 7) % V;  // repeated tokens exercise accumulation
  auto wte = randn((size_t)V * C, 11), wpe = randn((size_t)T * C, 12), dout = randn((size_t)B * T * C, 13);
  std::vector<float> out(B * T * C), dwte(V * C, 0.0f), dwpe(T * C, 0.0f);
  ref().embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  ref().embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
  DeviceBuffer d_tok(tokens), d_wte(wte), d_wpe(wpe), d_dout(dout), d_out(out.size() * 4), d_dwte(dwte.size() * 4),
      d_dwpe(dwpe.size() * 4);
  gpu().embedding_forward(d_out.f(), d_tok.i(), d_wte.f(), d_wpe.f(), B, T, C);
  gpu().embedding_backward(d_dwte.f(), d_dwpe.f(), d_dout.f(), d_tok.i(), B, T, C);
  expect_close(d_out.host(), out, "embedding out");
  expect_close(d_dwte.host(), dwte, "embedding dwte");
  expect_close(d_dwpe.host(), dwpe, "embedding dwpe");

  const size_t n = 1001;
  auto x = randn(n, 14, 3.0f), g = randn(n, 15);
  std::vector<float> y(n), dx(n), r(n);
  ref().gelu_forward(y.data(), x.data(), n);
  ref().gelu_backward(dx.data(), x.data(), g.data(), n);
  ref().residual_forward(r.data(), x.data(), g.data(), n);
  DeviceBuffer d_x(x), d_g(g), d_y(n * 4), d_dx(n * 4), d_r(n * 4);
  gpu().gelu_forward(d_y.f(), d_x.f(), n);
  gpu().gelu_backward(d_dx.f(), d_x.f(), d_g.f(), n);
  gpu().residual_forward(d_r.f(), d_x.f(), d_g.f(), n);
  expect_close(d_y.host(), y, "gelu out");
  expect_close(d_dx.host(), dx, "gelu dinp");
  expect_close(d_r.host(), r, "residual");
  ref().scale(r.data(), 0.5f, n);
  gpu().scale(d_r.f(), 0.5f, n);
  expect_close(d_r.host(), r, "scale");
  double sq_ref = ref().squared_norm(x.data(), n), sq_gpu = gpu().squared_norm(d_x.f(), n);
  BOOST_TEST(std::fabs(sq_gpu - sq_ref) / sq_ref < 1e-9);
}

BOOST_AUTO_TEST_CASE(crossentropy_with_padding_and_ignored_targets) {
  const int N = 21, V = 67, Vp = 128;
  auto logits = randn((size_t)N * Vp, 16, 2.0f);
  std::vector<int32_t> targets(N);
  for (int i = 0; i < N; i++) targets[i] = i % 5 == 4 ? -1 : (i * 13) % V;
  std::vector<float> losses(N), lse(N), dlogits(N * Vp);
  ref().crossentropy_forward(losses.data(), lse.data(), logits.data(), targets.data(), N, V, Vp);
  ref().crossentropy_backward(dlogits.data(), logits.data(), lse.data(), targets.data(), 1.0f / N, N, V, Vp);
  DeviceBuffer d_logits(logits), d_t(targets), d_losses(N * 4), d_lse(N * 4);
  gpu().crossentropy_forward(d_losses.f(), d_lse.f(), d_logits.f(), d_t.i(), N, V, Vp);
  gpu().crossentropy_backward(d_logits.f(), d_logits.f(), d_lse.f(), d_t.i(), 1.0f / N, N, V, Vp);  // in place
  expect_close(d_losses.host(), losses, "crossentropy losses");
  expect_close(d_logits.host(), dlogits, "crossentropy dlogits (in place)");
}

BOOST_AUTO_TEST_CASE(adamw_matches_cpu) {
  const size_t n = 777;
  auto p = randn(n, 17), g = randn(n, 18);
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  AdamWParams hp;
  hp.lr = 3e-3f;
  hp.weight_decay = 0.1f;
  hp.grad_scale = 0.5f;
  DeviceBuffer d_p(p), d_g(g), d_m(n * 4), d_v(n * 4);
  for (long step = 1; step <= 3; step++) {
    hp.step = step;
    ref().adamw_update(p.data(), g.data(), m.data(), v.data(), n, hp);
    gpu().adamw_update(d_p.f(), d_g.f(), d_m.f(), d_v.f(), n, hp);
  }
  expect_close(d_p.host(), p, "adamw params");
  expect_close(d_m.host(), m, "adamw m");
  expect_close(d_v.host(), v, "adamw v");
}
