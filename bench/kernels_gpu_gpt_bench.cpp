// Benchmark (figures, not a test) for bench/kernels_gpu_bench.sh: one GPT training step (zero_grad + forward +
// backward + AdamW) on the CUDA backend at the largest micro-batch that fits, with tokens/s, MFU and peak device
// memory; compare with bench/kernels_gpu_torch_bench.py (same model, same FLOP count, same MFU formula).
// Usage: kernels_gpu_gpt_bench [--layers 12] [--hidden 768] [--heads 12] [--seq 1024] [--vocab 50304] [--batch 0]
//          [--max-batch 64] [--steps 5] [--warmup 1] [--recompute none|gelu|full] [--bf16 0] [--peak-fp32 67]
//          [--peak-bf16 989.4] [--attention-bench 0]
//   --bf16 1: precision "bf16" (GEMM inputs rounded to bf16, fp32 accumulation; everything else fp32)
//   --batch 0: the largest power of two <= --max-batch whose memory (measured per sequence at batch 1) fits in
//   90% of the free device memory; halved again if it still runs out.
//   --attention-bench 1: instead of the training step, time causal attention forward and backward alone at the
//   model's shape (micro-batch --batch, 8 when 0) with the flash kernels and with the simple ones (fp32), and with
//   the bf16 tensor-core flash kernels (precision bf16; head dims 64 and 128) (CUDA events not needed: each timed
//   loop ends with a synchronize), and print how far each is from simple.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "cairn/gpt.h"
#include "cairn/kernels/backend.h"
#include "cairn/kernels/cuda.h"
#include "cairn/kernels/cuda_probe.h"
#include "gpt_step_timer.h"

using namespace cairn;
using Clock = std::chrono::steady_clock;

namespace {

struct Result {
  double tokens_per_s = 0, fwd_ms = 0, bwd_ms = 0, opt_ms = 0, loss = 0, peak_gib = 0;
};

double secs(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

Result run(const kernels::Backend& be, const gpt::GptConfig& cfg, int B, int steps, int warmup,
           gpt::Recompute recompute) {
  kernels::cuda_reset_peak_allocated_bytes();
  gpt::Model model(cfg, be);
  model.set_recompute(recompute);
  model.init(1);
  const bench::StepTimes t = bench::time_training_steps(model, B, steps, warmup);
  Result r;
  r.tokens_per_s = (double)B * cfg.seq_len * steps / t.total_s();
  r.fwd_ms = 1e3 * t.forward_s / steps;
  r.bwd_ms = 1e3 * t.backward_s / steps;
  r.opt_ms = 1e3 * t.optimizer_s / steps;
  r.loss = t.loss;
  r.peak_gib = kernels::cuda_peak_allocated_bytes() / 1073741824.0;
  return r;
}

// Attention alone (flash vs simple kernels, fp32; and the bf16 tensor-core flash kernels of precision "bf16" where the
// head dim is 64 or 128) at [B, T, C] with NH heads: ms per forward / backward, TFLOP/s counting the causal half of the
// score matrix (forward 2 matmuls, backward 2.5x forward: the usual flash-attention count).
int attention_bench(const kernels::Backend& be, int B, int T, int C, int NH, int reps) {
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> qkv((size_t)B * T * 3 * C), dout((size_t)B * T * C);
  for (auto& x : qkv) x = dist(rng);
  for (auto& x : dout) x = dist(rng);
  auto dev = [&](size_t n) { return static_cast<float*>(be.alloc(n * sizeof(float))); };
  float *d_qkv = dev(qkv.size()), *d_dout = dev(dout.size()), *out = dev(dout.size()), *lse = dev((size_t)B * NH * T),
        *dqkv = dev(qkv.size());
  be.copy_to_device(d_qkv, qkv.data(), qkv.size() * sizeof(float));
  be.copy_to_device(d_dout, dout.data(), dout.size() * sizeof(float));
  const double fwd_flops = 4.0 * B * NH * ((double)T * (T + 1) / 2) * (C / NH), bwd_flops = 2.5 * fwd_flops;
  struct Variant {
    const char* name;
    bool flash, bf16;
    double fwd_ms = 0, bwd_ms = 0;
    std::vector<float> result;  // out then dqkv
  };
  const int hd = C % NH == 0 ? C / NH : 0;
  std::vector<Variant> variants = {{"flash", true, false, 0, 0, {}}, {"simple", false, false, 0, 0, {}}};
  if (hd == 64 || hd == 128) variants.push_back({"flash_bf16", true, true, 0, 0, {}});
  for (auto& v : variants) {
    kernels::cuda_set_flash_attention(v.flash);
    kernels::cuda_set_bf16_matmul(v.bf16);
    be.attention_forward(out, lse, d_qkv, B, T, C, NH);  // warm-up (and shared-memory attributes)
    be.attention_backward(dqkv, d_dout, d_qkv, out, lse, B, T, C, NH);
    be.synchronize();
    auto t0 = Clock::now();
    for (int r = 0; r < reps; r++) be.attention_forward(out, lse, d_qkv, B, T, C, NH);
    be.synchronize();
    auto t1 = Clock::now();
    for (int r = 0; r < reps; r++) be.attention_backward(dqkv, d_dout, d_qkv, out, lse, B, T, C, NH);
    be.synchronize();
    auto t2 = Clock::now();
    v.fwd_ms = 1e3 * secs(t0, t1) / reps;
    v.bwd_ms = 1e3 * secs(t1, t2) / reps;
    v.result.resize(dout.size() + qkv.size());
    be.copy_to_host(v.result.data(), out, dout.size() * sizeof(float));
    be.copy_to_host(v.result.data() + dout.size(), dqkv, qkv.size() * sizeof(float));
  }
  kernels::cuda_set_flash_attention(true);
  kernels::cuda_set_bf16_matmul(false);
  for (float* p : {d_qkv, d_dout, out, lse, dqkv}) be.free(p);
  const Variant& simple = variants[1];
  double scale = 0;
  for (float x : simple.result) scale = std::max(scale, (double)std::fabs(x));
  auto worst_vs_simple = [&](const Variant& v) {
    double worst = 0;
    for (size_t i = 0; i < simple.result.size(); i++)
      worst = std::max(worst, std::fabs((double)v.result[i] - simple.result[i]) / (scale + 1e-30));
    return worst;
  };
  std::printf("attention B=%d T=%d C=%d NH=%d (head dim %d), %d reps (flash_bf16: precision bf16, tensor cores):\n", B,
              T, C, NH, hd, reps);
  for (const auto& v : variants) {
    std::printf("  %-10s forward %8.3f ms (%6.2f TFLOP/s)  backward %8.3f ms (%6.2f TFLOP/s)\n", v.name, v.fwd_ms,
                fwd_flops / v.fwd_ms / 1e9, v.bwd_ms, bwd_flops / v.bwd_ms / 1e9);
    std::printf("RESULT attention_%s B=%d T=%d fwd_ms=%.3f bwd_ms=%.3f fwd_tflops=%.2f bwd_tflops=%.2f\n", v.name, B, T,
                v.fwd_ms, v.bwd_ms, fwd_flops / v.fwd_ms / 1e9, bwd_flops / v.bwd_ms / 1e9);
  }
  int rc = 0;
  for (size_t i = 0; i < variants.size(); i++) {
    if (i == 1) continue;
    const Variant& v = variants[i];
    const double worst = worst_vs_simple(v), limit = v.bf16 ? 2e-2 : 1e-4;  // bf16: inputs rounded to 8 bits
    if (worst > limit) rc = 1;
    std::printf("  %s vs simple: max |difference| %.2e of max |value| (out and dqkv)%s\n", v.name, worst,
                worst <= limit ? "" : "  <-- MISMATCH");
    std::printf("RESULT attention_%s_vs_simple max_rel_diff=%.3e speedup_fwd=%.2f speedup_bwd=%.2f\n", v.name, worst,
                simple.fwd_ms / v.fwd_ms, simple.bwd_ms / v.bwd_ms);
  }
  return rc;
}

bool is_oom(const std::exception& e) { return std::string(e.what()).find("out of device memory") != std::string::npos; }

}  // namespace

int main(int argc, char** argv) {
  gpt::GptConfig cfg;  // GPT-2 124M with the padded vocabulary
  cfg.vocab_real = cfg.vocab;
  int B = 0, max_batch = 64, steps = 5, warmup = 1, bf16 = 0, attn_bench = 0;
  gpt::Recompute recompute = gpt::Recompute::None;
  double peak_fp32 = 67.0, peak_bf16 = 989.4;  // H100 SXM / H200 datasheet, dense
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--layers") cfg.layers = std::atoi(v);
    else if (k == "--hidden") cfg.hidden = std::atoi(v);
    else if (k == "--heads") cfg.heads = std::atoi(v);
    else if (k == "--seq") cfg.seq_len = std::atoi(v);
    else if (k == "--vocab") cfg.vocab = cfg.vocab_real = std::atoi(v);
    else if (k == "--batch") B = std::atoi(v);
    else if (k == "--max-batch") max_batch = std::atoi(v);
    else if (k == "--steps") steps = std::atoi(v);
    else if (k == "--warmup") warmup = std::atoi(v);
    else if (k == "--recompute") {
      try {
        recompute = gpt::parse_recompute(v);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "kernels_gpu_gpt_bench: --recompute: %s\n", e.what());
        return 2;
      }
    } else if (k == "--recompute-gelu") recompute = std::atoi(v) ? gpt::Recompute::Gelu : gpt::Recompute::None;
    else if (k == "--bf16") bf16 = std::atoi(v);
    else if (k == "--peak-fp32") peak_fp32 = std::atof(v);
    else if (k == "--peak-bf16") peak_bf16 = std::atof(v);
    else if (k == "--attention-bench") attn_bench = std::atoi(v);
    else {
      std::fprintf(stderr, "kernels_gpu_gpt_bench: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  const kernels::Backend* be = kernels::find_backend("cuda");
  if (!be) {
    std::fprintf(stderr, "kernels_gpu_gpt_bench: %s\n", kernels::backend_unavailable_reason("cuda"));
    const int rc = kernels::cuda_unusable_exit_code(kernels::probe_cuda());
    return rc ? rc : 1;  // 77 (skipped) only without a GPU or driver; a failing driver is a failure
  }
  if (attn_bench) {
    try {
      return attention_bench(*be, B > 0 ? B : 8, cfg.seq_len, cfg.hidden, cfg.heads, std::max(1, steps));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kernels_gpu_gpt_bench: %s\n", e.what());
      return 1;
    }
  }
  kernels::cuda_set_bf16_matmul(bf16 != 0);
  const char* tag = bf16 ? "bf16" : "fp32";
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  try {
    if (B <= 0) {
      // Memory of one sequence: a batch-1 forward allocates every activation buffer of that batch.
      size_t per_seq = 0;
      {
        gpt::Model probe(cfg, *be);
        probe.set_recompute(recompute);
        std::vector<int32_t> ids(cfg.seq_len, 1);
        probe.forward(ids.data(), ids.data(), 1, cfg.seq_len);
        per_seq = probe.activation_bytes();
      }
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      const double fixed = 4.0 * 4.0 * gpt::count_params(cfg);  // params, grads, AdamW m and v
      B = 1;
      while (B * 2 <= max_batch && fixed + 2.0 * B * per_seq <= 0.9 * free_b) B *= 2;
      std::printf("memory: %.2f GiB per sequence of %d tokens, %.2f GiB free: micro-batch %d (cap %d)\n",
                  per_seq / 1073741824.0, cfg.seq_len, free_b / 1073741824.0, B, max_batch);
    }
    const double flops_per_token = gpt::train_flops_per_token(cfg);
    for (;; B /= 2) {
      try {
        Result r = run(*be, cfg, B, steps, warmup, recompute);
        const double tflops = flops_per_token * r.tokens_per_s / 1e12;
        std::printf("%s, GPT L=%d C=%d H=%d T=%d V=%d (%zu params), micro-batch %d%s, %d steps\n", prop.name,
                    cfg.layers, cfg.hidden, cfg.heads, cfg.seq_len, cfg.vocab, gpt::count_params(cfg), B,
                    recompute != gpt::Recompute::None
                        ? (std::string(", recompute ") + gpt::recompute_name(recompute)).c_str()
                        : "",
                    steps);
        std::printf("cairn cuda %s: %9.0f tokens/s  %6.1f TFLOP/s  MFU %5.1f%% of fp32 peak %.0f, %5.2f%% of bf16 "
                    "peak %.0f  step %.1f ms (fwd %.1f bwd %.1f adamw %.1f)  peak mem %.2f GiB  loss %.4f\n",
                    tag, r.tokens_per_s, tflops, 100 * tflops / peak_fp32, peak_fp32, 100 * tflops / peak_bf16,
                    peak_bf16, r.fwd_ms + r.bwd_ms + r.opt_ms, r.fwd_ms, r.bwd_ms, r.opt_ms, r.peak_gib, r.loss);
        std::printf("RESULT cairn_%s batch=%d tokens_per_s=%.0f mfu_fp32=%.4f mfu_bf16=%.4f peak_mem_gib=%.2f\n", tag,
                    B, r.tokens_per_s, tflops / peak_fp32, tflops / peak_bf16, r.peak_gib);
        return 0;
      } catch (const std::exception& e) {
        if (!is_oom(e) || B == 1) throw;
        std::printf("micro-batch %d ran out of memory (%s); trying %d\n", B, e.what(), B / 2);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kernels_gpu_gpt_bench: %s\n", e.what());
    return 1;
  }
}
