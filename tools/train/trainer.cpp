// cairn-train's Trainer (see trainer.h): setup, the step (micro-batches, gradient sync overlapped with backward,
// the update or its skip) and the run loop (validation, checkpoints, restores, stop signals).
#include "trainer.h"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <limits>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>

#include "backend_buffer.h"
#include "cairn/checkpoint.h"
#include "cairn/dir_lock.h"
#include "cairn/error.h"
#include "cairn/files.h"
#include "cairn/gpt.h"
#include "cairn/gpt_mpi.h"
#include "cairn/json_text.h"
#include "cairn/kernels/backend.h"
#include "cairn/log.h"
#include "cairn/malloc_tune.h"
#include "cairn/metrics.h"
#include "cairn/mpi.h"
#include "cairn/parallel.h"
#include "cairn/pipeline.h"
#include "cairn/provenance.h"
#include "cairn/shards.h"
#include "cairn/shards_mpi.h"
#include "cairn/stale_temps.h"
#include "cairn/stop_signal.h"
#include "cairn/vocab_padding.h"
#include "chunk.h"
#include "gpu.h"
#include "grad_sync.h"
#include "kernel_profile.h"
#include "loader.h"
#include "piece_io.h"
#include "pipe_transport.h"
#include "settings.h"
#include "step_guard.h"
#include "step_report.h"
#include "step_trace.h"
#include "train_checkpoint.h"

using nlohmann::json;

namespace cairn::train {

namespace {

class Trainer {
 public:
  Trainer(const Config& cfg, const TrainHooks& hooks) : cfg_(cfg), hooks_(hooks) {}
  // Unwinding from an error (here or on a peer): abort every NCCL communicator before the members holding device
  // memory are destroyed. cudaFree waits for all streams, so a collective still waiting for a failed peer would
  // otherwise hold this rank in a destructor, never reaching the MPI_Abort that ends the job.
  ~Trainer() {
    if (std::uncaught_exceptions() == 0) return;
    if (tp_nccl_) tp_nccl_->abort();
    if (cp_nccl_) cp_nccl_->abort();
    if (dp_nccl_) dp_nccl_->abort();
    if (pipe_) pipe_->abort();
    if (tied_nccl_) tied_nccl_->abort();
    for (Chunk& ch : chunks_)
      if (ch.sync) ch.sync->abort();
  }
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;
  TrainResult run();

 private:
  // Setup (every usage error before anything is written).
  void setup();
  void bind_backend();
  void open_dataset();
  void build_model();
  void check_dataset() const;
  void log_setup() const;
  void init_or_resume();
  void load_checkpoint(const std::string& dir);
  void write_checkpoint();
  bool params_finite() const;       // collective: every parameter of the model is finite
  void retire_newer_checkpoints();  // after an explicit --resume DIR: the checkpoints it diverges from
  void hook(const char* point, int64_t step) {
    if (hooks_.at) hooks_.at(point, step);
  }

  // One step: the pipeline schedule's forward and backward passes over this rank's chunks.
  void train_step(StepTimes& tm, float& loss, double& norm_sq, Fault fault);
  const MicroBatch& micro_batch(int k, StepTimes& tm);
  void forward_action(const pipeline::Action& a, StepTimes& tm);
  void backward_action(const pipeline::Action& a, bool last, Fault fault, StepTimes& tm);
  void grads_ready(Chunk& ch, size_t first, size_t count);
  void finish_grads(StepTimes& tm);
  double global_norm_sq() const;
  double update_or_skip(int64_t step, const std::string& skip_reason, float loss, double norm, double lr);
  double apply_update(double lr, double grad_scale);  // returns seconds spent all-gathering (ZeRO)
  void poison_first_grad() {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    Chunk& ch = chunks_.front();
    float* g = ch.model->grads() ? ch.model->grads() : ch.shard_grads.data();  // ZeRO-2/3: after its reduction
    backend_->copy_to_device(g, &nan, sizeof nan);
  }
  // Pipeline messages (pipe_): a chunk's activations (forward) or input gradient (backward), stream_floats of them.
  int take_slot(Chunk& ch, int micro);
  size_t stream_floats(const Chunk& ch) const;
  // Tokens of a sequence on this rank: seq_len, or seq_len / cp with context parallelism.
  int local_T() const { return s_.T / s_.layout.cp; }
  // Context parallelism: this rank's share of a micro-batch, the rows of chunks cp_rank and 2cp-1-cp_rank of each
  // sequence (the order gpt::ShardSpec describes); the micro-batch itself without.
  MicroBatch context_share(MicroBatch mb) const;
  // GPUs: the tensor- and context-parallel collectives' device-timed seconds into tp_comm_s_ / cp_comm_s_ (and the
  // trace), which MPI reports as each call returns.
  void settle_comm_timings() {
    if (tp_nccl_) tp_nccl_->settle_timings();
    if (cp_nccl_) cp_nccl_->settle_timings();
  }
  // The dp x cp group's NCCL communicator on GPUs, made at the first call (collective: every rank's first chunk
  // asks), null on CPUs.
  gpu::Nccl* dp_nccl() {
    if (!s_.on_gpu) return nullptr;
    if (!dp_nccl_) dp_nccl_ = std::make_unique<gpu::Nccl>(groups_->dp_cp);
    return dp_nccl_.get();
  }
  // The tied wte's gradient summed over the embedding group (NCCL on GPUs, MPI here).
  void sum_over_embedding_group(float* buf, size_t n);
  double memory_gib() const;

  // The run loop.
  void start_run();
  void warn_if_log_ends_early() const;
  bool run_step();
  void restore_after_skips();
  void validate_after(int64_t step);
  bool checkpoint_or_stop(int64_t step);
  void finish_run(int exit_code);
  double validate();
  int val_micro_batches() const;
  bool stop_requested();
  void write_stopped(const char* why);

  // NVTX ranges named like the trace phases, so Nsight Systems timelines read like trace.json (GPU only).
  void phase_begin(const char* name) {
    if (s_.on_gpu) gpu::range_push(name);
  }
  void phase_end() {
    if (s_.on_gpu) gpu::range_pop();
  }

  const Config& cfg_;
  TrainHooks hooks_;
  // Rank 0's lock on the run directory, declared first so it is released last, after every writer is closed.
  DirLock lock_;
  Settings s_;
  TrainResult result_;

  std::unique_ptr<shards::Dataset> ds_;
  WindowIndex widx_;
  std::unique_ptr<Loader> loader_;
  const kernels::Backend* backend_ = nullptr;
  gpu::DeviceInfo device_;
  gpt::GptConfig gcfg_;
  // The layout and this rank's chunks of the model (one per virtual pipeline stage it runs), each with its part of
  // the optimizer state and its data-parallel gradient sync.
  std::unique_ptr<parallel::Groups> groups_;
  // The tensor-parallel group's NCCL communicator (GPU, tp > 1); declared before chunks_ so it outlives their models.
  std::unique_ptr<gpu::Nccl> tp_nccl_;
  // The data-parallel (dp x cp) group's NCCL communicator (GPU, dp x cp > 1), shared by every chunk's gradient sync
  // and ZeRO units (all replicas issue their calls in the same order); declared before chunks_, which use it.
  std::unique_ptr<gpu::Nccl> dp_nccl_;
  // The context-parallel group's NCCL communicator (GPU, cp > 1); before chunks_ too: their models' cp_comm uses it.
  std::unique_ptr<gpu::Nccl> cp_nccl_;
  // The activation memory of every chunk's slots (the micro-batches the schedule keeps in flight on this rank).
  std::shared_ptr<gpt::ActivationPool> act_pool_;
  std::vector<Chunk> chunks_;
  gpt::TpComm tp_comm_;
  double tp_comm_s_ = 0;  // seconds in tensor-parallel collectives (this step so far)
  // The context-parallel group's collectives (cp > 1).
  gpt::TpComm cp_comm_;
  double cp_comm_s_ = 0;    // seconds in context-parallel collectives (this step so far)
  double zero_comm_s_ = 0;  // seconds in ZeRO-2/3's gathers and reduce-scatters inside forward/backward (this step)
  // Pipeline messages (pp > 1): MPI here, NCCL on GPUs. Nothing waits for a send mid-step; wait_sends() at the end.
  std::unique_ptr<PipeTransport> pipe_;
  // The embedding group's NCCL communicator (GPU, pp > 1, first and last stage): the tied wte's gradient sum.
  std::unique_ptr<gpu::Nccl> tied_nccl_;
  std::vector<MicroBatch> micro_;  // this step's micro-batches, fetched as the schedule first needs them
  double loss_sum_ = 0;            // losses of the micro-batches whose head ran on this rank (this step)
  bool reduce_active_ = false;     // the chunk's last backward of the step: ranges go to its gradient sync
  size_t covered_ = 0;             // parameters whose gradient the model reported in this backward

  // Progress and fault state (checkpointed), checkpoints.
  TrainProgress progress_;
  StepGuard guard_;
  std::unique_ptr<TrainCheckpoints> checkpoints_;
  std::string last_ckpt_;
  // Accepted (not skipped) updates since the state of last_ckpt_ (or since initialisation): a checkpoint is never
  // written from a state that only skipped since the last one, so restores keep counting against that checkpoint.
  int64_t accepted_since_ckpt_ = 0;
  // The run was at its last step when this invocation started (a finished job rerun): it trains nothing, and an
  // existing FINISHED keeps the provenance of the run that trained the model.
  bool complete_at_start_ = false;
  // The stop signal all ranks agreed on (the highest number any rank received; 1, below every stop signal: a test
  // hook), so rank 0 names it in STOPPED and the log even when only another rank was signalled.
  int stop_signal_ = 0;

  // Observability.
  FlopCounts flops_;
  std::unique_ptr<StepReporter> report_;
  StepTrace trace_;
  double last_cb_time_ = 0;
  double last_fwd_time_ = 0;  // end of the previous per-layer forward trace event (set at each forward's start)
};

// ---------------------------------------------------------------- setup

void Trainer::setup() {
  s_ = read_settings(cfg_);
  trace_.init(s_);
  bind_backend();
  open_dataset();
  build_model();
  flops_ = flop_counts(s_, gcfg_, device_, *backend_);
  if (s_.on_gpu) gpu::reset_peak_allocated();  // a measuring sgemm's buffers are not training memory
  report_ = std::make_unique<StepReporter>(s_, flops_);
  log_setup();
  check_dataset();
}

// Every shard's tokens against index.json's checksums, once per job and before anything is written: rank r hashes
// shards r, r + world, ... and every rank hears the verdict (shards::verify_shards_across_ranks, which cairn-eval's
// tasks share). Each rank's loader checking every shard it touched read the whole dataset once per rank at each start
// (random windows touch every shard within a few steps): 9.3 GB per rank for 6 steps of a 2-shard dataset, 512 times
// over on 512 ranks.
void Trainer::check_dataset() const {
  std::vector<size_t> every_shard(ds_->num_shards());
  std::iota(every_shard.begin(), every_shard.end(), size_t{0});
  shards::verify_shards_across_ranks(*ds_, every_shard, s_.threads > 0 ? s_.threads : mpi::cores_per_local_rank(),
                                     "data");
}

void Trainer::bind_backend() {
  if (s_.on_gpu) {
    // Unavailable (no driver, no GPU, or a build without CUDA) is a configuration error: exit 2 with the reason; a
    // driver that is there but fails (too old for the runtime, ...) a runtime failure: exit 1, with the CUDA error.
    if (const char* why = kernels::backend_unavailable_reason("cuda")) {
      const std::string msg = strprintf("[train] backend = \"cuda\" cannot run here: %s", why);
      if (kernels::backend_unavailable_is_failure("cuda")) throw RuntimeError(msg);
      throw UsageError(msg);
    }
    device_ = gpu::bind_rank_to_gpu();  // before the backend allocates anything
  }
  backend_ = kernels::find_backend(s_.backend.c_str());
  if (backend_ && s_.on_gpu) gpu::set_bf16_matmul(s_.bf16);
  backend_ = maybe_profiled(s_, backend_);
  if (!backend_) {
    throw UsageError(strprintf("[train] backend = \"%s\" is not available in this build (available: %s)",
                               s_.backend.c_str(), kernels::backend_names()));
  }
  // threads = 0: share the node's cores among its ranks instead of every rank taking all of them.
  kernels::set_cpu_threads(s_.threads > 0 ? s_.threads : mpi::cores_per_local_rank());
  // Before the model and its gradient buffers: ZeRO's unit reductions and the data-parallel buckets make Open MPI
  // allocate a message-sized temporary per call (docs: tools/sweep/README.md, "Page faults and malloc settings").
  if (s_.malloc_tune && !keep_freed_memory_mapped())
    CAIRN_LOG_WARN("[train] malloc_tune: glibc refused mallopt; large MPI reductions may page-fault on every call");
}

// The dataset, the model's sizes and the windows; then the output directory, which must be writable.
void Trainer::open_dataset() {
  {
    std::lock_guard<std::recursive_mutex> lk(hdf5_mutex());
    if (!path_exists(join_path(s_.data_dir, "index.json"))) {
      throw UsageError(file_message("cannot open dataset", s_.data_dir,
                                    "no index.json (run cairn-reshard first or set [data] path)"));
    }
    ds_ = std::make_unique<shards::Dataset>(shards::Dataset::open(s_.data_dir));
  }
  s_.data_fingerprint = ds_->content_fingerprint();
  s_.tokenizer_id = ds_->tokenizer_id();
  s_.data_tokens = ds_->total_tokens();
  uint32_t data_vocab = ds_->vocab_size();
  int64_t vocab = s_.model.vocab;
  // Taken from the dataset: a multiple of 64, then padded for tp as Megatron pads (the rows past the dataset's
  // never score: the loss runs over its vocab_real).
  const int tp = s_.layout.tp;
  auto last_rank_has_real_rows = [&](int64_t v) { return int64_t{data_vocab} > (tp - 1) * (v / tp); };
  if (vocab == 0) {
    vocab = tp_padded_vocab((static_cast<int64_t>(data_vocab) + 63) / 64 * 64, tp);
    // A small vocabulary over many ranks: the least padding that leaves the last rank real rows.
    if (!last_rank_has_real_rows(vocab)) vocab = (int64_t{data_vocab} + tp - 1) / tp * tp;
  }
  if (static_cast<int64_t>(data_vocab) > vocab) {
    throw UsageError(strprintf("[model] vocab = %lld but the dataset \"%s\" has token ids up to %u (vocab_size %u); "
                               "set vocab = 0 to take it from the dataset",
                               static_cast<long long>(vocab), s_.data_dir.c_str(), data_vocab - 1, data_vocab));
  }
  // Before the run directory is touched: the model pieces would refuse it after the lock is taken.
  if (vocab % tp != 0) {
    throw UsageError(strprintf("[model] vocab = %lld (rows of the embedding) is not divisible by [parallel] tp = %d; "
                               "pad it as Megatron does, to a multiple of 128*tp: [model] vocab = %lld (or 0: taken "
                               "from the dataset and padded)",
                               static_cast<long long>(vocab), tp, static_cast<long long>(tp_padded_vocab(vocab, tp))));
  }
  if (!last_rank_has_real_rows(vocab)) {
    throw UsageError(
        strprintf("[model] vocab = %lld over tp = %d leaves the last TP rank only padding rows (the dataset "
                  "has %u tokens); use a smaller vocab or tp, or vocab = 0",
                  static_cast<long long>(vocab), tp, data_vocab));
  }
  gcfg_.layers = s_.model.layers;
  gcfg_.hidden = static_cast<int>(s_.model.hidden);
  gcfg_.heads = s_.model.heads;
  gcfg_.seq_len = s_.T;
  gcfg_.vocab = static_cast<int>(vocab);
  gcfg_.vocab_real = static_cast<int>(data_vocab);
  if (gcfg_.hidden % gcfg_.heads != 0) {
    throw UsageError(strprintf("[model] hidden = %d is not divisible by heads = %d", gcfg_.hidden, gcfg_.heads));
  }
  const int64_t kv = s_.model.kv_heads, ffn = s_.model.ffn_hidden;
  if ((kv != 0 && kv != gcfg_.heads) || (ffn != 0 && ffn != 4 * gcfg_.hidden) || !s_.model.tied_embeddings) {
    throw UsageError(
        "[model] kv_heads, ffn_hidden and tied_embeddings must keep GPT-2's values (0, 0, true) for cairn-train");
  }

  widx_ = build_window_index(*ds_, s_.T, s_.val_fraction, s_.val_every > 0 ? 1 : 0);
  s_.val_windows = widx_.val_windows;
  s_.total_windows = widx_.total;
  if (widx_.train_windows() < static_cast<uint64_t>(s_.global_batch)) {
    throw UsageError(strprintf("[model] seq_len = %d is too long for the dataset \"%s\" (%llu tokens in %zu shards): "
                               "it yields %llu training windows of %d tokens, fewer than global_batch = %lld",
                               s_.T, s_.data_dir.c_str(), static_cast<unsigned long long>(ds_->total_tokens()),
                               ds_->num_shards(), static_cast<unsigned long long>(widx_.train_windows()), s_.T + 1,
                               static_cast<long long>(s_.global_batch)));
  }

  // Output directory: must be writable before any work (exit 2, nothing written otherwise).
  try {
    ensure_dir(s_.train_dir);
    check_writable_dir(s_.train_dir);
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  // Then ours alone: a second trainer on this run stops here (exit 1 on every rank), before it writes anything.
  acquire_on_rank0(
      lock_, join_path(s_.train_dir, "LOCK"), s_.run_dir, "another cairn-train is running in",
      "stop it (or wait for it to exit) before starting another trainer on this run, or use another --out");
  // Under the lock no other trainer writes here: the temp copies a killed one left of the files it replaces whole go
  // (a kill inside atomic_write kept them for good), as cairn-eval, cairn-reshard and cairn-report remove theirs.
  if (s_.rank == 0)
    remove_stale_temps(s_.train_dir, [](const std::string& name) {
      return name == "STOPPED" || name == "FINISHED" || name == "config.toml" || name == "trace.json" ||
             name == "kernel_profile.json" || name == "write-probe";
    });
}

// The layout's groups, this rank's model chunks with their optimizer state and gradient sync, the data loader and
// the checkpoints.
void Trainer::build_model() {
  const parallel::Layout& L = s_.layout;
  groups_ = std::make_unique<parallel::Groups>(L);
  const parallel::Coords& at = groups_->coords;
  // A group's collectives (TP, CP): NCCL on GPUs, MPI here, each call's time added to `seconds` and, while tracing,
  // an event on the rank's comm row.
  // On GPUs the times are measured on the device and reported at settle_comm_timings().
  auto group_comm = [this](MPI_Comm comm, std::unique_ptr<gpu::Nccl>& nccl, double& seconds, const char* event) {
    auto count = [this, &seconds, event](double s, double end) {
      seconds += s;
      if (trace_.active()) trace_.event(event, "comm", end - s, end, nullptr, 1);
    };
    if (!s_.on_gpu) return gpt::mpi_tp_comm(comm, [count](double s) { count(s, monotonic_seconds()); });
    nccl = std::make_unique<gpu::Nccl>(comm);
    return gpu::nccl_tp_comm(*nccl, count);
  };
  if (L.tp > 1) tp_comm_ = group_comm(groups_->tp, tp_nccl_, tp_comm_s_, "tensor-parallel collective");
  if (L.cp > 1) cp_comm_ = group_comm(groups_->cp, cp_nccl_, cp_comm_s_, "context-parallel collective");
  if (L.pp > 1) {
    pipeline::max_message_tag(L.pp, L.v, s_.accum);  // throws when the tags would not fit
    if (s_.on_gpu || s_.pipe_match_order) {
      // NCCL (and MPI with pipe_match = "order") match messages in the order they are posted; the schedule must keep
      // that order on every channel.
      const std::string mismatch = pipeline::in_order_mismatch(L.pp, L.v, s_.accum);
      if (!mismatch.empty()) throw RuntimeError("pipeline schedule breaks the in-order message matching: " + mismatch);
    }
    if (s_.on_gpu) {
      pipe_ = gpu::nccl_pipe(groups_->pp, L.v > 1);
      if (groups_->embedding != MPI_COMM_NULL) tied_nccl_ = std::make_unique<gpu::Nccl>(groups_->embedding);
    } else {
      pipe_ = make_mpi_pipe(*backend_, s_.pipe_match_order);
    }
  }
  for (int c = 0; c < L.v; ++c) {
    Chunk ch;
    ch.stage = parallel::virtual_stage(L, at.pp, c);
    const auto [first, count] = parallel::stage_layer_range(L, ch.stage);
    ch.spec.tp = L.tp;
    ch.spec.tp_rank = at.tp;
    ch.spec.sequence_parallel = L.sp;
    ch.spec.cp = L.cp;
    ch.spec.cp_rank = at.cp;
    ch.spec.cp_ring = s_.cp_ring;
    ch.spec.first_layer = first;
    ch.spec.num_layers = count;
    ch.spec.has_embedding = ch.stage == 0;
    ch.spec.has_head = ch.stage == L.pp * L.v - 1;
    // ZeRO-2/3 over more than one rank: the units lend the gradients (and ZeRO-3 the parameters) from the start.
    const bool zero_units = s_.zero >= 2 && L.dp * L.cp > 1;
    ch.spec.lent_grads = zero_units;
    ch.spec.lent_params = zero_units && s_.zero == 3;
    try {
      ch.model = std::make_unique<gpt::Model>(gcfg_, *backend_, true, ch.spec, tp_comm_, cp_comm_);
    } catch (const UsageError& e) {
      throw UsageError(std::string("[model] / [parallel]: ") + e.what());
    }
    // Per-layer forward events in the trace (backward layers come from the gradient-ready callback).
    ch.model->set_forward_layer_hook([this](int layer) {
      if (!trace_.active()) return;
      double t = monotonic_seconds();
      std::string name = layer < 0               ? std::string("forward embeddings")
                         : layer >= gcfg_.layers ? std::string("forward head/loss")
                                                 : strprintf("forward h.%d", layer);
      trace_.event(name, "layer", last_fwd_time_, t);
      last_fwd_time_ = t;
    });
    ch.model->set_recompute(s_.recompute);
    if (!act_pool_) act_pool_ = std::make_shared<gpt::ActivationPool>(*backend_);
    ch.model->set_activation_pool(act_pool_);
    ch.model->add_pool_sizes(s_.micro, local_T());
    ch.map = piece_map(gcfg_, ch.spec);
    ch.norm_ranges = norm_ranges(ch.model->tensors(), ch.spec);
    if (L.pp > 1 && (ch.spec.has_embedding || ch.spec.has_head)) {
      const gpt::TensorInfo* wte = ch.model->find_tensor("wte");
      ch.tied_first = wte->offset;
      ch.tied_count = wte->size;
    }
    // Gradients are summed (and ZeRO shards) over every rank that holds the same parameters: the data-parallel
    // replicas and, within each, the context-parallel ranks (Megatron's data-parallel group with context parallelism).
    ch.shards = Shards::over(groups_->dp_cp, ch.model->num_params(), s_.zero >= 1);
    // ZeRO-1 over MPI reduce-scatters into the flat gradient itself; ZeRO-2/3 keep only the shard (their units borrow
    // the rest), NCCL's grouped reduce writes a separate buffer.
    if (ch.shards.shard > 0 && (s_.zero >= 2 || s_.on_gpu)) ch.shard_grads = BackendBuffer(backend_, ch.shards.count());
    // This rank's slice of the optimizer, split where weight decay switches on and off.
    ch.decay = gpt::decay_ranges(ch.model->tensors(), ch.shards.lo, ch.shards.count());
    ch.m = BackendBuffer(backend_, ch.shards.count());
    ch.v = BackendBuffer(backend_, ch.shards.count());
    if (ch.spec.lent_grads) {
      if (ch.spec.lent_params) ch.param_shard = BackendBuffer(backend_, ch.shards.count());
      // the tied wte copy's gradient waits for the embedding group's sum (unit 0 holds wte)
      ch.zero = std::make_unique<ZeroUnits>(groups_->dp_cp, ch.shards, ch.model->units(), *backend_, s_.zero == 3,
                                            ch.param_shard.data(), ch.shard_grads.data(), ch.tied_count > 0 ? 0 : -1,
                                            dp_nccl());
      ch.zero->set_on_wait([this](double seconds) {
        zero_comm_s_ += seconds;
        if (trace_.active()) {
          const double t = monotonic_seconds();
          trace_.event("ZeRO collective", "comm", t - seconds, t, nullptr, 1);
        }
      });
    }
    if (ch.shards.size > 1 && s_.zero < 3) {
      ch.sync = make_grad_sync(dp_nccl(), groups_->dp_cp, *backend_, ch.shards, ch.model->grads(),
                               ch.shard_grads.data(), s_.bucket_bytes, trace_);
    }
    ch.slot_of_micro.assign(static_cast<size_t>(s_.accum), -1);
    chunks_.push_back(std::move(ch));
  }

  LoaderOptions lo;
  lo.B = s_.micro;
  lo.T = s_.T;
  lo.rank = at.dp;  // every rank of a data-parallel replica (its TP and pipeline ranks) reads the same batches
  lo.world = L.dp;
  lo.accum = s_.accum;
  lo.seed = s_.seed;
  lo.prefetch = s_.prefetch;
  lo.vocab_limit = ds_->vocab_size();
  lo.shards_checked = true;  // check_dataset(), before the loader reads anything
  loader_ = std::make_unique<Loader>(*ds_, widx_, lo);
  s_.val_rows =
      static_cast<uint64_t>(val_micro_batches()) * static_cast<uint64_t>(L.dp) * static_cast<uint64_t>(s_.micro);
  checkpoints_ = std::make_unique<TrainCheckpoints>(cfg_, s_, gcfg_, *groups_, chunks_, *backend_);
}

void Trainer::log_setup() const {
  if (s_.on_gpu) {
    CAIRN_LOG_INFO("device: %s (%s, %.0f GiB), one GPU per rank%s, %s; MFU against %.1f TFLOP/s per GPU",
                   device_.name.c_str(), device_.pci_bus_id.c_str(), device_.total_gib,
                   s_.world > 1 ? ", NCCL between ranks" : "", s_.bf16 ? "bf16 GEMMs" : "fp32", flops_.peak_tflops);
  }
  CAIRN_LOG_INFO("model: %d layers, hidden %d, %d heads, seq %d, vocab %d (%d real): %.2fM parameters", gcfg_.layers,
                 gcfg_.hidden, gcfg_.heads, gcfg_.seq_len, gcfg_.vocab, gcfg_.vocab_real,
                 static_cast<double>(gpt::count_params(gcfg_)) / 1e6);
  if (s_.world > 1 || s_.layout.tp > 1 || s_.layout.pp > 1) {
    size_t mine = 0, shard = 0;
    for (const Chunk& ch : chunks_) {
      mine += ch.num_params();
      shard += ch.spec.lent_params ? ch.shards.count() : ch.num_params();
    }
    // ZeRO-3: the piece's parameters are gathered a unit at a time; the rank keeps only its shard
    const std::string held = shard == mine ? strprintf("holds %.2fM parameters", mine / 1e6)
                                           : strprintf("holds a ZeRO-3 shard of %.2fM of its piece's %.2fM parameters",
                                                       shard / 1e6, mine / 1e6);
    CAIRN_LOG_INFO("layout: %s%s; rank 0 %s", parallel::describe(s_.layout).c_str(),
                   s_.layout.cp > 1 ? (s_.cp_ring ? ", cp ring (p2p)" : ", cp all-gather") : "", held.c_str());
  }
  for (const std::string& note : s_.layout.notes) CAIRN_LOG_INFO("%s", note.c_str());
  CAIRN_LOG_INFO("data: \"%s\": %llu train / %llu val windows; %d data-parallel ranks x micro %d x accum %d = batch "
                 "%lld (%lld tokens)%s; an epoch is %llu steps (%llu windows left out of each)",
                 s_.data_dir.c_str(), static_cast<unsigned long long>(widx_.train_windows()),
                 static_cast<unsigned long long>(widx_.val_windows), s_.layout.dp, s_.micro, s_.accum,
                 static_cast<long long>(s_.global_batch), static_cast<long long>(s_.global_batch * s_.T),
                 s_.zero ? strprintf(", ZeRO-%d", s_.zero).c_str() : "",
                 static_cast<unsigned long long>(widx_.train_windows() / static_cast<uint64_t>(s_.global_batch)),
                 static_cast<unsigned long long>(widx_.train_windows() % static_cast<uint64_t>(s_.global_batch)));
  if (s_.recompute != gpt::Recompute::None) {
    const size_t rows = static_cast<size_t>(s_.micro) * static_cast<size_t>(s_.T);
    const double mib = 1024.0 * 1024.0;
    CAIRN_LOG_INFO("recompute = \"%s\": activations %.1f MiB per rank instead of %.1f MiB; +%.1f%% hardware FLOPs "
                   "(MFU counts model FLOPs only)",
                   gpt::recompute_name(s_.recompute),
                   static_cast<double>(gpt::planned_activation_bytes(gcfg_, rows, s_.recompute)) / mib,
                   static_cast<double>(gpt::planned_activation_bytes(gcfg_, rows, gpt::Recompute::None)) / mib,
                   100.0 * (flops_.hardware_per_token / flops_.model_per_token - 1.0));
  }
  if (s_.rank == 0 && s_.val_every > 0 && s_.val_batches > 0 && val_micro_batches() == 0) {  // same on every rank
    CAIRN_LOG_WARN("validation is off: the split has %llu windows, fewer than data-parallel ranks x micro_batch = %d "
                   "(raise [data] val_fraction)",
                   static_cast<unsigned long long>(widx_.val_windows), s_.layout.dp * s_.micro);
  } else if (s_.rank == 0 && s_.val_every > 0 && s_.val_batches > 0 &&
             widx_.val_windows < static_cast<uint64_t>(s_.global_batch)) {
    CAIRN_LOG_WARN("validation scores %llu windows, less than one global batch (%lld): the split holds only %llu, so "
                   "val_loss depends on the layout (raise [data] val_fraction to compare layouts)",
                   static_cast<unsigned long long>(s_.val_rows), static_cast<long long>(s_.global_batch),
                   static_cast<unsigned long long>(widx_.val_windows));
  }
}

void Trainer::init_or_resume() {
  std::string resume_dir = checkpoints_->resume_dir();
  // --resume auto: a sealed checkpoint whose checksums pass can still fail to load (a truncated tensor, a tensor
  // checksum): it is damaged like the ones the search skipped, so the next older one is tried, and the damaged one is
  // retired with the other newer ones below.
  while (!resume_dir.empty()) {
    try {
      load_checkpoint(resume_dir);
      break;
    } catch (const DamagedCheckpoint& e) {
      if (s_.resume != "auto") throw;
      if (s_.rank == 0) CAIRN_LOG_WARN("%s (sealed, but damaged); trying the previous checkpoint", e.what());
      resume_dir =
          checkpoints_->resume_dir(checkpoint::parse_step_dir(std::filesystem::path(resume_dir).filename().string()));
    }
  }
  if (resume_dir.empty()) {
    for (Chunk& ch : chunks_) {
      if (!ch.spec.lent_params) {
        ch.model->init(s_.seed);
        continue;
      }
      // ZeRO-3: only this rank's shard, drawn as the whole model's init draws it (the piece is never held whole)
      std::vector<float> shard(ch.shards.count());
      ch.model->init_values(s_.seed, ch.shards.lo, shard.size(), shard.data());
      backend_->copy_to_device(ch.param_shard.data(), shard.data(), shard.size() * sizeof(float));
    }
    CAIRN_LOG_INFO("starting from scratch (seed %llu)", static_cast<unsigned long long>(s_.seed));
  } else {
    CAIRN_LOG_INFO("resuming from \"%s\" at step %lld", resume_dir.c_str(), static_cast<long long>(progress_.step));
    retire_newer_checkpoints();
  }
  checkpoints_->remove_leftovers();
  // ZeRO-2/3: from now on the model borrows its gradient (and ZeRO-3 parameter) memory; it never had its own.
  for (Chunk& ch : chunks_)
    if (ch.zero) ch.model->set_unit_storage(ch.zero->storage());
}

void Trainer::load_checkpoint(const std::string& dir) {
  for (Chunk& ch : chunks_)
    if (ch.zero) ch.zero->drop_kept_params();  // gathered from the shards the load replaces
  checkpoints_->load(dir, progress_, guard_);
  // Checksums only say the files are what was written: a checkpoint written from a broken model (a NaN in wte)
  // would make every step skip and every restore return to it.
  if (!params_finite()) {
    throw RuntimeError(file_message("cannot resume from", dir,
                                    "its parameters are not all finite (the files are intact: it was written from a "
                                    "diverged model); resume from an older checkpoint with --resume DIR"));
  }
  last_ckpt_ = dir;
  accepted_since_ckpt_ = 0;
}

void Trainer::write_checkpoint() {
  // The log first: checkpoints are fsynced, and metrics.jsonl only flushed, so a node crash could keep a checkpoint
  // whose steps the log lost, a gap the resume never fills (an audit cut the log back to step 203 below a step-210
  // checkpoint: steps 204-210 were gone for good, without a word).
  report_->sync();
  last_ckpt_ = checkpoints_->write(progress_, guard_);
  accepted_since_ckpt_ = 0;
  guard_.restores_since_checkpoint = 0;
}

bool Trainer::params_finite() const {
  double sum = 0;
  for (const Chunk& ch : chunks_) {
    if (ch.param_shard.data()) sum += backend_->squared_norm(ch.param_shard.data(), ch.shards.count());
    else if (ch.model->params()) sum += backend_->squared_norm(ch.model->params(), ch.num_params());
  }
  int bad = std::isfinite(sum) ? 0 : 1;
  if (s_.world > 1) bad = mpi::allreduce(bad, MPI_MAX);
  return bad == 0;
}

// A rollback (--resume DIR, possibly with new settings) starts a new line of checkpoints at DIR's step: the newer
// ones in ckpt/ belong to the abandoned run and --resume auto must never pick them after a crash. With resume =
// "auto", checkpoints newer than the one resumed from were skipped as damaged: left in place they would outrank
// (and be kept by pruning instead of) every checkpoint this run writes below their step. Either way they move to
// <run>/train/retired/<UTC time>/ (kept, not deleted).
void Trainer::retire_newer_checkpoints() {
  if (s_.resume == "none") return;
  const bool damaged = s_.resume == "auto";
  bool ok = true;
  std::string err;
  if (s_.rank == 0) try {
      std::vector<std::string> moved;
      std::string dest;
      for (const checkpoint::Entry& e : checkpoint::list(s_.ckpt_dir, false)) {
        if (e.step <= progress_.step) continue;
        if (dest.empty()) {
          char stamp[32];
          const time_t now = time(nullptr);
          struct tm t {};
          gmtime_r(&now, &t);
          strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &t);
          dest = join_path(join_path(s_.train_dir, "retired"), stamp);
          ensure_dir(dest);
        }
        const std::string name = std::filesystem::path(e.dir).filename().string();
        std::filesystem::rename(e.dir, join_path(dest, name));
        moved.push_back(name);
      }
      if (!moved.empty()) {
        // Each retirement holds whole checkpoints: a job preempted again and again (each time between a checkpoint's
        // rename and its DONE marker) would fill the disk with them. The newest keep_checkpoints retirements stay.
        std::vector<std::string> stamps;
        for (const auto& d : std::filesystem::directory_iterator(join_path(s_.train_dir, "retired")))
          if (d.is_directory()) stamps.push_back(d.path().filename().string());
        std::sort(stamps.begin(), stamps.end());
        for (size_t i = 0; i + static_cast<size_t>(s_.keep_checkpoints) < stamps.size(); ++i) {
          std::filesystem::remove_all(join_path(join_path(s_.train_dir, "retired"), stamps[i]));
          CAIRN_LOG_INFO("removed retired/%s: [train] keep_checkpoints = %d retirements are kept", stamps[i].c_str(),
                         s_.keep_checkpoints);
        }
        std::string names;
        for (const std::string& m : moved) names += (names.empty() ? "" : ", ") + m;
        if (damaged)
          CAIRN_LOG_WARN("resumed at step %lld: retired the newer checkpoints that could not be used (%s) to \"%s\"",
                         static_cast<long long>(progress_.step), names.c_str(), dest.c_str());
        else
          CAIRN_LOG_WARN("rollback to step %lld: retired the checkpoints of the abandoned run (%s) to \"%s\"",
                         static_cast<long long>(progress_.step), names.c_str(), dest.c_str());
      }
    } catch (const std::exception& e) {
      ok = false;
      err = std::string("cannot retire the checkpoints newer than the resume point: ") + e.what();
    }
  mpi::agree_or_throw(ok, err, kExitRuntime);
}

// ---------------------------------------------------------------- one step

// One step: the schedule's forward and backward passes over this rank's chunks (without pipeline parallelism each
// micro-batch's forward then its backward), the gradient sums (tied embeddings, data parallel), loss and norm.
void Trainer::train_step(StepTimes& tm, float& loss, double& norm_sq, Fault fault) {
  double step_t0 = monotonic_seconds();
  for (Chunk& ch : chunks_) {
    ch.model->zero_grad();
    if (ch.zero) ch.zero->begin_step();
  }
  micro_.clear();
  loss_sum_ = 0;
  tp_comm_s_ = 0;
  cp_comm_s_ = 0;
  zero_comm_s_ = 0;
  const parallel::Layout& L = s_.layout;
  std::vector<int> backwards_left(chunks_.size(), s_.accum);
  for (const pipeline::Action& a : pipeline::one_f_one_b(L.pp, L.v, groups_->coords.pp, s_.accum)) {
    if (a.op == pipeline::Op::Forward) forward_action(a, tm);
    else backward_action(a, --backwards_left[a.chunk] == 0, fault, tm);
  }
  if (pipe_) pipe_->wait_sends();
  finish_grads(tm);
  settle_comm_timings();

  // Loss over the global batch (the last stage's TP rank 0 speaks for each micro-batch, each CP rank for its share of
  // the tokens); norm of the averaged gradient (each parameter counted once); scaled by the data- and context-parallel
  // ranks and micro-batches.
  const bool speaks = chunks_.back().spec.has_head && groups_->coords.tp == 0;
  double sums[2] = {speaks ? loss_sum_ : 0.0, global_norm_sq()};
  double scale = 1.0 / (static_cast<double>(s_.accum) * L.dp * L.cp);
  if (s_.world > 1) mpi::allreduce_inplace(sums, 2);
  loss = static_cast<float>(sums[0] * scale);
  norm_sq = sums[1] * scale * scale;
  if (fault == Fault::NanLoss) loss = std::numeric_limits<float>::quiet_NaN();
  if (fault == Fault::LossSpike) loss *= 50.0f;
  tm.tp_comm = tp_comm_s_;
  tm.cp_comm = cp_comm_s_;
  tm.zero_comm = zero_comm_s_;
  tm.total = monotonic_seconds() - step_t0;  // optimizer time is added by the caller
}

// Micro-batch k of this step (every rank of a data-parallel replica reads the same ones), fetched in order.
const MicroBatch& Trainer::micro_batch(int k, StepTimes& tm) {
  while (static_cast<int>(micro_.size()) <= k) {
    double t0 = monotonic_seconds(), wait = 0;
    phase_begin("data");
    micro_.push_back(context_share(loader_->next(&wait)));
    phase_end();
    tm.data += wait;
    trace_.event("data", "phase", t0, monotonic_seconds(),
                 {{"micro", static_cast<int>(micro_.size()) - 1}, {"batch", micro_.back().batch}});
  }
  return micro_[static_cast<size_t>(k)];
}

MicroBatch Trainer::context_share(MicroBatch mb) const {
  const int cp = s_.layout.cp;
  if (cp == 1) return mb;
  const int S = mb.T / (2 * cp), T_local = 2 * S, rank = groups_->coords.cp;
  std::vector<int32_t> inputs(static_cast<size_t>(mb.B) * T_local), targets(inputs.size());
  for (int b = 0; b < mb.B; ++b)
    for (int half = 0; half < 2; ++half) {
      const int chunk = gpt::cp_chunk(cp, rank, half);
      const size_t from = static_cast<size_t>(b) * mb.T + static_cast<size_t>(chunk) * S;
      const size_t to = static_cast<size_t>(b) * T_local + static_cast<size_t>(half) * S;
      std::copy_n(mb.inputs.begin() + static_cast<std::ptrdiff_t>(from), S,
                  inputs.begin() + static_cast<std::ptrdiff_t>(to));
      std::copy_n(mb.targets.begin() + static_cast<std::ptrdiff_t>(from), S,
                  targets.begin() + static_cast<std::ptrdiff_t>(to));
    }
  mb.inputs = std::move(inputs);
  mb.targets = std::move(targets);
  mb.T = T_local;
  return mb;
}

size_t Trainer::stream_floats(const Chunk& ch) const {
  return ch.model->stream_rows(s_.micro, local_T()) * static_cast<size_t>(gcfg_.hidden);
}

int Trainer::take_slot(Chunk& ch, int micro) {
  int slot;
  if (!ch.free_slots.empty()) {
    slot = ch.free_slots.back();
    ch.free_slots.pop_back();
  } else {
    slot = ch.slots_used++;
  }
  ch.slot_of_micro[static_cast<size_t>(micro)] = slot;
  ch.model->set_activation_slot(slot);
  return slot;
}

void Trainer::forward_action(const pipeline::Action& a, StepTimes& tm) {
  const MicroBatch& mb = micro_batch(a.micro, tm);
  Chunk& ch = chunks_[static_cast<size_t>(a.chunk)];
  take_slot(ch, a.micro);
  const pipeline::Peers peer = pipeline::peers(s_.layout.pp, s_.layout.v, groups_->coords.pp, a);
  auto to_world = [&](int pp_rank) {
    return parallel::rank_of(s_.layout, {groups_->coords.dp, groups_->coords.tp, pp_rank, groups_->coords.cp});
  };
  double t1 = monotonic_seconds();
  if (!ch.spec.has_embedding) {
    // ZeRO-3: the forward's first layer is gathered while this rank waits for its input
    if (ch.zero) ch.zero->prefetch_params(ch.model->first_unit(false));
    double wait = pipe_->recv(ch.model->stage_input(mb.B, mb.T), stream_floats(ch), to_world(peer.recv_from),
                              peer.recv_tag, PipeKind::Activations);
    tm.pp_wait += wait;
    trace_.event("pipeline wait", "comm", t1, monotonic_seconds(), {{"micro", a.micro}, {"chunk", a.chunk}}, 1);
  }
  double t2 = monotonic_seconds();
  phase_begin("forward");
  last_fwd_time_ = t2;
  float loss = ch.model->forward(mb.inputs.data(), mb.targets.data(), mb.B, mb.T);
  backend_->synchronize();  // phase times mean something on asynchronous (device) backends too
  phase_end();
  if (ch.spec.has_head) loss_sum_ += loss;
  else
    pipe_->send(ch.model->stage_output(), stream_floats(ch), to_world(peer.send_to), peer.send_tag,
                PipeKind::Activations);
  double t3 = monotonic_seconds();
  tm.forward += t3 - t2;
  trace_.event("forward", "phase", t2, t3, {{"micro", a.micro}, {"chunk", a.chunk}});
}

// One micro-batch's backward on a chunk; during the chunk's last one of the step, each range whose gradient is
// final goes to its gradient sync.
void Trainer::backward_action(const pipeline::Action& a, bool last, Fault fault, StepTimes& tm) {
  Chunk& ch = chunks_[static_cast<size_t>(a.chunk)];
  const int slot = ch.slot_of_micro[static_cast<size_t>(a.micro)];
  ch.model->set_activation_slot(slot);
  const pipeline::Peers peer = pipeline::peers(s_.layout.pp, s_.layout.v, groups_->coords.pp, a);
  auto to_world = [&](int pp_rank) {
    return parallel::rank_of(s_.layout, {groups_->coords.dp, groups_->coords.tp, pp_rank, groups_->coords.cp});
  };
  gpt::BackwardOptions o;
  o.last_micro_batch = last;
  double t1 = monotonic_seconds();
  if (!ch.spec.has_head) {
    if (!ch.grad_in.data()) ch.grad_in = BackendBuffer(backend_, stream_floats(ch));
    // ZeRO-3: the backward's first layer is gathered while this rank waits for its output's gradient
    if (ch.zero) ch.zero->prefetch_params(ch.model->first_unit(true));
    tm.pp_wait +=
        pipe_->recv(ch.grad_in.data(), stream_floats(ch), to_world(peer.recv_from), peer.recv_tag, PipeKind::Gradients);
    trace_.event("pipeline wait", "comm", t1, monotonic_seconds(), {{"micro", a.micro}, {"chunk", a.chunk}}, 1);
    o.output_grad = ch.grad_in.data();
  }
  double t2 = monotonic_seconds();
  last_cb_time_ = t2;
  reduce_active_ = last && ch.sync;
  covered_ = 0;
  const bool poison = last && fault == Fault::NanGrad && s_.rank == 0 && &ch == &chunks_.front();
  // NCCL queues each bucket behind the kernels that produced it; MPI, the poison's host write and a trace's
  // per-layer times need them done.
  o.sync_before_ready = !s_.on_gpu || poison || trace_.active();
  o.on_grads_ready = [this, &ch, poison](size_t f, size_t c) {
    // Poison rank 0's gradient before communication: every rank must then see a non-finite norm.
    if (poison && f == 0 && c > 0) poison_first_grad();
    grads_ready(ch, f, c);
  };
  phase_begin("backward");
  ch.model->backward(o);
  if (poison && covered_ == 0) poison_first_grad();
  if (!ch.spec.has_embedding)
    pipe_->send(ch.model->stage_input_grad(), stream_floats(ch), to_world(peer.send_to), peer.send_tag,
                PipeKind::Gradients);
  backend_->synchronize();
  phase_end();
  ch.slot_of_micro[static_cast<size_t>(a.micro)] = -1;
  ch.free_slots.push_back(slot);
  ch.model->release_activation_slot(slot);  // its memory serves the next forward of any chunk
  double t3 = monotonic_seconds();
  tm.backward += t3 - t2;
  trace_.event("backward", "phase", t2, t3, {{"micro", a.micro}, {"chunk", a.chunk}});
}

void Trainer::grads_ready(Chunk& ch, size_t first, size_t count) {
  double t = monotonic_seconds();
  if (trace_.active()) {
    // The backward time since the previous ready range belongs to the layer that owns this range.
    int layer = -1;
    for (const auto& ti : ch.model->tensors()) {
      if (first >= ti.offset && first < ti.offset + ti.size) layer = ti.layer;
    }
    trace_.event(layer >= 0 ? strprintf("backward h.%d", layer) : "backward embeddings/head", "layer", last_cb_time_, t,
                 {{"first", first}, {"count", count}});
  }
  last_cb_time_ = t;
  covered_ += count;
  if (!reduce_active_) return;
  // A tied wte copy waits for the sum over the embedding group (finish_grads); the rest of the range goes now.
  const size_t tie_lo = ch.tied_first, tie_hi = ch.tied_first + ch.tied_count, end = first + count;
  if (ch.tied_count == 0 || end <= tie_lo || first >= tie_hi) {
    ch.sync->ready(first, count);
    return;
  }
  if (first < tie_lo) ch.sync->ready(first, tie_lo - first);
  if (end > tie_hi) ch.sync->ready(tie_hi, end - tie_hi);
}

// After the schedule: tied input/output embeddings summed between the first and last stage (Megatron's embedding
// group), then each chunk's data-parallel sum completed; the wait is exposed communication (the tied sum's: pipeline
// wait).
void Trainer::finish_grads(StepTimes& tm) {
  double t4 = monotonic_seconds(), tied_s = 0;
  phase_begin("comm (exposed)");
  // The tied wte's gradient summed over the first and last stage: pipeline communication, not data-parallel. The
  // stage that finishes first waits here for the other end's last backward (the pipeline's drain), so its time is
  // a pipeline wait.
  auto sum_tied = [&](float* grads, size_t count) {
    const double t = monotonic_seconds();
    sum_over_embedding_group(grads, count);
    const double t_end = monotonic_seconds();
    tied_s += t_end - t;
    trace_.event("tied embedding all-reduce", "comm", t, t_end, nullptr, 1);
  };
  for (Chunk& ch : chunks_) {
    if (ch.zero) {  // ZeRO-2/3: units were reduce-scattered as backward finished them; the tied wte last
      ch.zero->finish_step();
      if (ch.tied_count > 0) sum_tied(ch.zero->deferred_grads(), ch.tied_count);
      ch.zero->reduce_deferred();
      continue;
    }
    if (ch.tied_count > 0) {
      sum_tied(ch.model->grads() + ch.tied_first, ch.tied_count);
      if (ch.sync) ch.sync->ready(ch.tied_first, ch.tied_count);
    }
    if (ch.sync) ch.sync->finish();
  }
  phase_end();
  reduce_active_ = false;
  double t5 = monotonic_seconds();
  tm.comm += t5 - t4 - tied_s;
  tm.pp_wait += tied_s;
  trace_.event("comm (exposed)", "phase", t4, t5);
}

void Trainer::sum_over_embedding_group(float* buf, size_t n) {
  if (tied_nccl_) {
    tied_nccl_->all_reduce(buf, n);
    tied_nccl_->wait();  // the optimizer's kernels read it next
    return;
  }
  if (!backend_->device_memory) {
    mpi::allreduce_inplace(buf, n, MPI_SUM, groups_->embedding);
    return;
  }
  std::vector<float> host(n);  // a device backend without NCCL
  backend_->copy_to_host(host.data(), buf, n * sizeof(float));
  mpi::allreduce_inplace(host, MPI_SUM, groups_->embedding);
  backend_->copy_to_device(buf, host.data(), n * sizeof(float));
}

// This rank's part of the squared norm of the summed gradient (summed over ranks by the caller): the ranges it
// counts, inside its ZeRO shard, or on data-parallel rank 0 without ZeRO.
double Trainer::global_norm_sq() const {
  double sum = 0;
  for (const Chunk& ch : chunks_) {
    const Shards& sh = ch.shards;
    if (sh.shard == 0 && !groups_->first_replica()) continue;
    for (const auto& [first, count] : ch.norm_ranges) {
      const size_t a = std::max(first, sh.lo), b = std::min(first + count, sh.hi);
      if (a >= b) continue;
      sum += backend_->squared_norm(ch.grads_of_shard() + (a - sh.lo), b - a);
    }
  }
  return sum;
}

// Applies the step's update, or counts its skip; returns seconds spent all-gathering parameters (ZeRO).
double Trainer::update_or_skip(int64_t step, const std::string& skip_reason, float loss, double norm, double lr) {
  if (!skip_reason.empty()) {
    guard_.skipped();
    if (s_.rank == 0) {  // every rank decided the same; one line is enough
      CAIRN_LOG_WARN("step %lld: update skipped: %s (loss %g, grad norm %g; %d in a row)", static_cast<long long>(step),
                     skip_reason.c_str(), static_cast<double>(loss), norm, guard_.consecutive);
    }
    return 0.0;
  }
  double clip = s_.grad_clip > 0 && norm > s_.grad_clip ? s_.grad_clip / norm : 1.0;
  ++progress_.adam_step;
  phase_begin("optimizer");
  double gather_s = apply_update(lr, clip / (static_cast<double>(s_.accum) * s_.layout.dp * s_.layout.cp));
  backend_->synchronize();
  phase_end();
  guard_.accepted(loss, norm, s_);
  ++accepted_since_ckpt_;
  return gather_s;
}

double Trainer::apply_update(double lr, double grad_scale) {
  kernels::AdamWParams hp;
  hp.lr = static_cast<float>(lr);
  hp.beta1 = static_cast<float>(s_.beta1);
  hp.beta2 = static_cast<float>(s_.beta2);
  hp.eps = static_cast<float>(s_.eps);
  hp.step = static_cast<long>(progress_.adam_step);
  hp.grad_scale = static_cast<float>(grad_scale);
  double gather_s = 0;
  for (Chunk& ch : chunks_) {
    const float* g = ch.grads_of_shard();
    // the rank's shard of the parameters, wherever it lives (ZeRO-3: only there)
    std::vector<gpt::DecayRange> ranges = ch.decay;
    for (gpt::DecayRange& r : ranges) r.first -= ch.shards.lo;
    gpt::adamw_update_ranges(*backend_, ranges, 0, ch.params_of_shard(), g, ch.m.data(), ch.v.data(), hp,
                             static_cast<float>(s_.weight_decay));
    if (ch.sync) gather_s += ch.sync->all_gather_params(ch.model->params());
  }
  return gather_s;
}

// ---------------------------------------------------------------- the run

int Trainer::val_micro_batches() const {
  // val_batches global batches (Megatron's eval_iters): the first val_batches x global_batch windows of the
  // validation split, each once, whatever the layout (dp x micro_batch x accumulation = global_batch), so val_loss
  // compares across layouts. Never more than the split holds: whole global batches of it, or, where it holds less
  // than one, as many micro-batches as fit (that count depends on the layout; log_setup says so).
  const uint64_t per_micro = static_cast<uint64_t>(s_.layout.dp) * s_.micro;
  const uint64_t accum = static_cast<uint64_t>(std::max(s_.accum, 1));
  const uint64_t wanted = static_cast<uint64_t>(std::max(s_.val_batches, 0));
  const uint64_t globals = std::min<uint64_t>(wanted, widx_.val_windows / (per_micro * accum));
  if (globals > 0 || wanted == 0) return static_cast<int>(globals * accum);
  return static_cast<int>(widx_.val_windows / per_micro);
}

// Forward passes over the validation windows; with pipeline parallelism each micro-batch walks through the virtual
// stages in order (no schedule is needed without backward; tags: the receiving stage).
double Trainer::validate() {
  int batches = val_micro_batches();
  if (batches <= 0) return std::nan("");
  const parallel::Layout& L = s_.layout;
  const parallel::Coords& at = groups_->coords;
  auto world_rank_of_stage = [&](int stage) { return parallel::rank_of(L, {at.dp, at.tp, stage % L.pp, at.cp}); };
  double sum = 0;
  for (int k = 0; k < batches; ++k) {
    const double t0 = monotonic_seconds();
    MicroBatch mb = context_share(loader_->val_batch(k));
    trace_.event("data", "phase", t0, monotonic_seconds(), {{"micro", k}, {"validation", true}});
    for (size_t c = 0; c < chunks_.size(); ++c) {
      Chunk& ch = chunks_[c];
      ch.model->set_activation_slot(0);
      const size_t n = stream_floats(ch);
      const json where = {{"micro", k}, {"chunk", static_cast<int>(c)}, {"validation", true}};
      if (!ch.spec.has_embedding) {
        const double t1 = monotonic_seconds();
        pipe_->recv(ch.model->stage_input(mb.B, mb.T), n, world_rank_of_stage(ch.stage - 1), ch.stage,
                    PipeKind::Activations);
        trace_.event("pipeline wait", "comm", t1, monotonic_seconds(), where, 1);
      }
      // Per-layer events start at this forward, not at the last training forward.
      const double t2 = monotonic_seconds();
      last_fwd_time_ = t2;
      float loss = ch.model->forward(mb.inputs.data(), mb.targets.data(), mb.B, mb.T);
      if (trace_.active()) backend_->synchronize();  // the event ends when the forward has run
      trace_.event("forward", "phase", t2, monotonic_seconds(), where);
      if (ch.spec.has_head) {
        if (at.tp == 0) sum += loss;
        ch.model->release_activation_slot(0);
        continue;
      }
      pipe_->send(ch.model->stage_output(), n, world_rank_of_stage(ch.stage + 1), ch.stage + 1, PipeKind::Activations);
      ch.model->release_activation_slot(0);
    }
  }
  if (pipe_) pipe_->wait_sends();
  settle_comm_timings();  // traced; not counted in the next step's figures (train_step starts them at 0)
  if (s_.world > 1) sum = mpi::allreduce(sum);
  return sum / (static_cast<double>(batches) * L.dp * L.cp);
}

bool Trainer::stop_requested() {
  int local = stop_signal();
  if (local == 0 && hooks_.stop_after_step >= 0 && progress_.step == hooks_.stop_after_step) local = 1;
  stop_signal_ = s_.world > 1 ? mpi::allreduce(local, MPI_MAX) : local;
  return stop_signal_ != 0;
}

// Observability sinks (opened only now that the config and data are known good), stop signals, the data loader.
void Trainer::start_run() {
  // A run already at its last step (a finished job rerun, a requeue after it ended) trains nothing: its metrics.jsonl,
  // TensorBoard files and train/config.toml stay as they were (each rerun appended a provenance line and an empty
  // event file, and rewrote the config with this invocation's).
  complete_at_start_ = progress_.step >= s_.steps;
  if (!complete_at_start_) report_->open(cfg_, progress_.step);
  else if (s_.rank == 0)
    CAIRN_LOG_INFO("the run is complete: step %lld of %lld; nothing to train", static_cast<long long>(progress_.step),
                   static_cast<long long>(s_.steps));
  trace_.name_rows();
  warn_if_log_ends_early();

  // The run continues: an earlier FINISHED (a shorter run extended with --steps, a rollback) or STOPPED no longer
  // describes it (cairn-eval --watch stops at FINISHED).
  if (s_.rank == 0) {
    std::error_code ec;
    if (progress_.step < s_.steps) std::filesystem::remove(join_path(s_.train_dir, "FINISHED"), ec);
    std::filesystem::remove(join_path(s_.train_dir, "STOPPED"), ec);
  }

  mpi::barrier();
  trace_.start_clock(progress_.step);
  loader_->start(progress_.batch);
  report_->start_clock(progress_.step);
}

// Rank 0, resumed from a checkpoint of this run: a metrics.jsonl that ends before the checkpoint's step lost the
// records of the steps between (its tail never reached the disk: a node crash, or a log written before it was fsynced
// with each checkpoint). The resumed run writes only the steps after the checkpoint, so they stay missing: said once
// here, not left as a silent gap. A checkpoint of another run (--resume DIR elsewhere) has its log elsewhere.
void Trainer::warn_if_log_ends_early() const {
  if (s_.rank != 0 || progress_.step == 0 || last_ckpt_.empty()) return;
  std::filesystem::path ckpt = std::filesystem::path(last_ckpt_).lexically_normal();
  if (ckpt.filename().empty()) ckpt = ckpt.parent_path();  // "step_00000050/"
  std::error_code ec;
  if (!std::filesystem::equivalent(ckpt.parent_path(), s_.ckpt_dir, ec)) return;
  const std::string log = join_path(s_.train_dir, "metrics.jsonl");
  std::optional<int64_t> last;
  try {
    last = metrics::last_step_of_kind(log, "train");
  } catch (const Error& e) {  // a note, not a reason to stop the run
    CAIRN_LOG_WARN("cannot check that the log holds the steps of the checkpoint this run resumes from: %s", e.what());
    return;
  }
  if (last && *last >= progress_.step) return;
  const long long from = last ? *last + 1 : 1, to = progress_.step;
  CAIRN_LOG_WARN("\"%s\" %s, before step %lld of the checkpoint this run resumes from (\"%s\"): the records of "
                 "%s are not in it (lost with its tail, as a node crash loses what had not reached the disk) and will "
                 "not be written again",
                 log.c_str(),
                 last ? strprintf("ends at step %lld", static_cast<long long>(*last)).c_str() : "holds no step record",
                 to, last_ckpt_.c_str(),
                 from == to ? strprintf("step %lld", to).c_str() : strprintf("steps %lld-%lld", from, to).c_str());
}

// Computes the next step, applies or skips its update and reports it. Returns true when too many skips in a row
// call for restoring the last checkpoint (or throws when the run must stop instead).
bool Trainer::run_step() {
  const int64_t step = progress_.step + 1;  // the step being computed
  // Each epoch reads the training windows in a new order; the windows past the last whole global batch wait.
  const int64_t per_epoch = static_cast<int64_t>(widx_.train_windows()) / s_.global_batch;
  if (per_epoch > 0 && progress_.batch > 0 && progress_.batch % per_epoch == 0)
    CAIRN_LOG_INFO("epoch %lld begins at step %lld (every %lld steps)",
                   static_cast<long long>(progress_.batch / per_epoch + 1), static_cast<long long>(step),
                   static_cast<long long>(per_epoch));
  trace_.begin_step(step);
  Fault fault = hooks_.fault ? hooks_.fault(step) : Fault::None;
  StepRecord r;
  r.step = step;
  double norm_sq = 0;
  train_step(r.time, r.loss, norm_sq, fault);
  double t_opt = monotonic_seconds();
  r.grad_norm = std::sqrt(norm_sq);
  // The schedule advances with applied updates, as Megatron steps its scheduler only after a successful one: a
  // skipped step (spike, non-finite gradients) does not use up a step of warmup or decay.
  r.lr = learning_rate(progress_.adam_step, s_.decay_length(), s_.warmup, s_.lr, s_.min_lr, s_.schedule);

  // Skip decision: non-finite, or a spike against the window of accepted steps.
  std::string reason = skip_reason(s_, guard_.spikes, r.loss, r.grad_norm);
  r.skipped = !reason.empty();
  double gather_s = update_or_skip(step, reason, r.loss, r.grad_norm, r.lr);
  backend_->synchronize();
  double t_end = monotonic_seconds();
  r.time.optimizer = t_end - t_opt - gather_s;  // the ZeRO-1 parameter all-gather counts as communication
  r.time.comm += gather_s;
  r.time.total += t_end - t_opt;
  trace_.event("optimizer", "phase", t_opt, t_end, {{"skipped", r.skipped}});
  trace_.event(strprintf("step %lld", static_cast<long long>(step)), "step", trace_.step_start(), t_end);

  progress_.step = step;
  progress_.batch += 1;
  progress_.tokens += s_.global_batch * s_.T;
  result_.steps.push_back(step);
  result_.losses.push_back(r.loss);
  result_.skipped.push_back(r.skipped ? 1 : 0);

  r.tokens = progress_.tokens;
  r.mem_gib = s_.world > 1 ? mpi::allreduce(memory_gib(), MPI_MAX) : memory_gib();
  if (s_.layout.pp > 1) r.stages = stage_times(r.time, s_.layout, s_.rank);
  r.skipped_total = guard_.skipped_total;
  report_->write(r);  // rank 0 speaks for all; the time split is rank 0's
  return guard_.must_restore(s_, step, reason, last_ckpt_);
}

// Too many skips in a row: back to the last checkpoint, the data continuing after the bad batches.
void Trainer::restore_after_skips() {
  int64_t resume_batch = progress_.batch, skipped_total = guard_.skipped_total;
  loader_->stop();
  load_checkpoint(last_ckpt_);
  progress_.batch = resume_batch;        // the data that caused the skips is not replayed
  guard_.skipped_total = skipped_total;  // skips stay counted across the restore
  guard_.consecutive = 0;
  ++result_.restores;
  ++guard_.restores_since_checkpoint;
  if (s_.rank == 0)
    CAIRN_LOG_WARN("restored \"%s\" (step %lld); data continues at batch %lld", last_ckpt_.c_str(),
                   static_cast<long long>(progress_.step), static_cast<long long>(progress_.batch));
  report_->reopen(progress_.step);
  loader_->start(progress_.batch);
}

void Trainer::validate_after(int64_t step) {
  if (s_.val_every <= 0 || (step % s_.val_every != 0 && step != s_.steps)) return;
  double t0 = monotonic_seconds();
  phase_begin("validation");
  double vl = validate();
  phase_end();
  trace_.event("validation", "phase", t0, monotonic_seconds());
  if (!std::isfinite(vl)) return;
  result_.val_losses.push_back(vl);
  report_->write_val(step, progress_.tokens, vl, widx_.train_windows(), s_.val_rows);
}

// Signal 1 is the test hook's (TrainHooks::stop_after_step).
static const char* stop_name(int sig) { return sig == 1 ? "test hook" : stop_signal_name(sig); }

// <run>/train/STOPPED: the run stopped on a signal with kExitRequeue, for launchers that lose the exit code.
void Trainer::write_stopped(const char* why) {
  if (s_.rank != 0) return;
  json st = {{"exit_code", kExitRequeue},         {"step", progress_.step},
             {"signal", stop_name(stop_signal_)}, {"reason", why},
             {"checkpoint", last_ckpt_},          {"provenance", provenance().to_json()}};
  atomic_write(join_path(s_.train_dir, "STOPPED"), json_text(st, 1) + "\n");
}

// Writes the periodic and the final checkpoints, and one on a stop request; true when the run must stop (requeue).
// Never from a state that only skipped since the last checkpoint: that state is the last checkpoint's model (skips
// change neither parameters nor optimizer state), and writing it again would hide a run that makes no progress.
bool Trainer::checkpoint_or_stop(int64_t step) {
  bool stop = stop_requested() && step < s_.steps;
  bool periodic = s_.checkpoint_every > 0 && step % s_.checkpoint_every == 0;
  bool wrote = false;
  if (stop || periodic || step == s_.steps) {
    if (accepted_since_ckpt_ > 0) {
      loader_->stop();  // no HDF5 reads while writing
      write_checkpoint();
      wrote = true;
      if (!stop && step < s_.steps) loader_->start(progress_.batch);
    } else if (s_.rank == 0) {
      CAIRN_LOG_WARN("step %lld: no checkpoint written: every step since %s was skipped", static_cast<long long>(step),
                     last_ckpt_.empty() ? "the start" : ("\"" + last_ckpt_ + "\"").c_str());
    }
  }
  if (stop && s_.rank == 0) {
    CAIRN_LOG_WARN("stop requested (%s): %s at step %lld; exiting with %d so the job is requeued",
                   stop_name(stop_signal_), wrote ? "checkpoint written" : "nothing new to save",
                   static_cast<long long>(progress_.step), kExitRequeue);
  }
  if (stop) write_stopped("stop signal during the run");
  return stop;
}

// FINISHED means a usable model: the final checkpoint holds finite parameters that at least one accepted update of
// this line of training produced (or the resumed checkpoint already did). Otherwise the run fails (exit 1).
void Trainer::finish_run(int exit_code) {
  loader_->stop();
  if (trace_.has_events()) trace_.flush();
  if (progress_.step >= s_.steps && exit_code == 0) {
    const std::string last = checkpoint::step_dir(s_.ckpt_dir, progress_.step);
    if (last_ckpt_ != last && accepted_since_ckpt_ > 0) write_checkpoint();
    hook("final_checkpoint", progress_.step);
    if (last_ckpt_.empty()) {
      throw RuntimeError(strprintf("no update of the %lld steps was applied (all skipped: %s); no model to save",
                                   static_cast<long long>(progress_.step),
                                   "non-finite or spiking loss / gradient norm"));
    }
    if (!params_finite()) {
      throw RuntimeError(strprintf("the model after step %lld has non-finite parameters; not writing FINISHED",
                                   static_cast<long long>(progress_.step)));
    }
    const std::string finished = join_path(s_.train_dir, "FINISHED");
    if (s_.rank == 0 && !(complete_at_start_ && path_exists(finished))) {
      // When the last steps were all skipped, the last checkpoint holds exactly the final model.
      json fin = {{"step", progress_.step},
                  {"tokens", progress_.tokens},
                  {"skipped_total", guard_.skipped_total},
                  {"checkpoint", last_ckpt_},
                  {"provenance", provenance().to_json()}};
      atomic_write(finished, json_text(fin, 1) + "\n");
    }
    result_.finished_checkpoint = last_ckpt_;
  }
  mpi::barrier();  // FINISHED and the last checkpoint exist for every rank once run() returns
  if (progress_.step >= s_.steps && exit_code == 0) hook("finished", progress_.step);
  result_.exit_code = exit_code;
  result_.final_step = progress_.step;
  if (hooks_.return_params) {  // a test's final-weights comparison: the run itself has its final checkpoint
    result_.params = checkpoints_->assemble_params();
  }
}

// GiB of cairn's buffers on this rank: parameters and gradients of its chunks, their optimizer state and gradient
// shards, their scratch buffers, and the activation pool (the most micro-batches in flight at once over its chunks).
double Trainer::memory_gib() const {
  size_t bytes = act_pool_ ? act_pool_->allocated_bytes() : 0;
  for (const Chunk& ch : chunks_) {
    bytes += ((ch.model->params() ? 1 : 0) + (ch.model->grads() ? 1 : 0)) * ch.num_params() * sizeof(float);
    bytes += ch.param_shard.n * sizeof(float) + (ch.zero ? ch.zero->bytes() : 0);
    bytes += (ch.m.n + ch.v.n + ch.shard_grads.n + ch.grad_in.n) * sizeof(float);
    bytes += ch.model->activation_bytes();
  }
  return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0);
}

TrainResult Trainer::run() {
  install_stop_handlers();  // (main did already; tests call run_train directly)
  hook("setup", 0);
  setup();
  init_or_resume();
  start_run();
  const int64_t first_step = progress_.step;  // of this process (the kernel profile's per-step figures)
  int exit_code = 0;
  hook("first_step", progress_.step);
  // A signal during start-up (or before it: the handlers are installed first thing in main) stops here: nothing
  // was computed, nothing to save; exit 75 so the job is requeued rather than killed.
  if (progress_.step < s_.steps && stop_requested()) {
    if (s_.rank == 0) {
      CAIRN_LOG_WARN("stop requested (%s) before the first step: nothing to save; exiting with %d so the job is "
                     "requeued",
                     stop_name(stop_signal_), kExitRequeue);
    }
    write_stopped("stop signal before the first step");
    exit_code = kExitRequeue;
  }
  while (exit_code == 0 && progress_.step < s_.steps) {
    if (run_step()) {
      restore_after_skips();
      continue;
    }
    const int64_t step = progress_.step;
    validate_after(step);
    report_->flush();
    if (trace_.range_done(step)) trace_.flush();
    hook("step_done", step);
    if (step == s_.steps) hook("last_step", step);
    if (checkpoint_or_stop(step)) {
      exit_code = kExitRequeue;
      break;
    }
  }
  finish_run(exit_code);
  write_kernel_profile(s_, progress_.step - first_step);
  hook("end", progress_.step);
  return result_;
}

}  // namespace

double learning_rate(int64_t s, int64_t steps, int64_t warmup, double lr, double min_lr, const std::string& schedule) {
  if (s < warmup) return lr * static_cast<double>(s + 1) / static_cast<double>(warmup);
  if (schedule == "constant") return lr;
  double progress = steps > warmup ? static_cast<double>(s - warmup) / static_cast<double>(steps - warmup) : 1.0;
  progress = std::clamp(progress, 0.0, 1.0);
  if (schedule == "linear") return lr + (min_lr - lr) * progress;
  return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(M_PI * progress));
}

TrainResult run_train(const Config& cfg, const TrainHooks& hooks) {
  install_stop_handlers();
  struct Clear {  // the signal was acted on (or came after the last step's check): the next run starts clean
    ~Clear() { clear_stop_signal(); }
  } clear;
  Trainer t(cfg, hooks);
  return t.run();
}

}  // namespace cairn::train
