// cairn-train's Trainer (see trainer.h): setup, the step (micro-batches, gradient sync overlapped with backward,
// the update or its skip) and the run loop (validation, checkpoints, restores, stop signals).
#include "trainer.h"

#include <signal.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "backend_buffer.h"
#include "cairn/checkpoint.h"
#include "cairn/error.h"
#include "cairn/files.h"
#include "cairn/gpt.h"
#include "cairn/kernels/backend.h"
#include "cairn/log.h"
#include "cairn/mpi.h"
#include "cairn/provenance.h"
#include "cairn/shards.h"
#include "gpu.h"
#include "grad_sync.h"
#include "loader.h"
#include "settings.h"
#include "step_guard.h"
#include "step_report.h"
#include "step_trace.h"
#include "train_checkpoint.h"

using nlohmann::json;

namespace cairn::train {

namespace {

volatile sig_atomic_t g_stop_signal = 0;
void on_stop_signal(int sig) { g_stop_signal = sig; }

class Trainer {
 public:
  Trainer(const Config& cfg, const TrainHooks& hooks) : cfg_(cfg), hooks_(hooks) {}
  TrainResult run();

 private:
  // Setup (every usage error before anything is written).
  void setup();
  void bind_backend();
  void open_dataset();
  void build_model();
  void log_setup() const;
  void init_or_resume();
  void load_checkpoint(const std::string& dir);
  void write_checkpoint();

  // One step.
  void train_step(StepTimes& tm, float& loss, double& norm_sq, Fault fault);
  void backward(bool last, Fault fault);
  void grads_ready(size_t first, size_t count);
  double global_norm_sq() const;
  double update_or_skip(int64_t step, const std::string& skip_reason, float loss, double norm, double lr);
  double apply_update(double lr, double grad_scale);  // returns seconds spent all-gathering (ZeRO-1)
  void poison_first_grad() {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    backend_->copy_to_device(model_->grads(), &nan, sizeof nan);
  }

  // The run loop.
  void start_run();
  bool run_step();
  void restore_after_skips();
  void validate_after(int64_t step);
  bool checkpoint_or_stop(int64_t step);
  void finish_run(int exit_code);
  double validate();
  int val_micro_batches() const;
  bool stop_requested();

  // NVTX ranges named like the trace phases, so Nsight Systems timelines read like trace.json (GPU only).
  void phase_begin(const char* name) {
    if (s_.on_gpu) gpu::range_push(name);
  }
  void phase_end() {
    if (s_.on_gpu) gpu::range_pop();
  }

  const Config& cfg_;
  TrainHooks hooks_;
  Settings s_;
  TrainResult result_;

  std::unique_ptr<shards::Dataset> ds_;
  WindowIndex widx_;
  std::unique_ptr<Loader> loader_;
  const kernels::Backend* backend_ = nullptr;
  gpu::DeviceInfo device_;
  gpt::GptConfig gcfg_;
  std::unique_ptr<gpt::Model> model_;
  std::vector<gpt::DecayRange> decay_ranges_;

  // Data parallelism: the group gradients are summed over, and this rank's part of the optimizer state
  // (shards_.lo .. shards_.hi: all of it without ZeRO).
  MPI_Comm dp_comm_ = MPI_COMM_WORLD;
  Shards shards_;
  BackendBuffer m_, v_, shard_grads_;  // in the backend's memory
  std::unique_ptr<GradSync> grad_sync_;  // null on a single rank
  bool reduce_active_ = false;           // the last micro-batch's backward: ranges go to grad_sync_
  size_t covered_ = 0;                   // parameters whose gradient the model reported in this backward

  // Progress and fault state (checkpointed), checkpoints.
  TrainProgress progress_;
  StepGuard guard_;
  std::unique_ptr<TrainCheckpoints> checkpoints_;
  std::string last_ckpt_;

  // Observability.
  FlopCounts flops_;
  std::unique_ptr<StepReporter> report_;
  StepTrace trace_;
  double last_cb_time_ = 0;
  double last_fwd_time_ = 0;  // end of the previous forward trace event
  struct sigaction old_term_ {}, old_usr1_ {};
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
}

void Trainer::bind_backend() {
  if (s_.on_gpu) {
    // Unavailable (no driver, no GPU, or a build without CUDA) is a configuration error: exit 2 with the reason.
    if (const char* why = kernels::backend_unavailable_reason("cuda")) {
      throw UsageError(strprintf("[train] backend = \"cuda\" cannot run here: %s", why));
    }
    device_ = gpu::bind_rank_to_gpu();  // before the backend allocates anything
  }
  backend_ = kernels::find_backend(s_.backend.c_str());
  if (backend_ && s_.on_gpu) gpu::set_bf16_matmul(s_.bf16);
  if (!backend_) {
    throw UsageError(strprintf("[train] backend = \"%s\" is not available in this build (available: %s)",
                               s_.backend.c_str(), kernels::backend_names()));
  }
  // threads = 0: share the node's cores among its ranks instead of every rank taking all of them.
  kernels::set_cpu_threads(s_.threads > 0 ? s_.threads : mpi::cores_per_local_rank());
}

// The dataset, the model's sizes and the windows; then the output directory, which must be writable.
void Trainer::open_dataset() {
  {
    std::lock_guard<std::mutex> lk(hdf5_mutex());
    if (!path_exists(join_path(s_.data_dir, "index.json"))) {
      throw UsageError(file_message("cannot open dataset", s_.data_dir,
                                    "no index.json (run cairn-reshard first or set [data] path)"));
    }
    ds_ = std::make_unique<shards::Dataset>(shards::Dataset::open(s_.data_dir));
  }
  uint32_t data_vocab = ds_->vocab_size();
  int64_t vocab = cfg_.get_int("model.vocab");
  if (vocab == 0) vocab = (static_cast<int64_t>(data_vocab) + 63) / 64 * 64;
  if (static_cast<int64_t>(data_vocab) > vocab) {
    throw UsageError(strprintf("[model] vocab = %lld but the dataset \"%s\" has token ids up to %u (vocab_size %u); "
                               "set vocab = 0 to take it from the dataset",
                               static_cast<long long>(vocab), s_.data_dir.c_str(), data_vocab - 1, data_vocab));
  }
  gcfg_.layers = static_cast<int>(cfg_.get_int("model.layers"));
  gcfg_.hidden = static_cast<int>(cfg_.get_int("model.hidden"));
  gcfg_.heads = static_cast<int>(cfg_.get_int("model.heads"));
  gcfg_.seq_len = s_.T;
  gcfg_.vocab = static_cast<int>(vocab);
  gcfg_.vocab_real = static_cast<int>(data_vocab);
  if (gcfg_.hidden % gcfg_.heads != 0) {
    throw UsageError(strprintf("[model] hidden = %d is not divisible by heads = %d", gcfg_.hidden, gcfg_.heads));
  }
  int64_t kv = cfg_.get_int("model.kv_heads"), ffn = cfg_.get_int("model.ffn_hidden");
  if ((kv != 0 && kv != gcfg_.heads) || (ffn != 0 && ffn != 4 * gcfg_.hidden) || !cfg_.get_bool("model.tied_embeddings")) {
    throw UsageError("[model] kv_heads, ffn_hidden and tied_embeddings must keep GPT-2's values (0, 0, true) for cairn-train");
  }

  widx_ = build_window_index(*ds_, s_.T, s_.val_fraction, s_.val_every > 0 ? 1 : 0);
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
  mpi::barrier();
}

// The model, this rank's optimizer state, the gradient sync, the data loader and the checkpoints.
void Trainer::build_model() {
  model_ = std::make_unique<gpt::Model>(gcfg_, *backend_);
  // Per-layer forward events in the trace (backward layers come from the gradient-ready callback).
  model_->set_forward_layer_hook([this](int layer) {
    if (!trace_.active()) return;
    double t = now_s();
    std::string name = layer < 0                ? std::string("forward embeddings")
                       : layer >= gcfg_.layers ? std::string("forward head/loss")
                                               : strprintf("forward h.%d", layer);
    trace_.event(name, "layer", last_fwd_time_, t);
    last_fwd_time_ = t;
  });
  model_->set_recompute(s_.recompute);
  shards_ = Shards::over(dp_comm_, model_->num_params(), s_.zero == 1);
  if (shards_.shard > 0) shard_grads_ = BackendBuffer(backend_, shards_.count());
  // This rank's slice of the optimizer, split where weight decay switches on and off.
  decay_ranges_ = gpt::decay_ranges(model_->tensors(), shards_.lo, shards_.count());
  m_ = BackendBuffer(backend_, shards_.count());
  v_ = BackendBuffer(backend_, shards_.count());
  if (shards_.size > 1) {
    grad_sync_ = make_grad_sync(s_.on_gpu, dp_comm_, *backend_, shards_, model_->grads(), shard_grads_.data(),
                                s_.bucket_bytes, trace_);
  }

  LoaderOptions lo;
  lo.B = s_.micro;
  lo.T = s_.T;
  lo.rank = s_.rank;
  lo.world = s_.world;
  lo.accum = s_.accum;
  lo.seed = s_.seed;
  lo.prefetch = s_.prefetch;
  lo.vocab_limit = ds_->vocab_size();
  loader_ = std::make_unique<Loader>(*ds_, widx_, lo);
  checkpoints_ = std::make_unique<TrainCheckpoints>(cfg_, s_, gcfg_, *model_, *backend_, shards_, m_.data(), v_.data());
}

void Trainer::log_setup() const {
  if (s_.on_gpu) {
    CAIRN_LOG_INFO("device: %s (%s, %.0f GiB), one GPU per rank%s, %s; MFU against %.1f TFLOP/s per GPU",
                   device_.name.c_str(), device_.pci_bus_id.c_str(), device_.total_gib,
                   s_.world > 1 ? ", NCCL between ranks" : "", s_.bf16 ? "bf16 GEMMs" : "fp32", flops_.peak_tflops);
  }
  CAIRN_LOG_INFO("model: %d layers, hidden %d, %d heads, seq %d, vocab %d (%d real): %.2fM parameters", gcfg_.layers,
                 gcfg_.hidden, gcfg_.heads, gcfg_.seq_len, gcfg_.vocab, gcfg_.vocab_real, shards_.N / 1e6);
  CAIRN_LOG_INFO("data: \"%s\": %llu train / %llu val windows; %d ranks x micro %d x accum %d = batch %lld (%lld tokens)%s",
                 s_.data_dir.c_str(), static_cast<unsigned long long>(widx_.train_windows()),
                 static_cast<unsigned long long>(widx_.val_windows), s_.world, s_.micro, s_.accum,
                 static_cast<long long>(s_.global_batch), static_cast<long long>(s_.global_batch * s_.T),
                 s_.zero ? ", ZeRO-1" : "");
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
  if (s_.val_every > 0 && s_.val_batches > 0 && val_micro_batches() == 0) {
    CAIRN_LOG_WARN("validation is off: the split has %llu windows, fewer than ranks x micro_batch = %d "
                   "(raise [data] val_fraction)",
                   static_cast<unsigned long long>(widx_.val_windows), s_.world * s_.micro);
  }
}

void Trainer::init_or_resume() {
  std::string resume_dir = checkpoints_->resume_dir();
  if (resume_dir.empty()) {
    model_->init(s_.seed);
    CAIRN_LOG_INFO("starting from scratch (seed %llu)", static_cast<unsigned long long>(s_.seed));
  } else {
    load_checkpoint(resume_dir);
    CAIRN_LOG_INFO("resuming from \"%s\" at step %lld", resume_dir.c_str(), static_cast<long long>(progress_.step));
  }
}

void Trainer::load_checkpoint(const std::string& dir) {
  checkpoints_->load(dir, progress_, guard_);
  last_ckpt_ = dir;
}

void Trainer::write_checkpoint() {
  last_ckpt_ = checkpoints_->write(progress_, guard_);
  guard_.restores_since_checkpoint = 0;
}

// ---------------------------------------------------------------- one step

void Trainer::train_step(StepTimes& tm, float& loss, double& norm_sq, Fault fault) {
  double step_t0 = now_s();
  model_->zero_grad();
  double loss_sum = 0;
  for (int k = 0; k < s_.accum; ++k) {
    double t0 = now_s(), wait = 0;
    phase_begin("data");
    MicroBatch mb = loader_->next(&wait);
    phase_end();
    double t1 = now_s();
    tm.data += wait;
    trace_.event("data", "phase", t0, t1, {{"micro", k}, {"batch", mb.batch}});
    phase_begin("forward");
    last_fwd_time_ = t1;
    loss_sum += model_->forward(mb.inputs.data(), mb.targets.data(), mb.B, mb.T);
    backend_->synchronize();  // phase times mean something on asynchronous (device) backends too
    phase_end();
    double t2 = now_s();
    tm.forward += t2 - t1;
    trace_.event("forward", "phase", t1, t2, {{"micro", k}});
    last_cb_time_ = t2;
    phase_begin("backward");
    backward(k == s_.accum - 1, fault);
    backend_->synchronize();
    phase_end();
    double t3 = now_s();
    tm.backward += t3 - t2;
    trace_.event("backward", "phase", t2, t3, {{"micro", k}});
  }
  double t4 = now_s();
  phase_begin("comm (exposed)");
  if (grad_sync_) grad_sync_->finish();
  phase_end();
  reduce_active_ = false;
  double t5 = now_s();
  tm.comm += t5 - t4;
  trace_.event("comm (exposed)", "phase", t4, t5);

  // Loss over the global batch; gradient norm of the averaged gradient.
  double sums[2] = {loss_sum, global_norm_sq()};
  double scale = 1.0 / (static_cast<double>(s_.accum) * s_.world);
  if (s_.world > 1) mpi::allreduce_inplace(sums, 2);
  loss = static_cast<float>(sums[0] * scale);
  norm_sq = sums[1] * scale * scale;
  if (fault == Fault::NanLoss) loss = std::numeric_limits<float>::quiet_NaN();
  if (fault == Fault::LossSpike) loss *= 50.0f;
  tm.total = now_s() - step_t0;  // optimizer time is added by the caller
}

// One micro-batch's backward; during the last one, each range whose gradient is final goes to the gradient sync.
void Trainer::backward(bool last, Fault fault) {
  reduce_active_ = last && grad_sync_;
  covered_ = 0;
  if (last && fault == Fault::NanGrad && s_.rank == 0) {
    // Poison rank 0's gradient before communication: every rank must then see a non-finite norm.
    model_->backward([this](size_t f, size_t c) {
      if (f == 0 && c > 0) poison_first_grad();
      grads_ready(f, c);
    });
    if (covered_ == 0) poison_first_grad();
  } else {
    model_->backward([this](size_t f, size_t c) { grads_ready(f, c); });
  }
}

void Trainer::grads_ready(size_t first, size_t count) {
  double t = now_s();
  if (trace_.active()) {
    // The backward time since the previous ready range belongs to the layer that owns this range.
    int layer = -1;
    for (const auto& ti : model_->tensors()) {
      if (first >= ti.offset && first < ti.offset + ti.size) layer = ti.layer;
    }
    trace_.event(layer >= 0 ? strprintf("backward h.%d", layer) : "backward embeddings/head", "layer", last_cb_time_, t,
                 {{"first", first}, {"count", count}});
  }
  last_cb_time_ = t;
  covered_ += count;
  if (reduce_active_) grad_sync_->ready(first, count);
}

// This rank's part of the squared norm of the summed gradient (summed over ranks by the caller).
double Trainer::global_norm_sq() const {
  if (shards_.shard > 0) return backend_->squared_norm(shard_grads_.data(), shards_.count());
  return s_.rank == 0 || s_.world == 1 ? backend_->squared_norm(model_->grads(), shards_.N) : 0.0;
}

// Applies the step's update, or counts its skip; returns seconds spent all-gathering parameters (ZeRO-1).
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
  double gather_s = apply_update(lr, clip / (static_cast<double>(s_.accum) * s_.world));
  backend_->synchronize();
  phase_end();
  guard_.accepted(loss, norm, s_);
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
  float* p = model_->params();
  const float* g = shards_.shard > 0 ? shard_grads_.data() : model_->grads() + shards_.lo;
  gpt::adamw_update_ranges(*backend_, decay_ranges_, shards_.lo, p, g, m_.data(), v_.data(), hp,
                           static_cast<float>(s_.weight_decay));
  return grad_sync_ ? grad_sync_->all_gather_params(p) : 0.0;
}

// ---------------------------------------------------------------- the run

int Trainer::val_micro_batches() const {
  // Never more than the split holds: the scored windows are then exactly the first
  // val_micro_batches() x ranks x micro_batch windows of the validation split, each once.
  uint64_t per_pass = static_cast<uint64_t>(s_.world) * s_.micro;
  return static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(std::max(s_.val_batches, 0)),
                                             widx_.val_windows / per_pass));
}

double Trainer::validate() {
  int batches = val_micro_batches();
  if (batches <= 0) return std::nan("");
  double sum = 0;
  for (int k = 0; k < batches; ++k) {
    MicroBatch mb = loader_->val_batch(k);
    sum += model_->forward(mb.inputs.data(), mb.targets.data(), mb.B, mb.T);
  }
  if (s_.world > 1) sum = mpi::allreduce(sum);
  return sum / (static_cast<double>(batches) * s_.world);
}

bool Trainer::stop_requested() {
  int local = g_stop_signal != 0 ? 1 : 0;
  if (hooks_.stop_after_step >= 0 && progress_.step == hooks_.stop_after_step) local = 1;
  return (s_.world > 1 ? mpi::allreduce(local, MPI_MAX) : local) != 0;
}

// Observability sinks (opened only now that the config and data are known good), stop signals, the data loader.
void Trainer::start_run() {
  report_->open(cfg_, progress_.step);
  trace_.name_rows();

  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, &old_term_);
  sigaction(SIGUSR1, &sa, &old_usr1_);
  g_stop_signal = 0;

  mpi::barrier();
  trace_.start_clock();
  loader_->start(progress_.batch);
  report_->start_clock(progress_.step);
}

// Computes the next step, applies or skips its update and reports it. Returns true when too many skips in a row
// call for restoring the last checkpoint (or throws when the run must stop instead).
bool Trainer::run_step() {
  const int64_t step = progress_.step + 1;  // the step being computed
  trace_.begin_step(step);
  Fault fault = hooks_.fault ? hooks_.fault(step) : Fault::None;
  StepRecord r;
  r.step = step;
  double norm_sq = 0;
  train_step(r.time, r.loss, norm_sq, fault);
  double t_opt = now_s();
  r.grad_norm = std::sqrt(norm_sq);
  r.lr = learning_rate(step - 1, s_.steps, s_.warmup, s_.lr, s_.min_lr, s_.schedule);

  // Skip decision: non-finite, or a spike against the window of accepted steps.
  std::string reason = skip_reason(s_, guard_.spikes, r.loss, r.grad_norm);
  r.skipped = !reason.empty();
  double gather_s = update_or_skip(step, reason, r.loss, r.grad_norm, r.lr);
  backend_->synchronize();
  double t_end = now_s();
  r.time.optimizer = t_end - t_opt - gather_s;  // the ZeRO-1 parameter all-gather counts as communication
  r.time.comm += gather_s;
  r.time.total += t_end - t_opt;
  trace_.event("optimizer", "phase", t_opt, t_end, {{"skipped", r.skipped}});
  trace_.event(strprintf("step %lld", static_cast<long long>(step)), "step", t_end - r.time.total, t_end);

  progress_.step = step;
  progress_.batch += 1;
  progress_.tokens += s_.global_batch * s_.T;
  result_.steps.push_back(step);
  result_.losses.push_back(r.loss);
  result_.skipped.push_back(r.skipped ? 1 : 0);

  r.tokens = progress_.tokens;
  r.skipped_total = guard_.skipped_total;
  report_->write(r);  // rank 0 speaks for all; the time split is rank 0's
  return guard_.must_restore(s_, step, reason, last_ckpt_);
}

// Too many skips in a row: back to the last checkpoint, the data continuing after the bad batches.
void Trainer::restore_after_skips() {
  int64_t resume_batch = progress_.batch, skipped_total = guard_.skipped_total;
  loader_->stop();
  load_checkpoint(last_ckpt_);
  progress_.batch = resume_batch;       // the data that caused the skips is not replayed
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
  double t0 = now_s();
  phase_begin("validation");
  double vl = validate();
  phase_end();
  trace_.event("validation", "phase", t0, now_s());
  if (!std::isfinite(vl)) return;
  result_.val_losses.push_back(vl);
  report_->write_val(step, progress_.tokens, vl, widx_.train_windows(),
                     static_cast<uint64_t>(val_micro_batches()) * s_.world * s_.micro);
}

// Writes the periodic and the final checkpoints, and one on a stop request; true when the run must stop (requeue).
bool Trainer::checkpoint_or_stop(int64_t step) {
  bool stop = stop_requested() && step < s_.steps;
  bool periodic = s_.checkpoint_every > 0 && step % s_.checkpoint_every == 0;
  if (stop || periodic || step == s_.steps) {
    loader_->stop();  // no HDF5 reads while writing
    write_checkpoint();
    if (!stop && step < s_.steps) loader_->start(progress_.batch);
  }
  if (stop && s_.rank == 0) {
    CAIRN_LOG_WARN("stop requested (%s): checkpoint written at step %lld; exiting with %d so the job is requeued",
                   g_stop_signal == SIGUSR1 ? "SIGUSR1" : g_stop_signal == SIGTERM ? "SIGTERM" : "test hook",
                   static_cast<long long>(progress_.step), kExitRequeue);
  }
  return stop;
}

void Trainer::finish_run(int exit_code) {
  loader_->stop();
  if (trace_.has_events()) trace_.flush();
  if (progress_.step >= s_.steps && exit_code == 0) {
    const std::string last = checkpoint::step_dir(s_.ckpt_dir, progress_.step);
    if (last_ckpt_ != last) write_checkpoint();
    if (s_.rank == 0) {
      json fin = {{"step", progress_.step}, {"tokens", progress_.tokens}, {"skipped_total", guard_.skipped_total},
                  {"checkpoint", last}, {"provenance", provenance().to_json()}};
      atomic_write(join_path(s_.train_dir, "FINISHED"), fin.dump(1) + "\n");
    }
  }
  mpi::barrier();  // FINISHED and the last checkpoint exist for every rank once run() returns
  sigaction(SIGTERM, &old_term_, nullptr);
  sigaction(SIGUSR1, &old_usr1_, nullptr);
  result_.exit_code = exit_code;
  result_.final_step = progress_.step;
  if (s_.rank == 0) result_.params = to_host(*backend_, model_->params(), shards_.N);
}

TrainResult Trainer::run() {
  setup();
  init_or_resume();
  start_run();
  int exit_code = 0;
  while (progress_.step < s_.steps) {
    if (run_step()) {
      restore_after_skips();
      continue;
    }
    const int64_t step = progress_.step;
    validate_after(step);
    report_->flush();
    if (trace_.range_done(step)) trace_.flush();
    if (checkpoint_or_stop(step)) {
      exit_code = kExitRequeue;
      break;
    }
  }
  finish_run(exit_code);
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

std::pair<int64_t, int64_t> parse_step_range(const std::string& text) {
  auto colon = text.find(':');
  try {
    if (colon == std::string::npos) throw std::invalid_argument("no colon");
    size_t p1 = 0, p2 = 0;
    int64_t a = std::stoll(text.substr(0, colon), &p1);
    int64_t b = std::stoll(text.substr(colon + 1), &p2);
    if (p1 != colon || p2 != text.size() - colon - 1 || a < 0 || b <= a) throw std::invalid_argument("range");
    return {a, b};
  } catch (const std::exception&) {
    throw UsageError("trace steps \"" + text + "\": expected a:b with 0 <= a < b (steps a..b-1)");
  }
}

TrainResult run_train(const Config& cfg, const TrainHooks& hooks) {
  Trainer t(cfg, hooks);
  return t.run();
}

}  // namespace cairn::train
