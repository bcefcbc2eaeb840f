// cairn-train's training loop: config -> model + data + optimizer, data parallel over MPI (ZeRO-1
// optional), checkpoints with exact resume, fault handling and per-step observability.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cairn/config.h"
#include "cairn/error.h"
#include "cairn/stop_signal.h"

namespace cairn::train {

// Exit code after SIGTERM/SIGUSR1: the step finished, a checkpoint was written (or, before the first step, there was
// nothing to save), rerun to continue. slurm/train.sbatch requeues the job when it sees this code (EX_TEMPFAIL).
// Rank 0 also writes <run>/train/STOPPED ({"exit_code": 75, ...}) so launchers that lose the code (mpirun after
// SIGTERM exits 1) can recover it (slurm/stages/train.sh).
constexpr int kExitRequeue = kExitStopped;

// Faults a test can inject at a given step (applied on every rank identically).
enum class Fault { None, NanGrad, NanLoss, LossSpike };

// What tests inject into a run (cairn-train itself passes none: the binary has no test hooks; tests call run_train or
// train_main, or run tests/train's cairn-train-pausing, which is train_main with `at` pausing at a named point).
struct TrainHooks {
  std::function<Fault(int64_t step)> fault;  // step being computed (1-based)
  int64_t stop_after_step = -1;              // behave as if SIGTERM arrived during this step
  // Called at fixed points of the run (a test may raise(SIGTERM) there): "setup" (handlers installed, nothing read
  // yet), "first_step" (set up, before the first step), "step_done" (after each step, before its stop check and
  // checkpoint; step = that step), "last_step" (right after "step_done" of the last step), "final_checkpoint" (the
  // last checkpoint written, FINISHED not yet), "finished" (FINISHED written and seen by every rank), "end"; and
  // from train_main: "startup" (handlers installed, before MPI starts; not with --print-config), "exit" (the run
  // returned, before MPI_Finalize).
  std::function<void(const std::string& point, int64_t step)> at;
  // Fill TrainResult::params: a whole-model host copy gathered on rank 0 (collective), which runs never need for
  // themselves (the final checkpoint holds the model); tests compare final weights with it.
  bool return_params = false;
};

struct TrainResult {
  int exit_code = 0;
  int64_t final_step = 0;
  std::vector<double> losses;  // per step computed in this process (1-based step order)
  std::vector<int64_t> steps;  // the step number of each loss
  std::vector<int> skipped;    // 1 where that step's update was skipped
  std::vector<double> val_losses;
  std::vector<float> params;        // final parameters (rank 0, only with TrainHooks::return_params)
  int restores = 0;                 // checkpoint restores after too many skips
  std::string finished_checkpoint;  // the checkpoint FINISHED names ("" when the run did not finish)
};

// Stop signals: cairn/stop_signal.h (install_stop_handlers, stop_signal, clear_stop_signal). main() installs the
// handlers before anything else, so a signal at any moment of start-up or shutdown is seen: before the first step the
// run exits 75 with nothing to save, during the run it finishes the step and checkpoints (75), after the last step's
// stop check the run finishes normally (0). run_train() clears the signal when it returns.

// Runs training as configured; called by train_main() and by tests (MPI must be initialised).
TrainResult run_train(const Config& cfg, const TrainHooks& hooks = {});

// cairn-train's command line (main.cpp is this with no hooks): installs the stop handlers first, parses argv,
// starts MPI, trains and returns the exit code.
int train_main(int argc, char** argv, const TrainHooks& hooks = {});

// Learning rate after s applied updates (the trainer passes its Adam step count: skipped steps do not advance the
// schedule, as in Megatron): linear warmup, update s at lr (s + 1) / warmup (the peak at s = warmup - 1; Megatron
// runs its first step at 0 and reaches the peak one step later), then cosine or linear decay towards min_lr over
// `steps` ([train] decay_steps, else steps), min_lr from s = steps on; or constant.
double learning_rate(int64_t s, int64_t steps, int64_t warmup, double lr, double min_lr, const std::string& schedule);

}  // namespace cairn::train
