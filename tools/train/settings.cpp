// cairn-train's settings (settings.h): reading the config and checking it before anything is written.
#include "settings.h"

#include "trainer.h"

#include "cairn/cli.h"
#include "cairn/config_origin.h"
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
gpt::Recompute resolve_recompute(const TrainSection& train_section, const ParallelSection& parallel_section) {
  std::string plan = parallel_section.recompute;
  const std::string& train = train_section.recompute;
  if (plan == "selective") {
    CAIRN_LOG_INFO("[parallel] recompute = \"selective\" needs nothing here: the attention kernels keep only the "
                   "softmax log-sum-exp, never the T x T probabilities, and backward always recomputes them");
    plan = "none";
  }
  if (plan != "none" && train != "none" && plan != train) {
    throw UsageError(
        "[train] recompute = \"" + train + "\" and [parallel] recompute = \"" + plan +
        "\" disagree; set one of them to \"none\" or both to the same mode (e.g. --set train.recompute=" + plan + ")");
  }
  return gpt::parse_recompute(train != "none" ? train : plan);
}

namespace {

// [train]'s optimisation, checkpoint, fault and observability keys, as the trainer names them.
void read_train_keys(const TrainSection& t, Settings& s) {
  s.steps = t.steps;
  s.global_batch = t.global_batch;
  s.warmup = t.warmup;
  s.seed = static_cast<uint64_t>(t.seed);
  s.lr = t.lr;
  s.min_lr = t.min_lr < 0 ? t.lr / 10 : t.min_lr;
  s.schedule = t.schedule;
  s.weight_decay = t.weight_decay;
  s.beta1 = t.beta1;
  s.beta2 = t.beta2;
  s.eps = t.eps;
  s.grad_clip = t.grad_clip;
  s.checkpoint_every = t.checkpoint_every;
  s.keep_checkpoints = t.keep_checkpoints;
  s.keep_every = t.keep_every;
  s.resume = t.resume;
  s.val_every = t.val_every;
  s.val_batches = t.val_batches;
  s.prefetch = t.prefetch;
  s.pipe_match_order = t.pipe_match == "order";
  s.log_every = t.log_every;
  s.bucket_bytes = t.bucket_mb * 1024 * 1024;
  s.spike_z = t.spike_zscore;
  s.spike_window = t.spike_window;
  s.spike_min_steps = t.spike_min_steps;
  s.max_skips = t.max_consecutive_skips;
  s.restore_on_skips = t.on_too_many_skips == "restore";
  s.refuse_data_change = t.on_data_change == "refuse";
  s.refuse_schedule_change = t.on_schedule_change == "refuse";
  s.trace_steps = t.trace_steps;
  s.tensorboard = t.tensorboard;
  s.profile_kernels = t.profile_kernels;
  s.peak_tflops = t.peak_tflops;
  s.threads = t.threads;
  s.malloc_tune = t.malloc_tune;
  s.backend = t.backend;
  s.decay_steps = t.decay_steps;
  // Megatron asserts max_lr >= min_lr: a "decay" up to a larger rate is a typo, not a schedule.
  if (s.schedule != "constant" && s.min_lr > s.lr)
    throw UsageError(
        strprintf("key \"train.min_lr\": %g is above the peak rate train.lr = %g (the decay would raise the "
                  "learning rate)",
                  s.min_lr, s.lr));
  if (s.warmup > s.decay_length()) {
    CAIRN_LOG_INFO("[train] warmup (%lld steps) is longer than the decay (%lld steps, [train] %s): cut to %lld",
                   static_cast<long long>(s.warmup), static_cast<long long>(s.decay_length()),
                   t.decay_steps > 0 ? "decay_steps" : "steps", static_cast<long long>(s.decay_length()));
    s.warmup = s.decay_length();
  }
}

// [parallel]: the layout (cairn-plan's best.toml keys), checked against the model and the batch. The vocabulary
// (known once the dataset is open) is checked by the model pieces.
parallel::Layout read_layout(const Settings& s, const TrainSection& t, const ParallelSection& p,
                             const ModelSection& m) {
  parallel::LayoutRequest req;
  req.world = s.world;
  req.dp = p.dp;
  req.tp = p.tp;
  req.pp = p.pp;
  req.v = p.v;
  req.cp = p.cp;
  req.zero = p.zero;
  req.sp = p.sp == "on";
  // Two keys for one size: a plan's mb that the experiment's micro_batch silently replaced would be a run the plan
  // did not price (its memory and step time), so a disagreement is refused as recompute's is.
  if (t.micro_batch > 0 && p.mb > 0 && t.micro_batch != p.mb)
    throw UsageError(strprintf("[train] micro_batch = %lld and [parallel] mb = %lld disagree; set one of them to 0 or "
                               "both to the same size (e.g. --set train.micro_batch=%lld to run the plan's)",
                               static_cast<long long>(t.micro_batch), static_cast<long long>(p.mb),
                               static_cast<long long>(p.mb)));
  req.micro_batch = t.micro_batch > 0 ? t.micro_batch : p.mb;
  req.global_batch = s.global_batch;
  req.layers = m.layers;
  req.heads = m.heads;
  req.hidden = static_cast<int>(m.hidden);
  req.seq_len = s.T;
  for (int64_t n : p.stage_layers) req.stage_layers.push_back(static_cast<int>(n));
  // cairn-plan also models TP overlap (for GPU clusters); say plainly what runs here.
  if (p.tp_overlap == "on" && s.rank == 0)
    CAIRN_LOG_WARN("[parallel] tp_overlap = on: cairn-train runs its TP collectives synchronously; the predicted step "
                   "time assumes they overlap");
  return parallel::resolve_layout(req);
}

}  // namespace

Settings read_settings(const Config& cfg) {
  const auto train = read_section<TrainSection>(cfg);
  const auto parallel_section = read_section<ParallelSection>(cfg);
  const auto data = read_section<DataSection>(cfg);
  Settings s;
  s.world = mpi::size();
  s.rank = mpi::rank();
  s.model = read_section<ModelSection>(cfg);
  s.T = static_cast<int>(s.model.seq_len);
  s.val_fraction = data.val_fraction;
  read_train_keys(train, s);
  s.layout = read_layout(s, train, parallel_section, s.model);
  s.zero = s.layout.zero;
  s.recompute = resolve_recompute(train, parallel_section);
  s.cp_ring = parallel_section.cp_comm == "p2p";
  if (s.backend == "cpu" && train.precision != "fp32") {
    throw UsageError("[train] precision = \"" + train.precision +
                     "\" needs the cuda backend; the cpu backend computes in fp32");
  }
  s.on_gpu = s.backend == "cuda";
  if (s.on_gpu) s.bf16 = train.precision == "bf16";
  if (s.model.architecture != "gpt") {
    throw UsageError("[model] architecture = \"" + s.model.architecture + "\": cairn-train implements \"gpt\"");
  }
  s.micro = s.layout.micro_batch;
  s.accum = s.layout.micro_steps;

  s.run_dir = run_dir(cfg);
  s.train_dir = join_path(s.run_dir, "train");
  s.ckpt_dir = join_path(s.train_dir, "ckpt");
  s.data_dir = data.path.empty() ? join_path(s.run_dir, "data") : data.path;
  return s;
}

}  // namespace cairn::train
