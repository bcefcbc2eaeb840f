// The training loop of cairn-train (see trainer.h): setup and validation of the config, the step
// (micro-batches, bucketed gradient all-reduce overlapped with backward, ZeRO-1), checkpoints,
// faults, metrics.
#include "trainer.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <deque>
#include <filesystem>
#include <limits>
#include <memory>

#include "cairn/checkpoint.h"
#include "cairn/cli.h"
#include "cairn/costmodel.h"
#include "cairn/error.h"
#include "cairn/files.h"
#include "cairn/gpt.h"
#include "cairn/kernels/backend.h"
#include "cairn/log.h"
#include "cairn/metrics.h"
#include "cairn/mpi.h"
#include "cairn/provenance.h"
#include "cairn/shards.h"
#include "gpu.h"
#include "loader.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace cairn::train {

namespace {

volatile sig_atomic_t g_stop_signal = 0;
void on_stop_signal(int sig) { g_stop_signal = sig; }

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
double wall_clock() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  long t = static_cast<long>(s + 0.5);
  if (t >= 3600) return strprintf("%ldh%02ldm", t / 3600, (t / 60) % 60);
  if (t >= 60) return strprintf("%ldm%02lds", t / 60, t % 60);
  return strprintf("%lds", t);
}

std::string format_rate(double r) {
  if (r >= 1e6) return strprintf("%.2fM", r / 1e6);
  if (r >= 1e3) return strprintf("%.1fk", r / 1e3);
  return strprintf("%.0f", r);
}

// Everything the config decides, checked before anything is written.
struct Settings {
  int world = 1, rank = 0;
  int64_t steps = 0, global_batch = 0, warmup = 0;
  int micro = 0, accum = 1, T = 0;
  uint64_t seed = 0;
  double lr = 0, min_lr = 0, weight_decay = 0, beta1 = 0, beta2 = 0, eps = 0, grad_clip = 0;
  std::string schedule;
  int64_t checkpoint_every = 0, keep_every = 0, val_every = 0;
  int keep_checkpoints = 1, val_batches = 0, prefetch = 4, log_every = 1;
  std::string resume;
  int zero = 0;
  double bucket_bytes = 0;
  double spike_z = 0;
  int spike_window = 50, spike_min_steps = 20, max_skips = 5;
  bool restore_on_skips = true;
  std::string trace_steps;
  bool tensorboard = true;
  double peak_tflops = 0;
  int threads = 0;
  std::string backend;
  bool on_gpu = false;            // backend "cuda": device memory, NCCL between ranks
  gpt::Recompute recompute = gpt::Recompute::None;  // [train] / [parallel] recompute (resolve_recompute)
  bool bf16 = false;              // cuda: precision = "bf16" (bf16 GEMM inputs, fp32 accumulation and state)
  std::string run_dir, train_dir, ckpt_dir, data_dir;
  double val_fraction = 0;
};

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

  // [parallel]: only pure data parallelism (with optional ZeRO-1) runs here.
  int64_t tp = cfg.get_int("parallel.tp"), pp = cfg.get_int("parallel.pp"), dp = cfg.get_int("parallel.dp");
  if (tp != 1 || pp != 1) {
    throw UsageError(strprintf("[parallel] tp = %lld, pp = %lld: cairn-train runs data parallelism only "
                               "(tp = 1, pp = 1); choose a plan with tp = pp = 1",
                               static_cast<long long>(tp), static_cast<long long>(pp)));
  }
  if (dp != 0 && dp != s.world) {
    throw UsageError(strprintf("[parallel] dp = %lld but %d ranks were started (dp must equal the rank count, or 0)",
                               static_cast<long long>(dp), s.world));
  }
  s.zero = static_cast<int>(cfg.get_int("parallel.zero"));
  if (s.zero > 1) throw UsageError(strprintf("[parallel] zero = %d: cairn-train supports zero = 0 or 1", s.zero));
  if (cfg.get_string("parallel.sp") == "on") throw UsageError("[parallel] sp = \"on\" needs tensor parallelism (tp > 1), which cairn-train does not run");
  s.recompute = resolve_recompute(cfg);
  if (s.backend == "cpu" && cfg.get_string("train.precision") != "fp32") {
    throw UsageError("[train] precision = \"" + cfg.get_string("train.precision") + "\" needs the cuda backend; the cpu backend computes in fp32");
  }
  s.on_gpu = s.backend == "cuda";
  if (s.on_gpu) s.bf16 = cfg.get_string("train.precision") == "bf16";
  if (cfg.get_string("model.architecture") != "gpt") {
    throw UsageError("[model] architecture = \"" + cfg.get_string("model.architecture") + "\": cairn-train implements \"gpt\"");
  }
  int64_t mb = cfg.get_int("train.micro_batch");
  if (mb <= 0) mb = cfg.get_int("parallel.mb");
  if (mb <= 0) mb = s.global_batch / s.world;
  if (mb <= 0 || s.global_batch % (static_cast<int64_t>(s.world) * mb) != 0) {
    throw UsageError(strprintf("[train] global_batch = %lld is not divisible by ranks (%d) x micro_batch (%lld)",
                               static_cast<long long>(s.global_batch), s.world, static_cast<long long>(mb)));
  }
  s.micro = static_cast<int>(mb);
  s.accum = static_cast<int>(s.global_batch / (s.world * mb));
  if (s.warmup > s.steps) s.warmup = s.steps;

  s.run_dir = run_dir(cfg);
  s.train_dir = join_path(s.run_dir, "train");
  s.ckpt_dir = join_path(s.train_dir, "ckpt");
  s.data_dir = cfg.get_string("data.path");
  if (s.data_dir.empty()) s.data_dir = join_path(s.run_dir, "data");
  return s;
}

// Moving statistics of accepted steps, for spike detection (kept in checkpoints for exact resume).
struct SpikeWindow {
  std::deque<double> loss, norm;
  static double zscore(const std::deque<double>& w, double x) {
    if (w.size() < 2) return 0;
    double mean = 0, var = 0;
    for (double v : w) mean += v;
    mean /= static_cast<double>(w.size());
    for (double v : w) var += (v - mean) * (v - mean);
    double sd = std::sqrt(var / static_cast<double>(w.size() - 1));
    if (sd <= 1e-12 * std::max(1.0, std::fabs(mean))) return x > mean * (1 + 1e-6) + 1e-12 ? 1e9 : 0;
    return (x - mean) / sd;
  }
  void push(double l, double n, size_t cap) {
    loss.push_back(l);
    norm.push_back(n);
    while (loss.size() > cap) loss.pop_front();
    while (norm.size() > cap) norm.pop_front();
  }
};

// A float buffer in the backend's memory (host for CPU backends, device memory for CUDA), zeroed.
struct BackendBuffer {
  const kernels::Backend* backend = nullptr;
  float* ptr = nullptr;
  size_t n = 0;
  BackendBuffer() = default;
  BackendBuffer(const kernels::Backend* b, size_t count) : backend(b), n(count) {
    if (n) ptr = static_cast<float*>(b->alloc(n * sizeof(float)));
  }
  ~BackendBuffer() {
    if (ptr) backend->free(ptr);
  }
  BackendBuffer(BackendBuffer&& o) noexcept : backend(o.backend), ptr(o.ptr), n(o.n) { o.ptr = nullptr; }
  BackendBuffer& operator=(BackendBuffer&& o) noexcept {
    std::swap(backend, o.backend);
    std::swap(ptr, o.ptr);
    std::swap(n, o.n);
    return *this;
  }
  float* data() const { return ptr; }
};

// Host copy of `n` floats at backend pointer `src` (a plain copy on CPU backends).
std::vector<float> to_host(const kernels::Backend& b, const float* src, size_t n) {
  std::vector<float> out(n);
  if (n) b.copy_to_host(out.data(), src, n * sizeof(float));
  return out;
}

// Contiguous runs of parameters with the same weight-decay flag.
// Per-rank timing of one step, in seconds.
struct StepTimes {
  double data = 0, forward = 0, backward = 0, comm = 0, optimizer = 0, total = 0;
};

class Trainer {
 public:
  Trainer(const Config& cfg, const TrainHooks& hooks) : cfg_(cfg), hooks_(hooks) {}
  TrainResult run();

 private:
  void setup();
  void init_or_resume();
  void load_checkpoint(const std::string& dir);
  void write_checkpoint();
  void train_step(StepTimes& tm, float& loss, double& norm, Fault fault);
  void start_grad_reduce(size_t first, size_t count);
  void flush_bucket();
  void finish_grad_reduce();
  double validate();
  int val_micro_batches() const;
  void poison_first_grad() {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    backend_->copy_to_device(model_->grads(), &nan, sizeof nan);
  }
  double apply_update(double lr, double grad_scale);  // returns seconds spent all-gathering (ZeRO-1)
  json train_state() const;
  bool stop_requested();
  void flush_trace();
  void trace_event(const std::string& name, const std::string& cat, double t0, double t1, const json& args = nullptr,
                   int tid = 0);
  double measure_peak_tflops();
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
  gpt::GptConfig gcfg_;
  std::unique_ptr<gpt::Model> model_;
  size_t N_ = 0;
  std::vector<gpt::DecayRange> decay_ranges_;

  // Optimizer state: [lo_, hi_) is the range this rank updates (all of it without ZeRO).
  size_t lo_ = 0, hi_ = 0, shard_ = 0;
  BackendBuffer m_, v_, shard_grads_;  // in the backend's memory
  int64_t adam_step_ = 0;

  // Progress state (checkpointed).
  int64_t step_ = 0;        // completed steps
  int64_t tokens_ = 0;
  int64_t batch_ = 0;       // data position: next global batch to read
  int64_t skipped_total_ = 0;
  int consecutive_skips_ = 0;
  SpikeWindow spikes_;
  std::string last_ckpt_;
  int restores_since_checkpoint_ = 0;  // restoring over and over means the model, not the data, is bad

  // Gradient communication: NCCL on its own stream between GPU ranks (backend "cuda"), MPI otherwise.
  gpu::DeviceInfo device_;
  std::unique_ptr<gpu::Nccl> nccl_;
  std::vector<MPI_Request> requests_;
  std::vector<std::pair<double, size_t>> bucket_starts_;  // launch time and size of each request (trace)
  size_t pend_lo_ = 0, pend_hi_ = 0, covered_ = 0;
  bool reduce_active_ = false;

  // Observability.
  metrics::JsonlWriter jsonl_;
  std::unique_ptr<metrics::TfEventsWriter> tb_;
  metrics::Trace trace_;
  int64_t trace_a_ = -1, trace_b_ = -1;
  bool tracing_ = false;
  size_t trace_events_ = 0;
  double trace_epoch_ = 0;
  double flops_per_token_ = 0, peak_tflops_ = 0;
  double hw_flops_per_token_ = 0;  // flops_per_token_ plus what activation recomputation reruns
  double last_cb_time_ = 0;
  double last_fwd_time_ = 0;  // end of the previous forward trace event
};

void Trainer::trace_event(const std::string& name, const std::string& cat, double t0, double t1, const json& args,
                          int tid) {
  if (!tracing_) return;
  trace_.add(name, cat, s_.rank, tid, (t0 - trace_epoch_) * 1e6, (t1 - t0) * 1e6, args);
  ++trace_events_;
}

void Trainer::flush_trace() {
  // Every rank's events go to rank 0, which writes one trace (pid = rank) once the range is over.
  auto all = mpi::allgather_strings(trace_.events().dump());
  if (s_.rank == 0) {
    metrics::Trace merged;
    for (const auto& txt : all) merged.append(json::parse(txt));
    std::string path = join_path(s_.train_dir, "trace.json");
    atomic_write(path, merged.to_json({{"steps", s_.trace_steps}, {"world_size", s_.world},
                                       {"provenance", provenance().to_json()}}));
    CAIRN_LOG_INFO("trace of steps %s written to \"%s\"", s_.trace_steps.c_str(), path.c_str());
  }
  trace_.clear();
  trace_events_ = 0;
  tracing_ = false;
  trace_a_ = trace_b_ = -1;
}

void Trainer::setup() {
  s_ = read_settings(cfg_);
  if (!s_.trace_steps.empty()) std::tie(trace_a_, trace_b_) = parse_step_range(s_.trace_steps);

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

  // Dataset and model sizes.
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

  model_ = std::make_unique<gpt::Model>(gcfg_, *backend_);
  // Per-layer forward events in the trace (backward layers come from the gradient-ready callback).
  model_->set_forward_layer_hook([this](int layer) {
    if (!tracing_) return;
    double t = now_s();
    std::string name = layer < 0                ? std::string("forward embeddings")
                       : layer >= gcfg_.layers ? std::string("forward head/loss")
                                               : strprintf("forward h.%d", layer);
    trace_event(name, "layer", last_fwd_time_, t);
    last_fwd_time_ = t;
  });
  model_->set_recompute(s_.recompute);
  N_ = model_->num_params();
  if (s_.zero == 1 && s_.world > 1) {
    shard_ = (N_ + s_.world - 1) / s_.world;
    lo_ = std::min(N_, shard_ * s_.rank);
    hi_ = std::min(N_, lo_ + shard_);
    shard_grads_ = BackendBuffer(backend_, hi_ - lo_);
  } else {
    lo_ = 0;
    hi_ = N_;
  }
  // This rank's slice of the optimizer, split where weight decay switches on and off.
  decay_ranges_ = gpt::decay_ranges(model_->tensors(), lo_, hi_ - lo_);
  m_ = BackendBuffer(backend_, hi_ - lo_);
  v_ = BackendBuffer(backend_, hi_ - lo_);
  if (s_.on_gpu && s_.world > 1) nccl_ = std::make_unique<gpu::Nccl>();

  LoaderOptions lo;
  lo.B = s_.micro;
  lo.T = s_.T;
  lo.rank = s_.rank;
  lo.world = s_.world;
  lo.accum = s_.accum;
  lo.seed = s_.seed;
  lo.prefetch = s_.prefetch;
  lo.vocab_limit = data_vocab;
  loader_ = std::make_unique<Loader>(*ds_, widx_, lo);

  // MFU numerator: the cost model's model FLOPs per token (3 x forward, Megatron accounting), the same
  // figure cairn-plan predicts with, so predicted and measured MFU compare directly.
  costmodel::ModelSpec spec;
  spec.layers = gcfg_.layers;
  spec.hidden = gcfg_.hidden;
  spec.heads = spec.kv_heads = gcfg_.heads;
  spec.ffn_hidden = 4 * static_cast<int64_t>(gcfg_.hidden);
  spec.seq_len = gcfg_.seq_len;
  spec.vocab = gcfg_.vocab;
  flops_per_token_ = costmodel::model_flops_per_token(spec);
  // MFU counts model FLOPs only (as cairn-plan and Megatron report it); recomputation's extra forward work
  // goes into hardware FLOPs ("hfu" in metrics lines), from the model's own count of what it reruns.
  hw_flops_per_token_ = flops_per_token_ + gpt::recompute_flops_per_token(gcfg_, s_.recompute);
  peak_tflops_ = s_.peak_tflops > 0 ? s_.peak_tflops : measure_peak_tflops();
  if (s_.on_gpu) gpu::reset_peak_allocated();  // a measuring sgemm's buffers are not training memory

  if (s_.on_gpu) {
    CAIRN_LOG_INFO("device: %s (%s, %.0f GiB), one GPU per rank%s, %s; MFU against %.1f TFLOP/s per GPU",
                   device_.name.c_str(), device_.pci_bus_id.c_str(), device_.total_gib,
                   s_.world > 1 ? ", NCCL between ranks" : "", s_.bf16 ? "bf16 GEMMs" : "fp32", peak_tflops_);
  }
  CAIRN_LOG_INFO("model: %d layers, hidden %d, %d heads, seq %d, vocab %d (%d real): %.2fM parameters", gcfg_.layers,
                 gcfg_.hidden, gcfg_.heads, gcfg_.seq_len, gcfg_.vocab, gcfg_.vocab_real, N_ / 1e6);
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
                   100.0 * (hw_flops_per_token_ / flops_per_token_ - 1.0));
  }
  if (s_.val_every > 0 && s_.val_batches > 0 && val_micro_batches() == 0) {
    CAIRN_LOG_WARN("validation is off: the split has %llu windows, fewer than ranks x micro_batch = %d "
                   "(raise [data] val_fraction)",
                   static_cast<unsigned long long>(widx_.val_windows), s_.world * s_.micro);
  }
}

double Trainer::measure_peak_tflops() {
  // A GPU's datasheet peak (fp32, or bf16 tensor cores with precision = "bf16") when it is a known one; else, as
  // on a CPU, the measured peak of this rank's GEMM on a square problem, large enough on a GPU to hide launch latency.
  double datasheet = s_.bf16 ? device_.peak_tflops_bf16 : device_.peak_tflops_fp32;
  if (s_.on_gpu && datasheet > 0) return mpi::allreduce(datasheet) / s_.world;
  const int n = s_.on_gpu ? 4096 : 512;
  float* a = static_cast<float*>(backend_->alloc(sizeof(float) * n * n));
  float* b = static_cast<float*>(backend_->alloc(sizeof(float) * n * n));
  float* c = static_cast<float*>(backend_->alloc(sizeof(float) * n * n));
  backend_->matmul_forward(c, a, b, nullptr, n, n, n, kernels::WeightLayout::InOut);
  double best = 0;
  for (int rep = 0; rep < 8; ++rep) {  // best of several: other processes may share the core
    double t0 = now_s();
    backend_->matmul_forward(c, a, b, nullptr, n, n, n, kernels::WeightLayout::InOut);
    backend_->synchronize();
    double dt = now_s() - t0;
    if (dt > 0) best = std::max(best, 2.0 * n * n * n / dt / 1e12);
  }
  backend_->free(a);
  backend_->free(b);
  backend_->free(c);
  // Every rank measured its own; take the mean so MFU is the same number on every rank.
  return mpi::allreduce(best) / s_.world;
}

json Trainer::train_state() const {
  json sp = {{"loss", std::vector<double>(spikes_.loss.begin(), spikes_.loss.end())},
             {"norm", std::vector<double>(spikes_.norm.begin(), spikes_.norm.end())}};
  return {{"step", step_}, {"tokens", tokens_}, {"batch", batch_}, {"adam_step", adam_step_},
          {"skipped_total", skipped_total_}, {"consecutive_skips", consecutive_skips_}, {"spikes", sp},
          {"seed", s_.seed}, {"world_size", s_.world}, {"zero", s_.zero}};
}

void Trainer::load_checkpoint(const std::string& dir) {
  std::lock_guard<std::mutex> lk(hdf5_mutex());
  checkpoint::ModelMeta meta = checkpoint::read_model_meta(dir);
  const gpt::GptConfig& c = meta.config;
  if (c.layers != gcfg_.layers || c.hidden != gcfg_.hidden || c.heads != gcfg_.heads || c.vocab != gcfg_.vocab ||
      c.seq_len != gcfg_.seq_len) {
    throw UsageError(file_message("cannot resume from", dir,
                                  strprintf("checkpoint model (layers %d, hidden %d, heads %d, seq %d, vocab %d) differs "
                                            "from [model] (layers %d, hidden %d, heads %d, seq %d, vocab %d)",
                                            c.layers, c.hidden, c.heads, c.seq_len, c.vocab, gcfg_.layers, gcfg_.hidden,
                                            gcfg_.heads, gcfg_.seq_len, gcfg_.vocab)));
  }
  std::vector<float> host(N_);
  checkpoint::read_model(dir, model_->tensors(), host.data());
  backend_->copy_to_device(model_->params(), host.data(), N_ * sizeof(float));
  int64_t adam_step = 0;
  std::vector<float> m(hi_ - lo_), v(hi_ - lo_);
  checkpoint::read_optim_range(dir, lo_, hi_ - lo_, m.data(), v.data(), &adam_step);
  if (!m.empty()) {
    backend_->copy_to_device(m_.data(), m.data(), m.size() * sizeof(float));
    backend_->copy_to_device(v_.data(), v.data(), v.size() * sizeof(float));
  }
  const json& st = meta.train_state;
  step_ = st.value("step", meta.step);
  tokens_ = st.value("tokens", meta.tokens);
  batch_ = st.value("batch", step_);
  adam_step_ = st.value("adam_step", adam_step);
  skipped_total_ = st.value("skipped_total", int64_t{0});
  consecutive_skips_ = st.value("consecutive_skips", 0);
  spikes_ = SpikeWindow{};
  if (st.contains("spikes")) {
    for (double x : st["spikes"]["loss"]) spikes_.loss.push_back(x);
    for (double x : st["spikes"]["norm"]) spikes_.norm.push_back(x);
  }
  last_ckpt_ = dir;
}

void Trainer::init_or_resume() {
  std::string resume_dir;
  if (s_.resume == "auto") {
    if (s_.rank == 0) {
      auto e = checkpoint::find_newest_complete(s_.ckpt_dir);
      if (e) resume_dir = e->dir;
    }
    resume_dir = mpi::broadcast_string(resume_dir);
  } else if (s_.resume == "none") {
    auto all = checkpoint::list(s_.ckpt_dir, false);
    if (!all.empty()) {
      throw UsageError(file_message("refusing to start fresh over existing checkpoints in", s_.ckpt_dir,
                                    "use [train] resume = \"auto\" or another --out"));
    }
  } else {
    resume_dir = s_.resume;
    std::string problem = checkpoint::check_dir(resume_dir);
    if (!problem.empty()) throw UsageError(file_message("cannot resume from", resume_dir, problem));
  }
  if (resume_dir.empty()) {
    model_->init(s_.seed);
    CAIRN_LOG_INFO("starting from scratch (seed %llu)", static_cast<unsigned long long>(s_.seed));
  } else {
    load_checkpoint(resume_dir);
    CAIRN_LOG_INFO("resuming from \"%s\" at step %lld", resume_dir.c_str(), static_cast<long long>(step_));
  }
}

void Trainer::write_checkpoint() {
  std::string final_dir = checkpoint::step_dir(s_.ckpt_dir, step_);
  std::string tmp = join_path(s_.ckpt_dir, strprintf(".tmp_step_%08lld", static_cast<long long>(step_)));
  double t0 = now_s();
  if (s_.rank == 0) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    ensure_dir(tmp);
  }
  mpi::barrier();
  bool ok = true;
  std::string err;
  try {
    std::lock_guard<std::mutex> lk(hdf5_mutex());
    if (s_.rank == 0) {
      checkpoint::ModelMeta meta;
      meta.config = gcfg_;
      meta.step = step_;
      meta.tokens = tokens_;
      meta.train_state = train_state();
      meta.config_toml = cfg_.to_toml();
      checkpoint::write_model(join_path(tmp, "model.h5"), meta, model_->tensors(),
                              to_host(*backend_, model_->params(), N_).data());
    }
    checkpoint::OptimShard os;
    // Without ZeRO every rank holds the same moments: rank 0 writes them, the others only their state.
    bool owns = s_.zero == 1 || s_.rank == 0;
    os.offset = owns ? lo_ : 0;
    os.count = owns ? hi_ - lo_ : 0;
    os.total = N_;
    os.adam_step = adam_step_;
    if (owns) {
      os.m = to_host(*backend_, m_.data(), m_.n);
      os.v = to_host(*backend_, v_.data(), v_.n);
    }
    os.rank_state = {{"rank", s_.rank}, {"batch", batch_}};
    checkpoint::write_optim(join_path(tmp, checkpoint::optim_file_name(s_.rank)), os);
  } catch (const std::exception& e) {
    ok = false;
    err = e.what();
  }
  mpi::agree_or_throw(ok, err, kExitRuntime);
  if (s_.rank == 0) {
    checkpoint::seal(tmp, final_dir, step_, s_.world);
    checkpoint::prune(s_.ckpt_dir, s_.keep_checkpoints, s_.keep_every);
  }
  mpi::barrier();
  last_ckpt_ = final_dir;
  restores_since_checkpoint_ = 0;
  CAIRN_LOG_INFO("checkpoint \"%s\" written in %.2f s", final_dir.c_str(), now_s() - t0);
}

// ---------------------------------------------------------------- gradient communication

void Trainer::flush_bucket() {
  if (pend_hi_ <= pend_lo_) return;
  float* g = model_->grads();
  size_t lo = pend_lo_, hi = pend_hi_;
  pend_lo_ = pend_hi_ = 0;
  if (nccl_) {
    // Device memory: NCCL on its own stream, queued behind the backward kernels that produced the bucket.
    if (shard_ == 0) nccl_->all_reduce(g + lo, hi - lo);
    else nccl_->reduce_to_shards(g, lo, hi, shard_, N_, shard_grads_.data());
    bucket_starts_.emplace_back(now_s(), hi - lo);
    return;
  }
  MPI_Request req;
  if (shard_ == 0) {
    mpi::check(MPI_Iallreduce(MPI_IN_PLACE, g + lo, static_cast<int>(hi - lo), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req),
               "MPI_Iallreduce");
  } else {
    // ZeRO-1: each rank receives the summed part of [lo, hi) that falls in its shard.
    std::vector<int> counts(s_.world);
    for (int r = 0; r < s_.world; ++r) {
      size_t a = std::max(lo, std::min(N_, shard_ * r)), b = std::min(hi, std::min(N_, shard_ * (r + 1)));
      counts[r] = b > a ? static_cast<int>(b - a) : 0;
    }
    size_t mine = std::max(lo, lo_);
    float* recv = shard_grads_.data() + (counts[s_.rank] > 0 ? mine - lo_ : 0);
    mpi::check(MPI_Ireduce_scatter(g + lo, recv, counts.data(), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req),
               "MPI_Ireduce_scatter");
  }
  requests_.push_back(req);
  bucket_starts_.emplace_back(now_s(), hi - lo);
}

void Trainer::start_grad_reduce(size_t first, size_t count) {
  double t = now_s();
  if (tracing_) {
    // The backward time since the previous ready range belongs to the layer that owns this range.
    int layer = -1;
    for (const auto& ti : model_->tensors()) {
      if (first >= ti.offset && first < ti.offset + ti.size) layer = ti.layer;
    }
    trace_event(layer >= 0 ? strprintf("backward h.%d", layer) : "backward embeddings/head", "layer", last_cb_time_, t,
                {{"first", first}, {"count", count}});
  }
  last_cb_time_ = t;
  covered_ += count;
  if (!reduce_active_) return;
  if (pend_hi_ > pend_lo_ && (first + count == pend_lo_ || first == pend_hi_)) {
    pend_lo_ = std::min(pend_lo_, first);
    pend_hi_ = std::max(pend_hi_, first + count);
  } else {
    flush_bucket();
    pend_lo_ = first;
    pend_hi_ = first + count;
  }
  if (static_cast<double>(pend_hi_ - pend_lo_) * sizeof(float) >= s_.bucket_bytes) flush_bucket();
  // Open MPI progresses non-blocking collectives only inside MPI calls: poke it.
  if (!requests_.empty()) {
    int done = 0;
    MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &done, MPI_STATUSES_IGNORE);
  }
}

void Trainer::finish_grad_reduce() {
  flush_bucket();
  if (reduce_active_ && covered_ != N_) {
    // The model did not report every range (or none): reduce what was not covered in one go.
    if (covered_ != 0) {
      throw RuntimeError(strprintf("model reported gradients for %zu of %zu parameters", covered_, N_));
    }
    pend_lo_ = 0;
    pend_hi_ = N_;
    flush_bucket();
  }
  if (nccl_) nccl_->wait();
  if (!requests_.empty()) {
    mpi::check(MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
  }
  // Each bucket on the trace's "comm" row, from launch to the end of the wait (an upper bound).
  double done = now_s();
  const char* what = shard_ > 0 ? "reduce-scatter bucket" : "all-reduce bucket";
  for (const auto& [t0, n] : bucket_starts_) trace_event(what, "comm", t0, done, {{"floats", n}}, 1);
  bucket_starts_.clear();
  requests_.clear();
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
    trace_event("data", "phase", t0, t1, {{"micro", k}, {"batch", mb.batch}});
    phase_begin("forward");
    last_fwd_time_ = t1;
    loss_sum += model_->forward(mb.inputs.data(), mb.targets.data(), mb.B, mb.T);
    backend_->synchronize();  // phase times mean something on asynchronous (device) backends too
    phase_end();
    double t2 = now_s();
    tm.forward += t2 - t1;
    trace_event("forward", "phase", t1, t2, {{"micro", k}});
    bool last = k == s_.accum - 1;
    reduce_active_ = last && s_.world > 1;
    covered_ = 0;
    last_cb_time_ = t2;
    phase_begin("backward");
    if (last && fault == Fault::NanGrad && s_.rank == 0) {
      // Poison rank 0's gradient before communication: every rank must then see a non-finite norm.
      model_->backward([this](size_t f, size_t c) {
        if (f == 0 && c > 0) poison_first_grad();
        start_grad_reduce(f, c);
      });
      if (covered_ == 0) poison_first_grad();
    } else {
      model_->backward([this](size_t f, size_t c) { start_grad_reduce(f, c); });
    }
    backend_->synchronize();
    phase_end();
    double t3 = now_s();
    tm.backward += t3 - t2;
    trace_event("backward", "phase", t2, t3, {{"micro", k}});
  }
  double t4 = now_s();
  phase_begin("comm (exposed)");
  if (s_.world > 1) finish_grad_reduce();
  phase_end();
  reduce_active_ = false;
  double t5 = now_s();
  tm.comm += t5 - t4;
  trace_event("comm (exposed)", "phase", t4, t5);

  // Loss over the global batch; gradient norm of the averaged gradient.
  double sums[2] = {loss_sum, 0.0};
  double scale = 1.0 / (static_cast<double>(s_.accum) * s_.world);
  if (shard_ > 0) {
    sums[1] = backend_->squared_norm(shard_grads_.data(), hi_ - lo_);
  } else {
    sums[1] = s_.rank == 0 || s_.world == 1 ? backend_->squared_norm(model_->grads(), N_) : 0.0;
  }
  if (s_.world > 1) mpi::allreduce_inplace(sums, 2);
  loss = static_cast<float>(sums[0] * scale);
  norm_sq = sums[1] * scale * scale;
  if (fault == Fault::NanLoss) loss = std::numeric_limits<float>::quiet_NaN();
  if (fault == Fault::LossSpike) loss *= 50.0f;
  tm.total = now_s() - step_t0;  // optimizer time is added by the caller
}

double Trainer::apply_update(double lr, double grad_scale) {
  kernels::AdamWParams hp;
  hp.lr = static_cast<float>(lr);
  hp.beta1 = static_cast<float>(s_.beta1);
  hp.beta2 = static_cast<float>(s_.beta2);
  hp.eps = static_cast<float>(s_.eps);
  hp.step = static_cast<long>(adam_step_);
  hp.grad_scale = static_cast<float>(grad_scale);
  float* p = model_->params();
  const float* g = shard_ > 0 ? shard_grads_.data() : model_->grads() + lo_;
  gpt::adamw_update_ranges(*backend_, decay_ranges_, lo_, p, g, m_.data(), v_.data(), hp,
                           static_cast<float>(s_.weight_decay));
  if (shard_ == 0) return 0.0;
  if (nccl_) backend_->synchronize();  // the AdamW kernels count as optimizer time, not as all-gather
  double t0 = now_s();
  if (nccl_) {
    nccl_->all_gather_shards(p, shard_, N_);  // after the AdamW kernels just queued
    nccl_->wait();
  } else {
    std::vector<int> counts(s_.world), displs(s_.world);
    for (int r = 0; r < s_.world; ++r) {
      size_t a = std::min(N_, shard_ * r), b = std::min(N_, shard_ * (r + 1));
      counts[r] = static_cast<int>(b - a);
      displs[r] = static_cast<int>(a);
    }
    mpi::check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, p, counts.data(), displs.data(), MPI_FLOAT,
                              MPI_COMM_WORLD),
               "MPI_Allgatherv");
  }
  trace_event("all-gather params", "comm", t0, now_s(), {{"floats", N_}}, 1);
  return now_s() - t0;
}

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
  if (hooks_.stop_after_step >= 0 && step_ == hooks_.stop_after_step) local = 1;
  return (s_.world > 1 ? mpi::allreduce(local, MPI_MAX) : local) != 0;
}

TrainResult Trainer::run() {
  setup();
  init_or_resume();

  // Observability sinks (rank 0), opened only now that the config and data are known good.
  if (s_.rank == 0) {
    const Provenance& prov = provenance();
    atomic_write(join_path(s_.train_dir, "config.toml"),
                 strprintf("# effective config of %s %s (git %s) on %s at %s\n# command line: %s\n",
                           prov.tool.c_str(), prov.version.c_str(), prov.git_sha.c_str(), prov.host.c_str(),
                           prov.time_utc.c_str(), prov.command_line.c_str()) +
                     cfg_.to_toml(true));
    jsonl_ = metrics::JsonlWriter(join_path(s_.train_dir, "metrics.jsonl"), step_);
    // Each start (and each resume) records who wrote the lines that follow; readers skip this kind.
    jsonl_.write({{"kind", "provenance"}, {"step", step_}, {"provenance", prov.to_json()}});
    if (s_.tensorboard) tb_ = std::make_unique<metrics::TfEventsWriter>(s_.train_dir);
  }
  trace_.name_process(s_.rank, strprintf("rank %d", s_.rank));
  trace_.name_thread(s_.rank, 0, "compute");
  trace_.name_thread(s_.rank, 1, "comm");

  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  struct sigaction old_term {}, old_usr1 {};
  sigaction(SIGTERM, &sa, &old_term);
  sigaction(SIGUSR1, &sa, &old_usr1);
  g_stop_signal = 0;

  mpi::barrier();
  trace_epoch_ = now_s();
  loader_->start(batch_);
  const int64_t tokens_per_step = s_.global_batch * s_.T;
  double run_t0 = now_s();
  int64_t first_step = step_;
  int exit_code = 0;

  while (step_ < s_.steps) {
    int64_t step = step_ + 1;  // the step being computed
    tracing_ = step - 1 >= trace_a_ && step - 1 < trace_b_;
    Fault fault = hooks_.fault ? hooks_.fault(step) : Fault::None;
    StepTimes tm;
    float loss = 0;
    double norm_sq = 0;
    train_step(tm, loss, norm_sq, fault);
    double t_opt = now_s();
    double norm = std::sqrt(norm_sq);
    double lr = learning_rate(step - 1, s_.steps, s_.warmup, s_.lr, s_.min_lr, s_.schedule);

    // Skip decision: non-finite, or a spike against the window of accepted steps.
    std::string skip_reason;
    if (!std::isfinite(loss) || !std::isfinite(norm)) {
      skip_reason = "non-finite loss or gradient";
    } else if (s_.spike_z > 0 && static_cast<int>(spikes_.loss.size()) >= s_.spike_min_steps) {
      double zl = SpikeWindow::zscore(spikes_.loss, loss), zn = SpikeWindow::zscore(spikes_.norm, norm);
      if (zl > s_.spike_z) skip_reason = strprintf("loss spike (z = %.1f)", zl);
      else if (zn > s_.spike_z) skip_reason = strprintf("gradient-norm spike (z = %.1f)", zn);
    }
    bool skipped = !skip_reason.empty();
    double gather_s = 0;
    if (!skipped) {
      double clip = s_.grad_clip > 0 && norm > s_.grad_clip ? s_.grad_clip / norm : 1.0;
      ++adam_step_;
      phase_begin("optimizer");
      gather_s = apply_update(lr, clip / (static_cast<double>(s_.accum) * s_.world));
      backend_->synchronize();
      phase_end();
      spikes_.push(loss, norm, static_cast<size_t>(s_.spike_window));
      consecutive_skips_ = 0;
    } else {
      ++skipped_total_;
      ++consecutive_skips_;
      if (s_.rank == 0) {  // every rank decided the same; one line is enough
        CAIRN_LOG_WARN("step %lld: update skipped: %s (loss %g, grad norm %g; %d in a row)",
                       static_cast<long long>(step), skip_reason.c_str(), static_cast<double>(loss), norm,
                       consecutive_skips_);
      }
    }
    backend_->synchronize();
    double t_end = now_s();
    tm.optimizer = t_end - t_opt - gather_s;  // the ZeRO-1 parameter all-gather counts as communication
    tm.comm += gather_s;
    tm.total += t_end - t_opt;
    trace_event("optimizer", "phase", t_opt, t_end, {{"skipped", skipped}});
    trace_event(strprintf("step %lld", static_cast<long long>(step)), "step", t_end - tm.total, t_end);

    step_ = step;
    batch_ += 1;
    tokens_ += tokens_per_step;
    result_.steps.push_back(step);
    result_.losses.push_back(loss);
    result_.skipped.push_back(skipped ? 1 : 0);

    // Metrics (rank 0 speaks for all; the time split is rank 0's).
    double tok_s = tokens_per_step / std::max(tm.total, 1e-9);
    double tflops = flops_per_token_ * tok_s / 1e12 / s_.world;
    double mfu = peak_tflops_ > 0 ? tflops / peak_tflops_ : 0;
    if (s_.rank == 0) {
      json line = {{"kind", "train"}, {"step", step}, {"tokens", tokens_}, {"loss", loss}, {"lr", lr},
                   {"grad_norm", norm}, {"tokens_per_s", tok_s}, {"mfu", mfu}, {"tflops", tflops},
                   {"skipped", skipped}, {"skipped_total", skipped_total_},
                   {"time_s", {{"data", tm.data}, {"forward", tm.forward}, {"backward", tm.backward},
                               {"comm", tm.comm}, {"optimizer", tm.optimizer}, {"total", tm.total}}},
                   {"wall_time", wall_clock()}};
      if (s_.recompute == gpt::Recompute::Full && peak_tflops_ > 0)
        line["hfu"] = hw_flops_per_token_ * tok_s / 1e12 / s_.world / peak_tflops_;
      std::string mem_note;
      if (s_.on_gpu) {
        // Rank 0's device memory: high-water of cairn's allocations (compare PyTorch's max_memory_allocated) and
        // what the device has in use now (CUDA context, cuBLAS and NCCL buffers included).
        const double gib = 1024.0 * 1024.0 * 1024.0;
        double peak = static_cast<double>(gpu::peak_allocated_bytes()) / gib;
        line["peak_mem_gib"] = peak;
        line["device_mem_gib"] = static_cast<double>(gpu::device_used_bytes()) / gib;
        mem_note = strprintf(" | mem %.2f GiB", peak);
      }
      if (!std::isfinite(loss)) line["loss"] = nullptr;
      if (!std::isfinite(norm)) line["grad_norm"] = nullptr;
      jsonl_.write(line);
      if (tb_) {
        tb_->add_scalars({{"train/loss", loss}, {"train/lr", static_cast<float>(lr)},
                          {"train/grad_norm", static_cast<float>(norm)}, {"train/tokens_per_s", static_cast<float>(tok_s)},
                          {"train/mfu", static_cast<float>(mfu)}, {"train/skipped_total", static_cast<float>(skipped_total_)},
                          {"time/data_s", static_cast<float>(tm.data)}, {"time/step_s", static_cast<float>(tm.total)}},
                         step, wall_clock());
      }
      if (step % s_.log_every == 0 || step == s_.steps) {
        double elapsed = now_s() - run_t0;
        double eta = elapsed / static_cast<double>(step - first_step) * static_cast<double>(s_.steps - step);
        CAIRN_LOG_INFO("step %lld/%lld | loss %.4f | lr %.2e | norm %.3f | %s tok/s | mfu %.1f%% | data %.0f ms%s | ETA %s%s",
                       static_cast<long long>(step), static_cast<long long>(s_.steps), static_cast<double>(loss), lr, norm,
                       format_rate(tok_s).c_str(), 100 * mfu, 1e3 * tm.data, mem_note.c_str(),
                       format_duration(eta).c_str(), skipped ? " | SKIPPED" : "");
      }
    }

    // Too many skips in a row: go back to the last checkpoint past the bad data, or stop.
    if (consecutive_skips_ > s_.max_skips) {
      if (!s_.restore_on_skips) {
        throw RuntimeError(strprintf("%d consecutive steps skipped (last at step %lld: %s); stopping as "
                                     "[train] on_too_many_skips = \"stop\"",
                                     consecutive_skips_, static_cast<long long>(step), skip_reason.c_str()));
      }
      if (restores_since_checkpoint_ >= 3) {
        throw RuntimeError(strprintf("%d consecutive steps skipped at step %lld after %d restores of \"%s\" without "
                                     "progress: the model itself diverges (lower [train] lr?)",
                                     consecutive_skips_, static_cast<long long>(step), restores_since_checkpoint_,
                                     last_ckpt_.c_str()));
      }
      if (last_ckpt_.empty()) {
        throw RuntimeError(strprintf("%d consecutive steps skipped at step %lld and no checkpoint to restore yet",
                                     consecutive_skips_, static_cast<long long>(step)));
      }
      int64_t resume_batch = batch_, skipped_total = skipped_total_;
      loader_->stop();
      load_checkpoint(last_ckpt_);
      batch_ = resume_batch;  // the data that caused the skips is not replayed
      skipped_total_ = skipped_total;  // skips stay counted across the restore
      consecutive_skips_ = 0;
      ++result_.restores;
      ++restores_since_checkpoint_;
      if (s_.rank == 0)
        CAIRN_LOG_WARN("restored \"%s\" (step %lld); data continues at batch %lld", last_ckpt_.c_str(),
                     static_cast<long long>(step_), static_cast<long long>(batch_));
      if (s_.rank == 0) jsonl_ = metrics::JsonlWriter(join_path(s_.train_dir, "metrics.jsonl"), step_);
      loader_->start(batch_);
      continue;
    }

    if (s_.val_every > 0 && (step % s_.val_every == 0 || step == s_.steps)) {
      double t0 = now_s();
      phase_begin("validation");
      double vl = validate();
      phase_end();
      trace_event("validation", "phase", t0, now_s());
      if (std::isfinite(vl)) {
        result_.val_losses.push_back(vl);
        if (s_.rank == 0) {
          // Which windows were scored, so cairn-eval can reproduce the figure exactly.
          jsonl_.write({{"kind", "val"}, {"step", step}, {"tokens", tokens_}, {"val_loss", vl},
                        {"val_first_window", widx_.train_windows()},
                        {"val_windows", static_cast<uint64_t>(val_micro_batches()) * s_.world * s_.micro},
                        {"seq_len", s_.T}, {"wall_time", wall_clock()}});
          if (tb_) tb_->add_scalar("val/loss", static_cast<float>(vl), step, wall_clock());
          CAIRN_LOG_INFO("step %lld | val loss %.4f", static_cast<long long>(step), vl);
        }
      }
    }
    if (tb_) tb_->flush();

    if (tracing_ && step == trace_b_) flush_trace();

    bool stop = stop_requested() && step < s_.steps;
    bool periodic = s_.checkpoint_every > 0 && step % s_.checkpoint_every == 0;
    if (stop || periodic || step == s_.steps) {
      loader_->stop();  // no HDF5 reads while writing
      write_checkpoint();
      if (!stop && step < s_.steps) loader_->start(batch_);
    }
    if (stop) {
      if (s_.rank == 0)
        CAIRN_LOG_WARN("stop requested (%s): checkpoint written at step %lld; exiting with %d so the job is requeued",
                     g_stop_signal == SIGUSR1 ? "SIGUSR1" : g_stop_signal == SIGTERM ? "SIGTERM" : "test hook",
                     static_cast<long long>(step_), kExitRequeue);
      exit_code = kExitRequeue;
      break;
    }
  }
  loader_->stop();
  if (trace_events_ > 0) flush_trace();
  if (step_ >= s_.steps && exit_code == 0) {
    if (last_ckpt_ != checkpoint::step_dir(s_.ckpt_dir, step_)) write_checkpoint();
    if (s_.rank == 0) {
      json fin = {{"step", step_}, {"tokens", tokens_}, {"skipped_total", skipped_total_},
                  {"checkpoint", checkpoint::step_dir(s_.ckpt_dir, step_)}, {"provenance", provenance().to_json()}};
      atomic_write(join_path(s_.train_dir, "FINISHED"), fin.dump(1) + "\n");
    }
  }
  mpi::barrier();  // FINISHED and the last checkpoint exist for every rank once run() returns
  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGUSR1, &old_usr1, nullptr);
  result_.exit_code = exit_code;
  result_.final_step = step_;
  if (s_.rank == 0) result_.params = to_host(*backend_, model_->params(), N_);
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
