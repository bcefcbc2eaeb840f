// [train]: cairn-train's optimisation, checkpoint, fault-handling and observability keys.
#include "sections.h"

namespace cairn::schema {
void declare_train(Schema& s) {
  // Optimisation.
  s.add_range("train", "steps", KeyType::Int, 1000, 1, 1e12, "optimizer steps to train");
  s.add_range("train", "global_batch", KeyType::Int, 8, 1, 1e9,
              "sequences per optimizer step over all ranks (= ranks x micro_batch x accumulation)");
  s.add_range("train", "micro_batch", KeyType::Int, 0, 0, 1e7,
              "sequences per rank per forward/backward (0 = [parallel] mb, else global_batch / ranks)");
  s.add_range("train", "seed", KeyType::Int, 1234, 0, 9.2e18, "seed of initialisation and data order");
  s.add_range("train", "lr", KeyType::Float, 6e-4, 0, 1e3, "peak learning rate");
  s.add_range("train", "min_lr", KeyType::Float, -1.0, -1.0, 1e3, "final learning rate of the cosine decay (-1 = lr/10)");
  s.add_range("train", "warmup", KeyType::Int, 100, 0, 1e12, "linear warmup steps");
  s.add_choice("train", "schedule", KeyType::String, "cosine", {"cosine", "linear", "constant"},
               "learning-rate decay after warmup");
  s.add_range("train", "weight_decay", KeyType::Float, 0.1, 0, 1e3, "AdamW decoupled weight decay (not on norms/biases)");
  s.add_range("train", "beta1", KeyType::Float, 0.9, 0, 1, "AdamW beta1");
  s.add_range("train", "beta2", KeyType::Float, 0.95, 0, 1, "AdamW beta2");
  s.add_range("train", "eps", KeyType::Float, 1e-8, 0, 1, "AdamW epsilon");
  s.add_range("train", "grad_clip", KeyType::Float, 1.0, 0, 1e9, "clip gradients to this global L2 norm (0 = off)");
  // Checkpoints.
  s.add_range("train", "checkpoint_every", KeyType::Int, 500, 0, 1e12, "steps between checkpoints (0 = only at the end)");
  s.add_range("train", "keep_checkpoints", KeyType::Int, 3, 1, 1e9, "keep the newest K checkpoints");
  s.add_range("train", "keep_every", KeyType::Int, 0, 0, 1e12, "also keep every checkpoint whose step is a multiple of this (0 = none)");
  s.add("train", "resume", KeyType::String, "auto",
        "auto (newest complete checkpoint if any), none (fresh; fails if checkpoints exist), or a checkpoint directory");
  // Validation.
  s.add_range("train", "val_every", KeyType::Int, 100, 0, 1e12, "steps between validation passes (0 = off)");
  s.add_range("train", "val_batches", KeyType::Int, 4, 0, 1e9, "micro-batches per rank in a validation pass");
  // Execution.
  s.add_choice("train", "backend", KeyType::String, "cpu", {"cpu", "cuda"}, "kernel backend");
  s.add_range("train", "threads", KeyType::Int, 0, 0, 4096, "CPU threads per rank (0 = the node's cores shared among its ranks)");
  s.add_choice("train", "precision", KeyType::String, "fp32", {"fp32", "bf16"},
               "compute precision: fp32, or bf16 on cuda (GEMM inputs in bf16 with fp32 accumulation; parameters, "
               "gradients and optimizer state stay fp32)");
  s.add_choice("train", "recompute", KeyType::String, "none", {"none", "gelu", "full"},
               "activation recomputation, any backend: gelu (one shared GELU output buffer) or full (keep each layer's "
               "input only, rerun the layer in backward); same results bitwise, less memory. \"none\" defers to "
               "[parallel] recompute; two different modes are an error");
  s.add_range("train", "bucket_mb", KeyType::Float, 4.0, 0.001, 1e6, "gradient all-reduce bucket size in MiB");
  s.add_range("train", "prefetch", KeyType::Int, 4, 1, 1024, "micro-batches the loader thread reads ahead");
  // Faults.
  s.add_range("train", "spike_zscore", KeyType::Float, 6.0, 0, 1e9, "skip a step whose loss or grad norm z-score exceeds this (0 = off)");
  s.add_range("train", "spike_window", KeyType::Int, 50, 2, 1e9, "moving window (steps) for spike statistics");
  s.add_range("train", "spike_min_steps", KeyType::Int, 20, 0, 1e9, "steps of history before spike detection starts");
  s.add_range("train", "max_consecutive_skips", KeyType::Int, 5, 0, 1e9, "consecutive skipped steps tolerated");
  s.add_choice("train", "on_too_many_skips", KeyType::String, "restore", {"restore", "stop"},
               "restore: reload the last checkpoint and continue after the bad data; stop: exit with an error");
  // Observability.
  s.add_range("train", "log_every", KeyType::Int, 1, 1, 1e9, "steps between progress lines on stderr");
  s.add("train", "trace_steps", KeyType::String, "", "a:b writes a Chrome trace of steps a..b-1 to <run>/train/trace.json");
  s.add("train", "tensorboard", KeyType::Bool, true, "write events.out.tfevents.* scalars");
  s.add_range("train", "peak_tflops", KeyType::Float, 0.0, 0, 1e9,
              "peak TFLOP/s per rank for MFU (0 = measured sgemm peak on CPU; datasheet fp32 peak of known GPUs)");
}
}  // namespace cairn::schema
