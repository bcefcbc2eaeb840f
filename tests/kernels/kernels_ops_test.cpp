// Checks every op of the fast CPU backend against the reference backend on random small and odd shapes.
// Tolerance (fp32): 1e-5 relative with a tensor-scaled floor (see ops_checks.h); embeddings, residual adds and
// AdamW must match bitwise (the same arithmetic in both backends).
#define BOOST_TEST_MODULE kernels_ops
#include <omp.h>

#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <string>
#include <utility>
#include <vector>

#include "cairn/kernels/profile.h"
#include "ops_checks.h"

using namespace ops_checks;

namespace {
constexpr double kRtol = 1e-5;
const Backend& fast() { return cpu_backend(); }
}  // namespace

#ifdef CAIRN_OPENBLAS_OPENMP_BUILD
extern "C" int openblas_get_parallel(void);
// The OpenMP build of OpenBLAS is the one loaded (RUNPATH over the system alternative): the pthreads build's own pool
// fought OpenMP's threads (cairn-train at 2 threads: 4004 against 7673 tokens/s).
BOOST_AUTO_TEST_CASE(openblas_is_the_openmp_build) { BOOST_TEST(openblas_get_parallel() == 2); }
#endif

BOOST_AUTO_TEST_CASE(registry) {
  BOOST_TEST(find_backend("cpu") == &cpu_backend());
  BOOST_TEST(find_backend("cpu-ref") == &cpu_reference_backend());
  BOOST_TEST(find_backend("nope") == nullptr);
  BOOST_TEST(std::string(backend_names()).find("cpu-ref") != std::string::npos);
  BOOST_TEST(backend_unavailable_reason("cpu") == nullptr);
  BOOST_TEST(!backend_unavailable_is_failure("cpu"));
  BOOST_TEST(!backend_unavailable_is_failure("tpu"));  // unknown: a usage error, not a failure
  BOOST_TEST(std::string(backend_unavailable_reason("tpu")).find("unknown backend \"tpu\"") != std::string::npos);
  float* p = static_cast<float*>(fast().alloc(sizeof(float) * 100));
  for (int i = 0; i < 100; i++) BOOST_REQUIRE_EQUAL(p[i], 0.0f);
  fast().free(p);
}

// Every op of CAIRN_KERNEL_OPS is set in every backend of this build and in the profiling wrapper.
BOOST_AUTO_TEST_CASE(no_missing_ops) {
  std::vector<std::pair<std::string, const Backend*>> backends = {{"cpu", &cpu_backend()},
                                                                  {"cpu-ref", &cpu_reference_backend()},
                                                                  {"profiled cpu", &profiled_backend(cpu_backend())}};
  if (const Backend* cuda = find_backend("cuda")) backends.emplace_back("cuda", cuda);
  for (const auto& [name, b] : backends) {
#define CAIRN_CHECK_OP(op) BOOST_TEST((b->op != nullptr), name << " lacks " #op);
    CAIRN_KERNEL_OPS(CAIRN_CHECK_OP)
#undef CAIRN_CHECK_OP
  }
  BOOST_TEST(kKernelOpCount == 20);
}

BOOST_AUTO_TEST_CASE(embedding) { check_embedding(fast(), kRtol); }
BOOST_AUTO_TEST_CASE(layernorm) { check_layernorm(fast(), kRtol); }
BOOST_AUTO_TEST_CASE(matmul) { check_matmul(fast(), kRtol); }
BOOST_AUTO_TEST_CASE(attention) { check_attention(fast(), kRtol); }
// Context parallelism within one backend: chunked block ops (load-balanced chunk order, dK/dV accumulated over the
// chunks) reproduce the same backend's whole-sequence attention to 1e-6 (the forward and dq are the same sums in the
// same order; only dK/dV add per-chunk partial sums).
BOOST_AUTO_TEST_CASE(attention_context_parallel_split) {
  check_attention_context_parallel(ref(), ref(), 1e-6);
  check_attention_context_parallel(fast(), fast(), 1e-6);
}
BOOST_AUTO_TEST_CASE(gelu_and_residual) { check_gelu_residual(fast(), kRtol, true); }
BOOST_AUTO_TEST_CASE(crossentropy) { check_crossentropy(fast(), kRtol); }
BOOST_AUTO_TEST_CASE(argmax) { check_argmax(fast()); }
BOOST_AUTO_TEST_CASE(embedding_vocab_parallel) {
  check_embedding_vocab_parallel(fast());
  check_embedding_vocab_parallel(ref());
}
BOOST_AUTO_TEST_CASE(crossentropy_vocab_parallel) {
  check_crossentropy_vocab_parallel(fast());
  check_crossentropy_vocab_parallel(ref());
}

// The vocab-parallel semantics by hand, on the reference (which defines them) and the fast backend: a negative id
// drops the wte term, a null wpe the positional one; a target >= V gives loss == lse without reading the target
// column, and a pure softmax * dloss gradient row; an ignored row still gets its lse.
BOOST_AUTO_TEST_CASE(vocab_parallel_semantics_by_hand) {
  for (const Backend* be : {&ref(), &fast()}) {
    BOOST_TEST_CONTEXT(be->name) {
      const float wte[2 * 3] = {1, 2, 3, 4, 5, 6}, wpe[2 * 3] = {10, 20, 30, 40, 50, 60};
      const int32_t inp[2] = {-1, 1};
      float out[6];
      be->embedding_forward(out, inp, wte, wpe, 1, 2, 3);
      BOOST_TEST((std::vector<float>(out, out + 6) == std::vector<float>{10, 20, 30, 44, 55, 66}));
      be->embedding_forward(out, inp, wte, nullptr, 1, 2, 3);
      BOOST_TEST((std::vector<float>(out, out + 6) == std::vector<float>{0, 0, 0, 4, 5, 6}));
      const int32_t none[2] = {-3, -1};
      be->embedding_forward(out, none, wte, nullptr, 1, 2, 3);
      BOOST_TEST((std::vector<float>(out, out + 6) == std::vector<float>(6, 0.0f)));
      const float dout[6] = {1, 1, 1, 2, 2, 2};
      float dwte[6] = {}, dwpe[6] = {};
      be->embedding_backward(dwte, dwpe, dout, inp, 1, 2, 3);
      BOOST_TEST((std::vector<float>(dwte, dwte + 6) == std::vector<float>{0, 0, 0, 2, 2, 2}));
      BOOST_TEST((std::vector<float>(dwpe, dwpe + 6) == std::vector<float>{1, 1, 1, 2, 2, 2}));
      be->embedding_backward(dwte, nullptr, dout, inp, 1, 2, 3);
      BOOST_TEST((std::vector<float>(dwte, dwte + 6) == std::vector<float>{0, 0, 0, 4, 4, 4}));

      // rows: target 2 (normal), target 4 == V (column 4 is padding holding NaN), target -1 (ignored)
      const int N = 3, V = 4, Vp = 5;
      const float logits[N * Vp] = {0.5f, -1, 2, 0, NAN, 1, 3, -2, 0.25f, NAN, -1, 0, 1, 2, NAN};
      const int32_t targets[N] = {2, 4, -1};
      float losses[N] = {7, 7, 7}, lse[N] = {NAN, NAN, NAN};
      be->crossentropy_forward(losses, lse, logits, targets, N, V, Vp);
      for (int n = 0; n < N; n++) {
        double m = -1e300, s = 0.0;
        for (int j = 0; j < V; j++) m = std::max(m, (double)logits[n * Vp + j]);
        for (int j = 0; j < V; j++) s += std::exp(logits[n * Vp + j] - m);
        const double want = m + std::log(s);
        BOOST_CHECK_SMALL(lse[n] - want, 1e-5);
        if (n == 1) BOOST_TEST(losses[n] == lse[n]);
        if (n == 2) BOOST_TEST(losses[n] == 0.0f);
        if (n == 0) BOOST_CHECK_SMALL(losses[n] - (want - 2.0), 1e-5);
      }
      const float dloss = 0.5f;
      float dl[N * Vp];
      std::fill(dl, dl + N * Vp, 3.0f);
      be->crossentropy_backward(dl, logits, lse, targets, dloss, N, V, Vp);
      for (int n = 0; n < N; n++)
        for (int j = 0; j < Vp; j++) {
          double want = 0.0;
          if (targets[n] >= 0 && j < V)
            want = (std::exp((double)logits[n * Vp + j] - lse[n]) - (j == targets[n] ? 1.0 : 0.0)) * dloss;
          BOOST_CHECK_SMALL(dl[n * Vp + j] - want, 1e-6);
          if (targets[n] < 0 || j >= V) BOOST_TEST(dl[n * Vp + j] == 0.0f);
        }
      // backward uses the lse it is given (a global one under vocab parallelism): a larger lse scales the row
      const float lse_global[N] = {lse[0] + 1.0f, lse[1] + 1.0f, lse[2]};
      be->crossentropy_backward(dl, logits, lse_global, targets, dloss, N, V, Vp);
      for (int j = 0; j < V; j++)
        BOOST_CHECK_SMALL(dl[Vp + j] - std::exp((double)logits[Vp + j] - lse[1] - 1.0) * dloss, 1e-6);
    }
  }
}
BOOST_AUTO_TEST_CASE(argmax_reference) { check_argmax(cpu_reference_backend()); }
BOOST_AUTO_TEST_CASE(copy_rows) {
  check_copy_rows(fast());
  check_copy_rows(cpu_reference_backend());
}
BOOST_AUTO_TEST_CASE(adamw_norm_scale) {
  check_optimizer(fast(), kRtol, true);
  // one element by hand (PyTorch AdamW order)
  float p = 1.0f, gr = 0.2f, m = 0.0f, v = 0.0f;
  AdamWParams h1;
  h1.lr = 0.1f;
  h1.weight_decay = 0.5f;
  h1.step = 1;
  ref().adamw_update(&p, &gr, &m, &v, 1, h1);
  // decay: 1 * (1 - 0.05) = 0.95; m = 0.02, v = 4e-5; mhat = 0.2, sqrt(vhat) = 0.2 -> step 0.1 * ~1
  BOOST_CHECK_CLOSE(p, 0.95 - 0.1 * 0.2 / (0.2 + 1e-8), 1e-4);
}

// The profiling wrapper forwards to the inner backend unchanged and counts calls per op.
BOOST_AUTO_TEST_CASE(profiled_backend_forwards_and_counts) {
  profile_reset();
  const Backend& prof = profiled_backend(fast());
  check_layernorm(prof, kRtol);
  check_optimizer(prof, kRtol, true);
  bool saw_layernorm = false, saw_norm = false;
  for (const auto& t : profile_report()) {
    if (t.op == "layernorm_forward") saw_layernorm = t.calls == 5;  // one per shape in check_layernorm
    if (t.op == "squared_norm") saw_norm = t.calls == 1;
    BOOST_TEST(t.seconds >= 0.0);
  }
  BOOST_TEST(saw_layernorm);
  BOOST_TEST(saw_norm);
  profile_reset();
  BOOST_TEST(profile_report().empty());
}

// Matmuls through the wrapper: results unchanged, and each call also counted under its shape (the GEMM table that
// cairn-plan calibrate --from-runs refits), backward apart with and without dinp.
BOOST_AUTO_TEST_CASE(profiled_backend_times_matmuls_by_shape) {
  profile_reset();
  check_matmul(profiled_backend(fast()), kRtol);  // 4 shapes x 2 layouts x 2 bias settings
  long forward_calls = 0;
  for (const auto& t : profile_report())
    if (t.op == "matmul_forward") forward_calls = t.calls;
  BOOST_TEST(forward_calls == 16);
  const auto shapes = profile_gemm_shapes();
  BOOST_TEST(shapes.size() == 12u);  // each shape: forward, backward with dinp, backward without
  int seen = 0;
  for (const auto& g : shapes) {
    BOOST_TEST(g.seconds >= 0.0);
    if (g.n == 33 && g.c == 64 && g.oc == 192) {
      ++seen;
      BOOST_TEST(g.calls == 4);
      BOOST_TEST((g.op == "matmul_forward" ? g.grad_input : true));
    }
  }
  BOOST_TEST(seen == 3);
  profile_reset();
  BOOST_TEST(profile_gemm_shapes().empty());
}

// The reference attention itself against a direct softmax computed in double (it defines the others).
BOOST_AUTO_TEST_CASE(attention_reference_vs_double) {
  const int B = 2, T = 5, C = 8, NH = 2, hd = C / NH;
  auto qkv = randn((size_t)B * T * 3 * C, 40);
  std::vector<float> out((size_t)B * T * C), lse((size_t)B * NH * T);
  ref().attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int i = 0; i < T; i++) {
        std::vector<double> s(i + 1);
        double mx = -1e300, sum = 0.0;
        for (int j = 0; j <= i; j++) {
          double dot = 0.0;
          for (int d = 0; d < hd; d++)
            dot += (double)qkv[((size_t)b * T + i) * 3 * C + h * hd + d] *
                   qkv[((size_t)b * T + j) * 3 * C + C + h * hd + d];
          s[j] = dot / std::sqrt((double)hd);
          mx = std::max(mx, s[j]);
        }
        for (int j = 0; j <= i; j++) sum += std::exp(s[j] - mx);
        for (int d = 0; d < hd; d++) {
          double o = 0.0;
          for (int j = 0; j <= i; j++)
            o += std::exp(s[j] - mx) / sum * qkv[((size_t)b * T + j) * 3 * C + 2 * C + h * hd + d];
          BOOST_CHECK_SMALL(out[((size_t)b * T + i) * C + h * hd + d] - o, 1e-5);
        }
        BOOST_CHECK_SMALL(lse[((size_t)b * NH + h) * T + i] - (mx + std::log(sum)), 1e-5);
      }
}

extern "C" int openblas_get_num_threads(void) __attribute__((weak));

// The fast backend's attention runs OpenBLAS inside its OpenMP loop over heads, one BLAS thread each: with 1 and 2
// threads of both (set_cpu_threads, as cairn-train sets them) and sequences of several 32-row tiles, the results are
// bitwise equal, and OpenBLAS's thread count is the caller's again afterwards.
BOOST_AUTO_TEST_CASE(fast_attention_tiles_are_thread_count_independent) {
  const int B = 2, T = 75, C = 64, NH = 2;
  auto qkv = randn((size_t)B * T * 3 * C, 90), dout = randn((size_t)B * T * C, 91);
  std::vector<std::vector<float>> results[2];
  for (int threads : {1, 2}) {
    set_cpu_threads(threads);
    std::vector<float> out((size_t)B * T * C), lse((size_t)B * NH * T), dqkv(qkv.size(), 7.0f);
    fast().attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH);
    fast().attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH);
    if (openblas_get_num_threads) BOOST_TEST(openblas_get_num_threads() == threads);
    results[threads - 1] = {out, lse, dqkv};
  }
  set_cpu_threads(1);
  for (size_t i = 0; i < results[0].size(); i++) BOOST_TEST((results[0][i] == results[1][i]), "result " << i);
}

// Reductions in the fast backend have a fixed order: results are bitwise equal for 1 and 2 threads.
BOOST_AUTO_TEST_CASE(fast_backend_is_thread_count_independent) {
  const int N = 37, C = 96, B = 2, T = 19, NH = 4;
  auto x = randn((size_t)N * C, 80), w = randn(C, 81), dout = randn((size_t)N * C, 82);
  std::vector<float> m(N), r(N), o(x.size());
  fast().layernorm_forward(o.data(), m.data(), r.data(), x.data(), w.data(), w.data(), N, C);
  auto qkv = randn((size_t)B * T * 3 * C, 83);
  std::vector<std::vector<float>> results[2];
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    std::vector<float> dx(x.size()), dw(C), db(C), ao((size_t)B * T * C), al((size_t)B * NH * T), dq(qkv.size());
    fast().layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), m.data(), r.data(), N,
                              C);
    fast().attention_forward(ao.data(), al.data(), qkv.data(), B, T, C, NH);
    fast().attention_backward(dq.data(), ao.data(), qkv.data(), ao.data(), al.data(), B, T, C, NH);
    // a block of 7 queries at position 5 of the same sequences (their q rows: rows 5.. of qkv); dK/dV added onto dq
    const int Tq = 7, q_pos = 5;
    std::vector<float> q_blk((size_t)B * Tq * 3 * C), bo((size_t)B * Tq * C), bl((size_t)B * NH * Tq),
        bdq(q_blk.size()), bdkv = dq;
    for (int b = 0; b < B; b++)
      std::copy_n(&qkv[((size_t)b * T + q_pos) * 3 * C], (size_t)Tq * 3 * C, &q_blk[(size_t)b * Tq * 3 * C]);
    fast().attention_forward_block(bo.data(), bl.data(), q_blk.data(), qkv.data(), B, Tq, T, q_pos, C, NH);
    fast().attention_backward_block(bdq.data(), bdkv.data(), bo.data(), q_blk.data(), qkv.data(), bo.data(), bl.data(),
                                    B, Tq, T, q_pos, C, NH);
    std::vector<float> norm{(float)fast().squared_norm(x.data(), x.size())};
    results[threads - 1] = {dx, dw, db, ao, al, dq, bo, bl, bdq, bdkv, norm};
  }
  for (size_t i = 0; i < results[0].size(); i++) BOOST_TEST((results[0][i] == results[1][i]), "result " << i);
}
