// Checks every op of the CUDA backend (fp32) against the CPU reference backend, forward and backward, and the
// matmuls again with precision = "bf16" (inputs rounded to bf16, fp32 accumulation). Attention twice: the tiled flash
// kernels (the default; kernels/cuda/flash_attention.cu) and the simple one-row-per-thread kernels, each vs the
// reference at 1e-4, flash also on tile-edge shapes (T = 1, 63, 64, 65, ..., head dims 32/64/128 and padded ones),
// at GPT-2 size (T 1024, 12 heads of 64), bitwise run to run, and against the simple kernels.
// Tolerance: 1e-4 relative with a tensor-scaled floor (ops_checks.h): cuBLAS and the GPU reductions sum in other
// orders and contract to FMA; bf16 matmuls 2e-2 (bf16 keeps 8 significant bits: ~4e-3 relative per input, which a
// dot product averages). Exits 77 (ctest: skipped) with the reason where there is no GPU or driver, 1 where
// the driver fails (too old for the runtime, ...).
// bf16 attention (precision = "bf16": the tensor-core flash kernels of kernels/cuda/flash_attention_bf16.cu, head dims
// 64 and 128): 2e-2 vs the fp32 reference (measured on the host emulation: <= 1e-2), and 2e-3 vs the host emulation
// of the same block code (flash_attention_bf16_tiles.h) on the same inputs, which only the tensor cores' summation
// order and the rounding of P / dS to bf16 at slightly different values separate: a fragment-layout error is O(1).
#define BOOST_TEST_MODULE kernels_cuda
#include <cuda_runtime.h>

#include <atomic>
#include <boost/test/unit_test.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <thread>

#include "../../kernels/emulation/flash_bf16_host.h"
#include "cairn/kernels/cuda.h"
#include "cairn/kernels/cuda_probe.h"
#include "ops_checks.h"

using namespace ops_checks;

namespace {
constexpr double kRtol = 1e-4;

// Skips (77) only where there is no GPU or no driver; a driver that fails is a failure (cairn/kernels/cuda_probe.h).
struct RequireGpu {
  RequireGpu() {
    const CudaProbe& cuda = probe_cuda();
    if (const int rc = cuda_unusable_exit_code(cuda)) {
      std::printf("%s: %s\n", rc == 77 ? "SKIPPED" : "FAILED", cuda.reason.c_str());
      std::exit(rc);
    }
  }
};
BOOST_TEST_GLOBAL_FIXTURE(RequireGpu);

const Backend& gpu() { return *find_backend("cuda"); }
}  // namespace

// A GPU and the libraries the backend loads on its first GEMM: what cairn-train and cairn-eval check at start.
BOOST_AUTO_TEST_CASE(backend_available_with_its_libraries) {
  const char* why = backend_unavailable_reason("cuda");
  BOOST_TEST(!why, (why ? why : ""));
  BOOST_TEST(cuda_libraries_error().empty());
}

BOOST_AUTO_TEST_CASE(memory_hooks) {
  BOOST_TEST(gpu().device_memory);
  Buf<float> b(gpu(), std::vector<float>{1, 2, 3});
  gpu().fill_zero(b.ptr + 1, sizeof(float));
  BOOST_TEST(b.host() == (std::vector<float>{1, 0, 3}));
}
// synchronize with a wait poll (cuda_set_wait_poll, which libcommon points at NCCL's asynchronous errors): while the
// legacy stream waits on work that cannot finish (a host function blocked on a flag, standing in for a collective
// whose peer died), the poll runs and its throw ends the wait; without a poll the same wait returns once released.
namespace {
std::atomic<bool> g_released{false};
std::atomic<int> g_polls{0};
}  // namespace
BOOST_AUTO_TEST_CASE(synchronize_wait_poll) {
  cudaStream_t side = nullptr;
  cudaEvent_t blocked = nullptr;
  BOOST_REQUIRE(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking) == cudaSuccess);
  BOOST_REQUIRE(cudaEventCreateWithFlags(&blocked, cudaEventDisableTiming) == cudaSuccess);
  auto wait_for_release = [](void*) {
    while (!g_released.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  };
  BOOST_REQUIRE(cudaLaunchHostFunc(side, wait_for_release, nullptr) == cudaSuccess);
  BOOST_REQUIRE(cudaEventRecord(blocked, side) == cudaSuccess);
  BOOST_REQUIRE(cudaStreamWaitEvent(cudaStreamLegacy, blocked, 0) == cudaSuccess);
  cuda_set_wait_poll([] {
    if (++g_polls >= 3) throw std::runtime_error("a peer failed");
  });
  BOOST_CHECK_THROW(gpu().synchronize(), std::runtime_error);
  BOOST_TEST(g_polls.load() >= 3);
  cuda_set_wait_poll(nullptr);
  g_released = true;
  gpu().synchronize();
  BOOST_TEST(cudaEventDestroy(blocked) == cudaSuccess);
  BOOST_TEST(cudaStreamDestroy(side) == cudaSuccess);
}
BOOST_AUTO_TEST_CASE(embedding) { check_embedding(gpu(), kRtol); }
BOOST_AUTO_TEST_CASE(layernorm) { check_layernorm(gpu(), kRtol); }
BOOST_AUTO_TEST_CASE(matmul) { check_matmul(gpu(), kRtol); }
// The column sums behind the layernorm and bias gradients at GPT-2 size (N = 8 x 1024 rows, C = 768): split over row
// chunks (norm.cu: 43 splits of 191 rows, partial sums added in a fixed order), += onto the gradients as the reference
// does, and bitwise equal run to run.
BOOST_AUTO_TEST_CASE(column_sums_gpt2_size_deterministic) {
  const int N = 8192, C = 768;
  auto x = randn((size_t)N * C, 40, 2.0f), w = randn(C, 41), dout = randn((size_t)N * C, 42);
  std::vector<float> o((size_t)N * C), mean(N), rstd(N);
  cpu_reference_backend().layernorm_forward(o.data(), mean.data(), rstd.data(), x.data(), w.data(), w.data(), N, C);
  const auto dw0 = randn(C, 43), db0 = randn(C, 44);  // accumulated onto
  std::vector<float> dx1((size_t)N * C, 0.0f), dw1 = dw0, db1 = db0;
  cpu_reference_backend().layernorm_backward(dx1.data(), dw1.data(), db1.data(), dout.data(), x.data(), w.data(),
                                             mean.data(), rstd.data(), N, C);
  const Backend& be = gpu();
  Buf<float> d_x(be, x), d_w(be, w), d_dout(be, dout), d_mean(be, mean), d_rstd(be, rstd);
  std::vector<float> runs_dw[2], runs_db[2];
  for (int run = 0; run < 2; ++run) {
    Buf<float> dx(be, (size_t)N * C, 0.0f), dw(be, dw0), db(be, db0);
    be.layernorm_backward(dx, dw, db, d_dout, d_x, d_w, d_mean, d_rstd, N, C);
    runs_dw[run] = dw.host();
    runs_db[run] = db.host();
  }
  check_close(runs_dw[0], dw1, "column sums dweight (8192 x 768)", kRtol);
  check_close(runs_db[0], db1, "column sums dbias (8192 x 768)", kRtol);
  BOOST_TEST(runs_dw[0] == runs_dw[1]);
  BOOST_TEST(runs_db[0] == runs_db[1]);
}
namespace {
// Selects the flash (true) or simple attention kernels for one test case, restoring the flash default after.
struct FlashAttention {
  explicit FlashAttention(bool on) { cairn::kernels::cuda_set_flash_attention(on); }
  ~FlashAttention() { cairn::kernels::cuda_set_flash_attention(true); }
};

struct AttentionRun {
  std::vector<float> out, lse, dqkv;
};

AttentionRun run_attention(const AttentionShape& s, const std::vector<float>& qkv, const std::vector<float>& dout) {
  const Backend& be = gpu();
  Buf<float> d_qkv(be, qkv), d_dout(be, dout), o(be, (size_t)s.B * s.T * s.C, 0.0f),
      l(be, (size_t)s.B * s.NH * s.T, 0.0f), d(be, qkv.size(), 5.0f);
  be.attention_forward(o, l, d_qkv, s.B, s.T, s.C, s.NH);
  be.attention_backward(d, d_dout, d_qkv, o, l, s.B, s.T, s.C, s.NH);
  return {o.host(), l.host(), d.host()};
}
}  // namespace

BOOST_AUTO_TEST_CASE(attention) {
  FlashAttention flash(true);
  check_attention(gpu(), kRtol);
}
BOOST_AUTO_TEST_CASE(attention_simple_kernels) {
  FlashAttention flash(false);
  check_attention(gpu(), kRtol);
}
// Tile edges: forward tiles are 64 queries x 64 keys (head dims <= 64) or 64 x 32 (128); backward 64/32 x 32.
BOOST_AUTO_TEST_CASE(flash_attention_tile_edges) {
  FlashAttention flash(true);
  check_attention_shapes(gpu(), kRtol,
                         {{1, 1, 64, 1},
                          {2, 63, 128, 2},
                          {1, 64, 64, 1},
                          {2, 65, 128, 2},
                          {1, 130, 192, 3},
                          {1, 257, 64, 1},
                          {1, 31, 128, 1},
                          {2, 33, 256, 2},
                          {1, 97, 128, 1},
                          {1, 160, 256, 2},
                          {2, 70, 64, 2},
                          {1, 50, 96, 2},
                          {1, 45, 160, 2},
                          {1, 66, 100, 1},
                          {3, 129, 384, 3}});
}
// GPT-2 124M's attention shape (one sequence; the CPU reference takes a few seconds).
BOOST_AUTO_TEST_CASE(flash_attention_gpt2_size) {
  FlashAttention flash(true);
  check_attention_shapes(gpu(), kRtol, {{1, 1024, 768, 12}});
}
// Deterministic (no atomics): two runs are bitwise equal; and flash agrees with the simple kernels.
BOOST_AUTO_TEST_CASE(flash_attention_deterministic_and_vs_simple) {
  const AttentionShape s{2, 200, 768, 12};
  auto qkv = randn((size_t)s.B * s.T * 3 * s.C, 60, 1.5f), dout = randn((size_t)s.B * s.T * s.C, 61);
  AttentionRun a, b, simple;
  {
    FlashAttention flash(true);
    a = run_attention(s, qkv, dout);
    b = run_attention(s, qkv, dout);
  }
  {
    FlashAttention flash(false);
    simple = run_attention(s, qkv, dout);
  }
  BOOST_TEST(a.out == b.out);
  BOOST_TEST(a.lse == b.lse);
  BOOST_TEST(a.dqkv == b.dqkv);
  check_close(a.out, simple.out, "flash vs simple out", kRtol);
  check_close(a.lse, simple.lse, "flash vs simple lse", kRtol);
  check_close(a.dqkv, simple.dqkv, "flash vs simple dqkv", kRtol);
}
BOOST_AUTO_TEST_CASE(gelu_and_residual) { check_gelu_residual(gpu(), kRtol, true); }
BOOST_AUTO_TEST_CASE(crossentropy) { check_crossentropy(gpu(), kRtol); }
BOOST_AUTO_TEST_CASE(argmax) { check_argmax(gpu()); }
BOOST_AUTO_TEST_CASE(copy_rows) { check_copy_rows(gpu()); }
BOOST_AUTO_TEST_CASE(embedding_vocab_parallel) { check_embedding_vocab_parallel(gpu()); }
BOOST_AUTO_TEST_CASE(crossentropy_vocab_parallel) { check_crossentropy_vocab_parallel(gpu()); }
BOOST_AUTO_TEST_CASE(adamw_norm_scale) { check_optimizer(gpu(), kRtol, false); }
BOOST_AUTO_TEST_CASE(matmul_bf16) {
  cairn::kernels::cuda_set_bf16_matmul(true);
  struct Off {
    ~Off() { cairn::kernels::cuda_set_bf16_matmul(false); }
  } off;
  check_matmul(gpu(), 2e-2);
}

namespace {
constexpr double kBf16Rtol = 2e-2, kBf16VsEmulation = 2e-3;
// precision = "bf16" for one test case (matmuls and attention on tensor cores, whatever CAIRN_CUDA_ATTENTION says),
// off again after.
struct Bf16Mode {
  Bf16Mode() {
    cairn::kernels::cuda_set_bf16_matmul(true);
    cairn::kernels::cuda_set_bf16_attention(true);
  }
  ~Bf16Mode() {
    cairn::kernels::cuda_set_bf16_matmul(false);
    cairn::kernels::cuda_set_bf16_attention(true);
  }
};
}  // namespace

// Tile edges of the bf16 kernels (flash_bf16::Config: hd 64: forward and dQ tiles of 128 queries x 64 keys, dK/dV 64
// keys x 64 queries; hd 128: 64 x 64 forward, 64 x 32 backward), T = 1, tails; head dims 32 and 96 fall back to the
// fp32 flash kernels (fp32 tolerance).
BOOST_AUTO_TEST_CASE(flash_bf16_attention_tile_edges) {
  FlashAttention flash(true);
  Bf16Mode bf16;
  check_attention_shapes(gpu(), kBf16Rtol,
                         {{1, 1, 64, 1},
                          {2, 15, 128, 2},
                          {1, 64, 64, 1},
                          {2, 65, 128, 2},
                          {1, 128, 64, 1},
                          {2, 129, 128, 2},
                          {1, 130, 192, 3},
                          {1, 257, 64, 1},
                          {1, 1, 128, 1},
                          {1, 31, 128, 1},
                          {2, 33, 256, 2},
                          {1, 97, 128, 1},
                          {1, 160, 256, 2},
                          {3, 129, 384, 3}});
  check_attention_shapes(gpu(), kRtol, {{2, 70, 64, 2}, {1, 50, 96, 2}});
}
BOOST_AUTO_TEST_CASE(flash_bf16_attention_gpt2_size) {
  FlashAttention flash(true);
  Bf16Mode bf16;
  check_attention_shapes(gpu(), kBf16Rtol, {{1, 1024, 768, 12}});
}
// The GPU against the host emulation of the same block code (flash_attention_bf16_tiles.h) on the same inputs: checks
// what the CPU test cannot, that the tensor cores' fragment layout is the one the emulation transcribes from the PTX
// ISA. Also bitwise run to run, and cuda_set_bf16_attention(false) selects the fp32 flash kernels in bf16 mode.
BOOST_AUTO_TEST_CASE(flash_bf16_attention_vs_emulation_and_deterministic) {
  FlashAttention flash(true);
  Bf16Mode bf16;
  for (const AttentionShape s : {AttentionShape{2, 200, 768, 12}, AttentionShape{1, 161, 256, 2}}) {
    const std::string tag = std::to_string(s.T) + "x" + std::to_string(s.C) + "/" + std::to_string(s.NH);
    auto qkv = randn((size_t)s.B * s.T * 3 * s.C, 62, 1.5f), dout = randn((size_t)s.B * s.T * s.C, 63);
    const AttentionRun a = run_attention(s, qkv, dout), b = run_attention(s, qkv, dout);
    BOOST_TEST(a.out == b.out);
    BOOST_TEST(a.lse == b.lse);
    BOOST_TEST(a.dqkv == b.dqkv);
    std::vector<float> out(a.out.size()), lse(a.lse.size()), dqkv(a.dqkv.size());
    namespace fb = cairn::kernels::flash_bf16;
    BOOST_REQUIRE_MESSAGE(fb::emulate_forward(out.data(), lse.data(), qkv.data(), s.B, s.T, s.C, s.NH),
                          "emulation declined " << tag);
    BOOST_REQUIRE_MESSAGE(fb::emulate_backward(dqkv.data(), dout.data(), qkv.data(), a.out.data(), a.lse.data(), s.B,
                                               s.T, s.C, s.NH),
                          "emulation declined " << tag);
    check_close(a.out, out, "bf16 flash GPU vs emulation out " + tag, kBf16VsEmulation);
    check_close(a.lse, lse, "bf16 flash GPU vs emulation lse " + tag, kBf16VsEmulation);
    check_close(a.dqkv, dqkv, "bf16 flash GPU vs emulation dqkv " + tag, kBf16VsEmulation);
    cairn::kernels::cuda_set_bf16_attention(false);
    const AttentionRun fp32 = run_attention(s, qkv, dout);
    cairn::kernels::cuda_set_bf16_attention(true);
    check_close(a.out, fp32.out, "bf16 vs fp32 flash out " + tag, kBf16Rtol);
    check_close(a.dqkv, fp32.dqkv, "bf16 vs fp32 flash dqkv " + tag, kBf16Rtol);
    BOOST_TEST(fp32.out != a.out);  // the switch did select other kernels
  }
}

// The block ops of context parallelism in bf16 mode run the tensor-core kernels at head dims 64 and 128 (the others
// the fp32 flash ones): ops_checks.h's block checks at the bf16 tolerance, and the GPU against the host emulation of
// the same block code on a multi-tile block with keys past its last query (dK/dV accumulated onto a nonzero start).
BOOST_AUTO_TEST_CASE(flash_bf16_attention_blocks) {
  FlashAttention flash(true);
  Bf16Mode bf16;
  check_attention_block(gpu(), kBf16Rtol);
  check_attention_ring(gpu(), ref(), kBf16Rtol, 256, 128, 2);
  namespace fb = cairn::kernels::flash_bf16;
  const AttentionBlockShape s{2, 150, 260, 70, 256, 2};
  const int C3 = 3 * s.C;
  const auto q = randn((size_t)s.B * s.Tq * C3, 64, 1.5f), kv = randn((size_t)s.B * s.Tk * C3, 65, 1.5f);
  const auto dout = randn((size_t)s.B * s.Tq * s.C, 66), dkv0 = randn(kv.size(), 67);
  Buf<float> d_q(gpu(), q), d_kv(gpu(), kv), d_dout(gpu(), dout), d_dkv(gpu(), dkv0);
  Buf<float> d_o(gpu(), (size_t)s.B * s.Tq * s.C, 0.0f), d_l(gpu(), (size_t)s.B * s.NH * s.Tq, 0.0f),
      d_dq(gpu(), q.size(), 0.0f);
  gpu().attention_forward_block(d_o, d_l, d_q, d_kv, s.B, s.Tq, s.Tk, s.q_pos, s.C, s.NH);
  gpu().attention_backward_block(d_dq, d_dkv, d_dout, d_q, d_kv, d_o, d_l, s.B, s.Tq, s.Tk, s.q_pos, s.C, s.NH);
  const std::vector<float> o = d_o.host(), l = d_l.host(), dq = d_dq.host(), dkv = d_dkv.host();
  std::vector<float> eo(o.size()), el(l.size()), edq(q.size(), 0.0f), edkv = dkv0;
  BOOST_REQUIRE(
      fb::emulate_forward_block(eo.data(), el.data(), q.data(), kv.data(), s.B, s.Tq, s.Tk, s.q_pos, s.C, s.NH));
  BOOST_REQUIRE(fb::emulate_backward_block(edq.data(), edkv.data(), dout.data(), q.data(), kv.data(), o.data(),
                                           l.data(), s.B, s.Tq, s.Tk, s.q_pos, s.C, s.NH, true));
  check_close(o, eo, "bf16 block GPU vs emulation out", kBf16VsEmulation);
  check_close(l, el, "bf16 block GPU vs emulation lse", kBf16VsEmulation);
  check_close(dq, edq, "bf16 block GPU vs emulation dq", kBf16VsEmulation);
  check_close(dkv, edkv, "bf16 block GPU vs emulation dkv", kBf16VsEmulation);
}

// A grow-only buffer growing inside a step (here the bf16 GEMM copies, for a GEMM larger than any before) must not
// synchronize the device (memory.cu: cudaFreeAsync / cudaMallocAsync on the legacy stream): while a non-blocking side
// stream waits on a host function (standing in for a pipeline send whose receiver has not posted yet, which is released
// only after this op returned), the op returns at once. With cudaFree it would wait for the side stream: the watchdog
// releases it after 5 s, so the test then fails instead of hanging. Last in the file: its GEMM must be the largest.
namespace {
std::atomic<bool> g_side_released{false};
}  // namespace
BOOST_AUTO_TEST_CASE(grow_buffer_without_device_sync) {
  const int N = 8192, C = 2048, OC = 2048;  // bf16 copies of 20 M elements: larger than every GEMM above
  const Backend& be = gpu();
  Buf<float> out(be, (size_t)N * OC, 0.0f), inp(be, (size_t)N * C, 0.5f), w(be, (size_t)C * OC, 0.25f);
  be.synchronize();
  cudaStream_t side = nullptr;
  BOOST_REQUIRE(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking) == cudaSuccess);
  BOOST_REQUIRE(cudaLaunchHostFunc(
                    side,
                    [](void*) {
                      while (!g_side_released.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
                    },
                    nullptr) == cudaSuccess);
  std::thread watchdog([] {
    std::this_thread::sleep_for(std::chrono::seconds(5));
    g_side_released = true;
  });
  cairn::kernels::cuda_set_bf16_matmul(true);
  const auto t0 = std::chrono::steady_clock::now();
  be.matmul_forward(out.ptr, inp.ptr, w.ptr, nullptr, N, C, OC, WeightLayout::InOut);
  const double returned_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const bool side_busy = !g_side_released.load();
  cairn::kernels::cuda_set_bf16_matmul(false);
  g_side_released = true;
  watchdog.join();
  BOOST_TEST(side_busy, "the op waited for the blocked side stream (" << returned_s << " s): a device-wide sync");
  BOOST_TEST(returned_s < 2.0);
  const std::vector<float> h = out.host();  // 2048 * 0.5 * 0.25 = 256, exact in bf16 and fp32
  BOOST_TEST(h.front() == 256.0f);
  BOOST_TEST(h.back() == 256.0f);
  BOOST_TEST(cudaStreamSynchronize(side) == cudaSuccess);
  BOOST_TEST(cudaStreamDestroy(side) == cudaSuccess);
}
