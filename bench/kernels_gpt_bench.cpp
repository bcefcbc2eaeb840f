// Benchmark (figures, not a test): tokens/s of one GPT training step (zero_grad + forward + backward +
// AdamW) on the CPU backends, with a per-phase split. Compare with kernels_torch_bench.py (same model).
// Usage: kernels_gpt_bench [--backend cpu|cpu-ref|cuda|all] [--layers L] [--hidden C] [--heads H] [--seq T]
//                          [--batch B] [--vocab V] [--steps S] [--warmup W] [--recompute-gelu 0|1]
//                          [--profile 1]  (per-op time split of one backend)
#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cairn/gpt.h"
#include "cairn/kernels/backend.h"
#include "cairn/kernels/profile.h"
#include "gpt_step_timer.h"

using namespace cairn;

namespace {

void run(const kernels::Backend& be, const gpt::GptConfig& cfg, int B, int steps, int warmup, bool recompute) {
  gpt::Model model(cfg, be);
  model.set_recompute_gelu(recompute);
  model.init(1);
  const bench::StepTimes t = bench::time_training_steps(model, B, steps, warmup);
  const double t_fwd = t.forward_s, t_bwd = t.backward_s, t_opt = t.optimizer_s, loss = t.loss;
  const double total = t_fwd + t_bwd + t_opt;
  const double tokens = (double)B * cfg.seq_len * steps;
  const double flops = gpt::train_flops_per_token(cfg) * tokens;
  std::printf("%-8s %8.0f tokens/s  %6.2f GFLOP/s  step %7.1f ms (fwd %6.1f bwd %6.1f adamw %5.1f)  loss %.4f  "
              "activations %.0f MiB\n",
              be.name, tokens / total, flops / total / 1e9, 1e3 * total / steps, 1e3 * t_fwd / steps,
              1e3 * t_bwd / steps, 1e3 * t_opt / steps, loss, model.activation_bytes() / 1048576.0);
}

}  // namespace

int main(int argc, char** argv) {
  gpt::GptConfig cfg;
  cfg.layers = 4;
  cfg.hidden = 256;
  cfg.heads = 4;
  cfg.seq_len = 256;
  cfg.vocab = 8192;
  cfg.vocab_real = 8192;
  int B = 4, steps = 5, warmup = 1, recompute = 0, profile = 0;
  std::string backend = "cpu";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const int val = std::atoi(argv[i + 1]);
    if (k == "--backend") backend = argv[i + 1];
    else if (k == "--layers") cfg.layers = val;
    else if (k == "--hidden") cfg.hidden = val;
    else if (k == "--heads") cfg.heads = val;
    else if (k == "--seq") cfg.seq_len = val;
    else if (k == "--batch") B = val;
    else if (k == "--vocab") cfg.vocab = cfg.vocab_real = val;
    else if (k == "--steps") steps = val;
    else if (k == "--warmup") warmup = val;
    else if (k == "--recompute-gelu") recompute = val;
    else if (k == "--profile") profile = val;
    else {
      std::fprintf(stderr, "kernels_gpt_bench: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  std::printf("GPT L=%d C=%d H=%d T=%d V=%d, batch %d, %zu params, %d OpenMP threads, %d steps\n", cfg.layers,
              cfg.hidden, cfg.heads, cfg.seq_len, cfg.vocab, B, gpt::count_params(cfg), omp_get_max_threads(), steps);
  try {
    if (backend == "all") {
      run(kernels::cpu_backend(), cfg, B, steps, warmup, recompute);
      run(kernels::cpu_reference_backend(), cfg, B, std::max(1, steps / 5), 0, recompute);
    } else {
      const kernels::Backend* be = kernels::find_backend(backend.c_str());
      if (!be) {
        std::fprintf(stderr, "kernels_gpt_bench: %s\n", kernels::backend_unavailable_reason(backend.c_str()));
        return 2;
      }
      if (profile) {
        // per-op split (each op synchronized, so the total is a little slower than the plain run)
        run(kernels::profiled_backend(*be), cfg, B, steps, 0, recompute);
        double total = 0;
        for (const auto& t : kernels::profile_report()) total += t.seconds;
        for (const auto& t : kernels::profile_report())
          std::printf("  %-22s %6ld calls %9.3f ms/step %5.1f%%\n", t.op.c_str(), t.calls, 1e3 * t.seconds / steps,
                      100.0 * t.seconds / total);
      } else {
        run(*be, cfg, B, steps, warmup, recompute);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kernels_gpt_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
