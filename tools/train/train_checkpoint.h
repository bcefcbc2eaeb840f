// cairn-train's checkpoints: finding the one to resume from, writing (model.h5 with the train_state JSON, per-rank
// optim shards, sealed and pruned) and loading them back.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "cairn/config.h"
#include "cairn/gpt.h"
#include "cairn/kernels/backend.h"
#include "grad_sync.h"
#include "settings.h"
#include "step_guard.h"

namespace cairn::train {

// Where the run is (kept in checkpoints with the StepGuard's counters and spike window).
struct TrainProgress {
  int64_t step = 0;    // completed steps
  int64_t tokens = 0;
  int64_t batch = 0;   // data position: next global batch to read
  int64_t adam_step = 0;
};

// The train_state JSON of model.h5: progress, skip counters, spike window and what the run was started with.
nlohmann::json train_state(const Settings& s, const TrainProgress& p, const StepGuard& g);

// The checkpoints of one run in <run>/train/ckpt/: the model's parameters and this rank's slice [lo, hi) of the
// AdamW moments m and v (backend memory), all of which must outlive this object.
class TrainCheckpoints {
 public:
  TrainCheckpoints(const Config& cfg, const Settings& s, const gpt::GptConfig& config, gpt::Model& model,
                   const kernels::Backend& backend, const Shards& shards, float* m, float* v)
      : cfg_(cfg), s_(s), config_(config), model_(model), backend_(backend), shards_(shards), m_(m), v_(v) {}

  // Collective. [train] resume: "auto" the newest complete checkpoint (or none), "none" none (a usage error over
  // existing checkpoints), else that directory (a usage error when incomplete). "" = start from scratch.
  std::string resume_dir() const;
  // Parameters, moments, progress and guard from dir (a usage error when the model differs from [model]).
  void load(const std::string& dir, TrainProgress& p, StepGuard& g) const;
  // Collective: writes step p.step into a temp dir, seals it (DONE) and prunes old ones; returns its directory.
  std::string write(const TrainProgress& p, const StepGuard& g) const;

 private:
  const Config& cfg_;
  const Settings& s_;
  const gpt::GptConfig& config_;
  gpt::Model& model_;
  const kernels::Backend& backend_;
  const Shards& shards_;
  float* m_;
  float* v_;
};

}  // namespace cairn::train
