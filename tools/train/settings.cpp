// cairn-train's settings (settings.h): reading the config and checking it before anything is written.
#include "settings.h"

#include "cairn/cli.h"
#include "cairn/error.h"
#include "cairn/files.h"
#include "cairn/log.h"
#include "cairn/mpi.h"

namespace cairn::train {

// Activation recomputation from [train] recompute (none|gelu|full) and cairn-plan's [parallel] recompute
// (none|selective|full|gelu). It lives in the model, so every backend runs it. "none" in one key defers to
// the other; two different modes are a usage error (a plan that needs full recompute to fit in memory
// must not be silently overridden, nor the experiment's own choice). Megatron's "selective" (recompute
// the attention core) is what our attention always does, so it adds nothing: it counts as none.
gpt::Recompute resolve_recompute(const Config& cfg) {
  std::string plan = cfg.get_string("parallel.recompute");
  const std::string train = cfg.get_string("train.recompute");
  if (plan == "selective") {
    CAIRN_LOG_INFO("[parallel] recompute = \"selective\" needs nothing here: the attention kernels keep only the "
                   "softmax log-sum-exp, never the T x T probabilities, and backward always recomputes them");
    plan = "none";
  }
  if (plan != "none" && train != "none" && plan != train) {
    throw UsageError("[train] recompute = \"" + train + "\" and [parallel] recompute = \"" + plan +
                     "\" disagree; set one of them to \"none\" or both to the same mode (e.g. --set train.recompute=" +
                     plan + ")");
  }
  return gpt::parse_recompute(train != "none" ? train : plan);
}

Settings read_settings(const Config& cfg) {
  Settings s;
  s.world = mpi::size();
  s.rank = mpi::rank();
  s.steps = cfg.get_int("train.steps");
  s.global_batch = cfg.get_int("train.global_batch");
  s.warmup = cfg.get_int("train.warmup");
  s.T = static_cast<int>(cfg.get_int("model.seq_len"));
  s.seed = static_cast<uint64_t>(cfg.get_int("train.seed"));
  s.lr = cfg.get_float("train.lr");
  s.min_lr = cfg.get_float("train.min_lr");
  if (s.min_lr < 0) s.min_lr = s.lr / 10;
  s.schedule = cfg.get_string("train.schedule");
  s.weight_decay = cfg.get_float("train.weight_decay");
  s.beta1 = cfg.get_float("train.beta1");
  s.beta2 = cfg.get_float("train.beta2");
  s.eps = cfg.get_float("train.eps");
  s.grad_clip = cfg.get_float("train.grad_clip");
  s.checkpoint_every = cfg.get_int("train.checkpoint_every");
  s.keep_checkpoints = static_cast<int>(cfg.get_int("train.keep_checkpoints"));
  s.keep_every = cfg.get_int("train.keep_every");
  s.resume = cfg.get_string("train.resume");
  s.val_every = cfg.get_int("train.val_every");
  s.val_batches = static_cast<int>(cfg.get_int("train.val_batches"));
  s.prefetch = static_cast<int>(cfg.get_int("train.prefetch"));
  s.log_every = static_cast<int>(cfg.get_int("train.log_every"));
  s.bucket_bytes = cfg.get_float("train.bucket_mb") * 1024 * 1024;
  s.spike_z = cfg.get_float("train.spike_zscore");
  s.spike_window = static_cast<int>(cfg.get_int("train.spike_window"));
  s.spike_min_steps = static_cast<int>(cfg.get_int("train.spike_min_steps"));
  s.max_skips = static_cast<int>(cfg.get_int("train.max_consecutive_skips"));
  s.restore_on_skips = cfg.get_string("train.on_too_many_skips") == "restore";
  s.trace_steps = cfg.get_string("train.trace_steps");
  s.tensorboard = cfg.get_bool("train.tensorboard");
  s.peak_tflops = cfg.get_float("train.peak_tflops");
  s.threads = static_cast<int>(cfg.get_int("train.threads"));
  s.backend = cfg.get_string("train.backend");
  s.val_fraction = cfg.get_float("data.val_fraction");

  // [parallel]: the layout (cairn-plan's best.toml keys), checked against the model and the batch. The vocabulary
  // (known once the dataset is open) is checked by the model pieces.
  parallel::LayoutRequest req;
  req.world = s.world;
  req.dp = static_cast<int>(cfg.get_int("parallel.dp"));
  req.tp = static_cast<int>(cfg.get_int("parallel.tp"));
  req.pp = static_cast<int>(cfg.get_int("parallel.pp"));
  req.v = static_cast<int>(cfg.get_int("parallel.v"));
  req.zero = static_cast<int>(cfg.get_int("parallel.zero"));
  req.sp = cfg.get_string("parallel.sp") == "on";
  req.micro_batch = cfg.get_int("train.micro_batch");
  if (req.micro_batch <= 0) req.micro_batch = cfg.get_int("parallel.mb");
  req.global_batch = s.global_batch;
  req.layers = static_cast<int>(cfg.get_int("model.layers"));
  req.heads = static_cast<int>(cfg.get_int("model.heads"));
  req.hidden = static_cast<int>(cfg.get_int("model.hidden"));
  req.seq_len = s.T;
  for (int64_t n : cfg.get_ints("parallel.stage_layers")) req.stage_layers.push_back(static_cast<int>(n));
  // cairn-plan also models context parallelism and TP overlap (for GPU clusters); say plainly what runs here.
  if (cfg.get_int("parallel.cp") > 1)
    throw UsageError("[parallel] cp = " + std::to_string(cfg.get_int("parallel.cp")) +
                     ": cairn-train does not implement context parallelism; constrain the planner with --plan cp=1");
  if (cfg.get_string("parallel.tp_overlap") == "on" && s.rank == 0)
    CAIRN_LOG_WARN("[parallel] tp_overlap = on: cairn-train runs its TP collectives synchronously; the predicted step "
                   "time assumes they overlap");
  s.layout = parallel::resolve_layout(req);
  s.zero = s.layout.zero;
  s.recompute = resolve_recompute(cfg);
  if (s.backend == "cpu" && cfg.get_string("train.precision") != "fp32") {
    throw UsageError("[train] precision = \"" + cfg.get_string("train.precision") + "\" needs the cuda backend; the cpu backend computes in fp32");
  }
  s.on_gpu = s.backend == "cuda";
  if (s.on_gpu) s.bf16 = cfg.get_string("train.precision") == "bf16";
  if (cfg.get_string("model.architecture") != "gpt") {
    throw UsageError("[model] architecture = \"" + cfg.get_string("model.architecture") + "\": cairn-train implements \"gpt\"");
  }
  s.micro = s.layout.micro_batch;
  s.accum = s.layout.micro_steps;
  if (s.warmup > s.steps) s.warmup = s.steps;

  s.run_dir = run_dir(cfg);
  s.train_dir = join_path(s.run_dir, "train");
  s.ckpt_dir = join_path(s.train_dir, "ckpt");
  s.data_dir = cfg.get_string("data.path");
  if (s.data_dir.empty()) s.data_dir = join_path(s.run_dir, "data");
  return s;
}

}  // namespace cairn::train
