// cairn-train's training loop: config -> model + data + optimizer, data parallel over MPI (ZeRO-1
// optional), checkpoints with exact resume, fault handling and per-step observability.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cairn/config.h"

namespace cairn::train {

// Exit code after SIGTERM/SIGUSR1: the step finished, a checkpoint was written, rerun to continue.
// slurm/train.sbatch requeues the job when it sees this code (EX_TEMPFAIL).
constexpr int kExitRequeue = 75;

// Faults a test can inject at a given step (applied on every rank identically).
enum class Fault { None, NanGrad, NanLoss, LossSpike };

struct TrainHooks {
  std::function<Fault(int64_t step)> fault;  // step being computed (1-based)
  int64_t stop_after_step = -1;              // behave as if SIGTERM arrived during this step
};

struct TrainResult {
  int exit_code = 0;
  int64_t final_step = 0;
  std::vector<double> losses;       // per step computed in this process (1-based step order)
  std::vector<int64_t> steps;       // the step number of each loss
  std::vector<int> skipped;         // 1 where that step's update was skipped
  std::vector<double> val_losses;
  std::vector<float> params;        // final parameters (rank 0)
  int restores = 0;                 // checkpoint restores after too many skips
};

// Runs training as configured; called by main() and by tests (MPI must be initialised).
TrainResult run_train(const Config& cfg, const TrainHooks& hooks = {});

// Learning rate at 0-based step s (warmup, then cosine/linear/constant decay to min_lr).
double learning_rate(int64_t s, int64_t steps, int64_t warmup, double lr, double min_lr, const std::string& schedule);

// Parses "a:b" (steps a..b-1); throws UsageError otherwise.
std::pair<int64_t, int64_t> parse_step_range(const std::string& text);

}  // namespace cairn::train
