// The timed GPT training step both step benchmarks measure (kernels_gpt_bench on CPU backends, kernels_gpu_gpt_bench on
// CUDA): random tokens, optimizer state in the backend's memory, then warmup + steps of zero_grad, forward,
// backward, AdamW over the decay ranges, each phase timed after a backend synchronize.
#pragma once
#include <chrono>
#include <cstdint>
#include <random>
#include <vector>

#include "cairn/gpt.h"
#include "cairn/kernels/backend.h"

namespace bench {

struct StepTimes {
  double forward_s = 0, backward_s = 0, optimizer_s = 0;  // sums over the timed steps
  double loss = 0;                                         // of the last step
  double total_s() const { return forward_s + backward_s + optimizer_s; }
};

inline StepTimes time_training_steps(cairn::gpt::Model& model, int B, int steps, int warmup) {
  using Clock = std::chrono::steady_clock;
  auto secs = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };
  const cairn::gpt::GptConfig& cfg = model.config();
  const cairn::kernels::Backend& be = model.backend();
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> tok(0, cfg.vocab_real - 1);
  std::vector<int32_t> inputs((size_t)B * cfg.seq_len), targets((size_t)B * cfg.seq_len);
  for (size_t i = 0; i < inputs.size(); i++) {
    inputs[i] = tok(rng);
    targets[i] = tok(rng);
  }
  struct Moments {  // AdamW state in the backend's memory (device memory on GPU backends), freed on every exit
    const cairn::kernels::Backend& be;
    float *m, *v;
    ~Moments() {
      be.free(m);
      be.free(v);
    }
  } mv{be, static_cast<float*>(be.alloc(model.num_params() * sizeof(float))),
       static_cast<float*>(be.alloc(model.num_params() * sizeof(float)))};
  const auto ranges = cairn::gpt::decay_ranges(model.tensors(), 0, model.num_params());
  StepTimes t;
  for (int s = -warmup; s < steps; s++) {
    if (s == 0) t = StepTimes{};
    const auto t0 = Clock::now();
    model.zero_grad();
    t.loss = model.forward(inputs.data(), targets.data(), B, cfg.seq_len);  // copies the loss back: synchronous
    const auto t1 = Clock::now();
    model.backward();
    be.synchronize();
    const auto t2 = Clock::now();
    cairn::kernels::AdamWParams hp;
    hp.lr = 1e-4f;
    hp.step = s + warmup + 1;
    cairn::gpt::adamw_update_ranges(be, ranges, 0, model.params(), model.grads(), mv.m, mv.v, hp, 0.1f);
    be.synchronize();
    const auto t3 = Clock::now();
    t.forward_s += secs(t0, t1);
    t.backward_s += secs(t1, t2);
    t.optimizer_s += secs(t2, t3);
  }
  return t;
}

}  // namespace bench
