// cairn-train's checkpoints: finding the one to resume from, writing (model.h5 with the train_state JSON, optimizer
// state, sealed and pruned) and loading them back. Checkpoints hold whole tensors whatever the layout, so any layout
// resumes any other.
#pragma once
#include <cstdint>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "cairn/checkpoint.h"
#include "cairn/config.h"
#include "cairn/error.h"
#include "cairn/gpt.h"
#include "cairn/kernels/backend.h"
#include "cairn/parallel.h"
#include "cairn/records.h"
#include "cairn/shards.h"
#include "chunk.h"
#include "grad_sync.h"
#include "settings.h"
#include "step_guard.h"

namespace cairn::train {

// Where the run is (kept in checkpoints with the StepGuard's counters and spike window).
struct TrainProgress {
  int64_t step = 0;  // completed steps
  int64_t tokens = 0;
  int64_t batch = 0;  // data position: next global batch to read
  int64_t adam_step = 0;
};

// A sealed checkpoint whose files do not load (a truncated tensor, a tensor checksum that DONE's file checksums cannot
// see, an unreadable attribute): damaged data, exit 1. `--resume auto` passes over it to the next older checkpoint.
struct DamagedCheckpoint : RuntimeError {
  explicit DamagedCheckpoint(const std::string& m) : RuntimeError(m) {}
};

// The train_state JSON of model.h5: progress, skip counters, spike window and what the run was started with.
nlohmann::json train_state(const Settings& s, const TrainProgress& p, const StepGuard& g);

// The checkpoints of one run in <run>/train/ckpt/, written from and loaded into this rank's model chunks (which must
// outlive this object). model.h5 holds the whole model. The AdamW moments: without tensor or pipeline parallelism
// each data-parallel rank writes its ZeRO slice of the (whole) flat buffer to optim.rank<r>.h5 as before; otherwise
// every rank's pieces are assembled into whole-model order on rank 0, one tensor at a time, which writes them to
// optim.rank00000.h5. Loading reads whole tensors one at a time and keeps each rank's pieces: beyond its own pieces,
// no rank ever holds more than one tensor of the model.
// "" when checkpoint `dir` was written by this build (or does not say which), else a sentence for the resume's
// warning naming both builds: another build's kernels sum in another order and its rules (the step guard's, the
// schedule's) may differ, so the run goes on within float32 rounding of its own build, not bitwise.
std::string build_change_note(const std::string& dir, const checkpoint::ModelMeta& meta);

class TrainCheckpoints {
 public:
  TrainCheckpoints(const Config& cfg, const Settings& s, const gpt::GptConfig& config, const parallel::Groups& groups,
                   std::vector<Chunk>& chunks, const kernels::Backend& backend)
      : cfg_(cfg), s_(s), config_(config), groups_(groups), chunks_(chunks), backend_(backend) {
    check_tensor_sizes();
  }

  // Collective. [train] resume: "auto" the newest complete checkpoint below step `below` (or none; exit 1 when sealed
  // ones exist but none is usable), "none" none (a usage error over existing checkpoints), else that directory (a
  // usage error when missing or unsealed, exit 1 when its files fail their checksums). "" = start from scratch.
  std::string resume_dir(int64_t below = std::numeric_limits<int64_t>::max()) const;
  // Collective: parameters, moments, progress and guard from dir. Every rank throws the same error: UsageError when
  // the model differs from [model], DamagedCheckpoint when the files do not load.
  void load(const std::string& dir, TrainProgress& p, StepGuard& g) const;
  // Collective: removes the step directories without DONE below the newest sealed one (a prune killed midway left
  // them; nothing would ever remove them), with a warning naming them.
  void remove_leftovers() const;
  // Collective: writes step p.step into a temp dir, seals it (DONE) and prunes old ones; returns its directory.
  std::string write(const TrainProgress& p, const StepGuard& g) const;
  // Collective: the whole model's parameters on rank 0 (an empty vector elsewhere), assembled tensor by tensor from
  // every rank's pieces as a checkpoint is.
  std::vector<float> assemble_params() const;

 private:
  // Without tensor and pipeline parallelism this rank's one chunk is the whole flat buffer.
  // (ZeRO-3 keeps only shards of the parameters: assembled like pieces.)
  bool whole() const { return s_.layout.tp == 1 && s_.layout.pp == 1 && s_.zero < 3; }
  // A checkpoint of pieces (tp, pp or ZeRO-3) assembles each tensor through MPI, whose counts are ints: a tensor of
  // 2^31 elements or more is refused at start-up (UsageError) instead of at the first checkpoint, hours in.
  void check_tensor_sizes() const;
  void write_files(const std::string& tmp, const TrainProgress& p, const StepGuard& g) const;
  void write_assembled(const std::string& tmp, const checkpoint::ModelMeta& meta,
                       const std::vector<gpt::TensorInfo>& whole_tensors, checkpoint::OptimShard os) const;
  // What load() read for one chunk, on the host, before distribute(): the parameters (the first data-parallel replica
  // only) and the moments (whole(): this rank's flat range; else the whole piece's, on the first replica).
  struct LoadedChunk {
    std::vector<float> params, m, v;
    bool flat = false;  // m and v are this rank's own flat range (flat_moments), read by every rank
  };
  // whole(), and the checkpoint's flat buffer laid out as this run's (the same padded vocabulary): each rank reads
  // its own range of the moments; otherwise the first replica reads them tensor by tensor.
  bool flat_moments(const checkpoint::ModelMeta& meta) const { return whole() && meta.config.vocab == config_.vocab; }
  // This rank's part of load().
  void load_files(const std::string& dir, const std::vector<checkpoint::OptimPart>& parts, TrainProgress& p,
                  StepGuard& g, std::vector<LoadedChunk>& loaded) const;
  void check_data(const std::string& dir, const checkpoint::ModelMeta& meta) const;
  void check_schedule(const std::string& dir, const records::TrainState& st) const;
  void fill_unrecorded(records::TrainState& st, const std::string& config_toml) const;
  void load_state(const std::string& dir, const std::vector<checkpoint::OptimPart>& parts,
                  const checkpoint::ModelMeta& meta, TrainProgress& p, StepGuard& g,
                  std::vector<LoadedChunk>& loaded) const;
  void distribute(std::vector<LoadedChunk>& loaded, TrainProgress& p) const;

  const Config& cfg_;
  const Settings& s_;
  const gpt::GptConfig& config_;
  const parallel::Groups& groups_;
  std::vector<Chunk>& chunks_;
  const kernels::Backend& backend_;
};

}  // namespace cairn::train
