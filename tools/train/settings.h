// cairn-train's settings: everything the config decides, read and checked before anything is written.
#pragma once
#include <cstdint>
#include <string>

#include "cairn/config.h"
#include "cairn/gpt.h"
#include "cairn/parallel.h"
#include "cairn/sections.h"

namespace cairn::train {

// Everything the config decides, checked before anything is written.
struct Settings {
  // Steps over which the learning rate decays to min_lr: [train] decay_steps, else steps.
  int64_t decay_length() const { return decay_steps > 0 ? decay_steps : steps; }
  int world = 1, rank = 0;
  int64_t steps = 0, global_batch = 0, warmup = 0;
  int64_t decay_steps = 0;  // [train] decay_steps (0: steps); use decay_length()
  int micro = 0, accum = 1, T = 0;
  uint64_t seed = 0;
  double lr = 0, min_lr = 0, weight_decay = 0, beta1 = 0, beta2 = 0, eps = 0, grad_clip = 0;
  std::string schedule;
  int64_t checkpoint_every = 0, keep_every = 0, val_every = 0;
  int keep_checkpoints = 1, val_batches = 0, prefetch = 4, log_every = 1;
  bool pipe_match_order = false;  // [train] pipe_match = "order": MPI pipeline messages matched like NCCL's
  std::string resume;
  int zero = 0;
  parallel::Layout layout;  // [parallel]: dp x tp x pp (v), ZeRO, sp, micro-batch (resolve_layout)
  double bucket_bytes = 0;
  double spike_z = 0;
  int spike_window = 50, spike_min_steps = 20, max_skips = 5;
  bool restore_on_skips = true;
  std::string trace_steps;
  bool tensorboard = true;
  bool profile_kernels = false;  // [train] profile_kernels: every op timed (profiled backend), kernel_profile.json
  double peak_tflops = 0;
  int threads = 0;
  bool malloc_tune = true;  // [train] malloc_tune: keep_freed_memory_mapped() at start
  std::string backend;
  bool on_gpu = false;                              // backend "cuda": device memory, NCCL between ranks
  bool cp_ring = true;                              // [parallel] cp_comm = "p2p" (ring) or "allgather", when cp > 1
  gpt::Recompute recompute = gpt::Recompute::None;  // [train] / [parallel] recompute (resolve_recompute)
  bool bf16 = false;  // cuda: precision = "bf16" (bf16 GEMM inputs, fp32 accumulation and state)
  std::string run_dir, train_dir, ckpt_dir, data_dir;
  double val_fraction = 0;  // [data] val_fraction
  ModelSection model;       // [model], checked against the dataset when it opens
  // Windows one validation pass scores (val_batches x dp x micro_batch, capped by the split); set once the dataset
  // is open, recorded in checkpoints so cairn-eval's train_val scores exactly these.
  uint64_t val_rows = 0;
  // The training data's identity (shards::Dataset::content_fingerprint()), tokenizer and size, recorded in
  // checkpoints; set once the dataset is open.
  std::string data_fingerprint, tokenizer_id;
  uint64_t data_tokens = 0;
  uint64_t val_windows = 0;        // the validation split's windows (the last of the dataset's numbering); set with it
  uint64_t total_windows = 0;      // the dataset's windows of seq_len + 1 tokens (training and validation); set with it
  bool refuse_data_change = true;  // [train] on_data_change
  bool refuse_schedule_change = true;  // [train] on_schedule_change
};

// [train] recompute and [parallel] recompute resolved to one mode (usage error when they disagree).
gpt::Recompute resolve_recompute(const TrainSection& train, const ParallelSection& parallel);

// Reads and checks the config; throws UsageError (exit 2) on anything cairn-train cannot run.
Settings read_settings(const Config& cfg);

}  // namespace cairn::train
