// [train]: cairn-train's optimisation, checkpoint, fault-handling and observability keys.
#pragma once
#include <cstdint>
#include <string>

#include "cairn/config_section.h"

namespace cairn {

struct TrainSection {
  static constexpr const char* kSection = "train";
  // Optimisation.
  int64_t steps = 1000;
  int64_t global_batch = 8;
  int64_t micro_batch = 0;
  int64_t seed = 1234;
  double lr = 6e-4;
  double min_lr = -1.0;
  int64_t warmup = 100;
  int64_t decay_steps = 0;
  std::string schedule = "cosine";
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double grad_clip = 1.0;
  // Checkpoints.
  int64_t checkpoint_every = 500;
  int keep_checkpoints = 3;
  int64_t keep_every = 0;
  std::string resume = "auto";
  // Validation.
  int64_t val_every = 100;
  int val_batches = 4;
  // Execution.
  std::string backend = "cpu";
  int threads = 0;
  bool malloc_tune = true;
  std::string precision = "fp32";
  std::string recompute = "none";
  double bucket_mb = 4.0;
  int prefetch = 4;
  std::string pipe_match = "tag";
  // Faults.
  double spike_zscore = 6.0;
  int spike_window = 50;
  int spike_min_steps = 20;
  int max_consecutive_skips = 5;
  std::string on_too_many_skips = "restore";
  std::string on_data_change = "refuse";
  std::string on_schedule_change = "refuse";
  // Observability.
  int log_every = 1;
  std::string trace_steps;
  bool tensorboard = true;
  bool profile_kernels = false;
  double peak_tflops = 0.0;

  template <class K>
  static void keys(K& k) {
    using S = TrainSection;
    k(&S::steps, "steps", Range{1, 1e12}, Flag{"--steps"}, "optimizer steps to train");
    k(&S::global_batch, "global_batch", Range{1, 1e9},
      "sequences per optimizer step over all ranks (= ranks x micro_batch x accumulation)");
    k(&S::micro_batch, "micro_batch", Range{0, 1e7},
      "sequences per rank per forward/backward (0 = [parallel] mb, else global_batch / ranks)");
    k(&S::seed, "seed", Range{0, 9.2e18}, "seed of initialisation and data order");
    k(&S::lr, "lr", Range{0, 1e3}, "peak learning rate");
    k(&S::min_lr, "min_lr", Range{-1.0, 1e3},
      "learning rate the cosine or linear decay ends at, at most lr (-1 = lr/10)");
    k(&S::warmup, "warmup", Range{0, 1e12},
      "linear warmup steps: step k (from 1) runs at lr x k / warmup (longer than the decay: cut to it)");
    k(&S::decay_steps, "decay_steps", Range{0, 1e12},
      "length of the schedule, warmup included (Megatron's lr_decay_iters): update k runs at the schedule's value "
      "after k - 1 updates, as Megatron's, so update decay_steps + 1 is the first at min_lr and later ones stay there "
      "(0 = [train] steps, whose last update is one short of min_lr). Keep it when extending a run with more steps, "
      "so its schedule continues");
    k(&S::schedule, "schedule", Choices{"cosine", "linear", "constant"}, "learning-rate decay after warmup");
    k(&S::weight_decay, "weight_decay", Range{0, 1e3}, "AdamW decoupled weight decay (not on norms/biases)");
    k(&S::beta1, "beta1", Range{0, 0.999999},
      "AdamW beta1 (< 1: at 1 the moment never forgets and the bias correction divides by 0)");
    k(&S::beta2, "beta2", Range{0, 0.999999}, "AdamW beta2 (< 1, as beta1)");
    k(&S::eps, "eps", Range{1e-30, 1}, "AdamW epsilon (> 0: it keeps the update finite where the second moment is 0)");
    k(&S::grad_clip, "grad_clip", Range{0, 1e9}, "clip gradients to this global L2 norm (0 = off)");
    k(&S::checkpoint_every, "checkpoint_every", Range{0, 1e12}, "steps between checkpoints (0 = only at the end)");
    k(&S::keep_checkpoints, "keep_checkpoints", Range{1, 1e9}, "keep the newest K checkpoints");
    k(&S::keep_every, "keep_every", Range{0, 1e12},
      "also keep every checkpoint whose step is a multiple of this (0 = none)");
    k(&S::resume, "resume", Flag{"--resume"},
      "auto (newest complete checkpoint if any), none (fresh; fails if checkpoints exist), or a checkpoint directory");
    k(&S::val_every, "val_every", Range{0, 1e12}, "steps between validation passes (0 = off)");
    k(&S::val_batches, "val_batches", Range{0, 1e9},
      "global batches a validation pass scores (Megatron's eval_iters; the same windows in any layout)");
    k(&S::backend, "backend", Choices{"cpu", "cpu-ref", "cuda"}, Flag{"--backend"}, "kernel backend");
    k(&S::threads, "threads", Range{0, 4096}, Flag{"--threads"},
      "CPU threads per rank (0 = the rank's CPUs shared among the ranks bound to them: the node's cores over its ranks "
      "when unbound)");
    k(&S::malloc_tune, "malloc_tune",
      "keep freed memory mapped (glibc: no mmap'd blocks, no trimming), so MPI's per-call temporaries of large "
      "gradient reductions are not page-faulted in again on every call (the ranks' resident size stays at its peak)");
    k(&S::precision, "precision", Choices{"fp32", "bf16"},
      "compute precision: fp32, or bf16 on cuda (GEMM inputs in bf16 with fp32 accumulation; parameters, gradients "
      "and optimizer state stay fp32)");
    k(&S::recompute, "recompute", Choices{"none", "gelu", "full"},
      "activation recomputation, any backend: gelu (one shared GELU output buffer) or full (keep each layer's input "
      "only, rerun the layer in backward); same results bitwise, less memory. \"none\" defers to [parallel] "
      "recompute; two different modes are an error");
    k(&S::bucket_mb, "bucket_mb", Range{0.001, 1e6}, "gradient all-reduce bucket size in MiB");
    k(&S::prefetch, "prefetch", Range{1, 1024}, "micro-batches the loader thread reads ahead");
    k(&S::pipe_match, "pipe_match", Choices{"tag", "order"},
      "how MPI matches pipeline messages: tag (each message its own tag) or order (one tag per direction and kind, "
      "matched in posting order as NCCL does on GPUs: a check that the schedule keeps NCCL's order)");
    k(&S::spike_zscore, "spike_zscore", Range{0, 1e9},
      "skip a step whose loss or grad norm z-score exceeds this (0 = off)");
    k(&S::spike_window, "spike_window", Range{2, 1e9}, "moving window (steps) for spike statistics");
    k(&S::spike_min_steps, "spike_min_steps", Range{0, 1e9}, "steps of history before spike detection starts");
    k(&S::max_consecutive_skips, "max_consecutive_skips", Range{0, 1e9}, "consecutive skipped steps tolerated");
    k(&S::on_too_many_skips, "on_too_many_skips", Choices{"restore", "stop"},
      "restore: reload the last checkpoint and continue after the bad data; stop: exit with an error");
    k(&S::on_data_change, "on_data_change", Choices{"refuse", "warn"},
      "resuming a checkpoint trained on other data (its recorded fingerprint differs): refuse (exit 2) or warn and "
      "continue on this data");
    k(&S::on_schedule_change, "on_schedule_change", Choices{"refuse", "continue"},
      "resuming a checkpoint whose learning-rate schedule (lr, min_lr, warmup, decay_steps, schedule) differs from "
      "this run's: refuse (exit 2), or continue on the new schedule from the checkpoint's step (Megatron's "
      "--override-opt_param-scheduler)");
    k(&S::log_every, "log_every", Range{1, 1e9}, "steps between progress lines on stderr");
    k(&S::trace_steps, "trace_steps", Flag{"--trace-steps"}, StepRange{},
      "a:b writes a Chrome trace of steps a..b-1 to <run>/train/trace.json");
    k(&S::tensorboard, "tensorboard", "write events.out.tfevents.* scalars");
    k(&S::profile_kernels, "profile_kernels", Flag{"--profile-kernels"},
      "time every kernel call (calls and seconds per op and rank, written to <run>/train/kernel_profile.json at the "
      "end); each op then waits for the device, so a GPU run loses its CPU/GPU overlap and runs slower");
    k(&S::peak_tflops, "peak_tflops", Range{0, 1e9},
      "peak TFLOP/s per rank for MFU (0 = measured sgemm peak on CPU; datasheet fp32 peak of known GPUs)");
  }
};

}  // namespace cairn
