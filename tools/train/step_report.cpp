// cairn-train's per-step record and its sinks (step_report.h): metrics.jsonl, TensorBoard, the progress line, MFU.
#include "step_report.h"

#include <algorithm>
#include <cmath>

#include "cairn/costmodel.h"
#include "cairn/files.h"
#include "cairn/log.h"
#include "cairn/mpi.h"
#include "cairn/provenance.h"
#include "step_trace.h"

using nlohmann::json;

namespace cairn::train {

namespace {

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const long t = std::lround(s);
  if (t >= 3600) return strprintf("%ldh%02ldm", t / 3600, (t / 60) % 60);
  if (t >= 60) return strprintf("%ldm%02lds", t / 60, t % 60);
  return strprintf("%lds", t);
}

std::string format_rate(double r) {
  if (r >= 1e6) return strprintf("%.2fM", r / 1e6);
  if (r >= 1e3) return strprintf("%.1fk", r / 1e3);
  return strprintf("%.0f", r);
}

// The measured peak of this rank's GEMM on a square problem (large enough on a GPU to hide launch latency), as the
// mean over ranks so MFU is the same number on every rank.
double measure_peak_tflops(const Settings& s, const kernels::Backend& backend) {
  const int n = s.on_gpu ? 4096 : 512;
  float* a = static_cast<float*>(backend.alloc(sizeof(float) * n * n));
  float* b = static_cast<float*>(backend.alloc(sizeof(float) * n * n));
  float* c = static_cast<float*>(backend.alloc(sizeof(float) * n * n));
  backend.matmul_forward(c, a, b, nullptr, n, n, n, kernels::WeightLayout::InOut);
  double best = 0;
  for (int rep = 0; rep < 8; ++rep) {  // best of several: other processes may share the core
    double t0 = monotonic_seconds();
    backend.matmul_forward(c, a, b, nullptr, n, n, n, kernels::WeightLayout::InOut);
    backend.synchronize();
    double dt = monotonic_seconds() - t0;
    if (dt > 0) best = std::max(best, 2.0 * n * n * n / dt / 1e12);
  }
  backend.free(a);
  backend.free(b);
  backend.free(c);
  return mpi::allreduce(best) / s.world;
}

}  // namespace

records::MetricsLine StepRecord::line(double wall_time) const {
  records::MetricsLine m;
  m.kind = "train";
  m.step = step;
  m.tokens = tokens;
  m.loss = loss;  // a non-finite loss or norm is written as null
  m.lr = lr;
  m.grad_norm = grad_norm;
  m.tokens_per_s = tokens_per_s;
  m.mfu = mfu;
  m.tflops = tflops;
  m.skipped = skipped;
  m.skipped_total = skipped_total;
  m.time_s = time;
  m.wall_time = wall_time;
  m.hfu = hfu;
  if (mem_gib > 0) m.mem_gib = mem_gib;
  m.peak_mem_gib = peak_mem_gib;
  m.device_mem_gib = device_mem_gib;
  m.stages = stages;
  return m;
}

std::vector<records::StageTimes> stage_times(const StepTimes& mine, const parallel::Layout& layout, int rank) {
  // Every phase of every rank to rank 0, in CAIRN_STEP_TIME_FIELDS order.
  std::vector<double> own;
#define CAIRN_TRAIN_PUT_PHASE(name) own.push_back(mine.name);
  CAIRN_STEP_TIME_FIELDS(CAIRN_TRAIN_PUT_PHASE)
#undef CAIRN_TRAIN_PUT_PHASE
  const size_t n = own.size();
  std::vector<double> all(rank == 0 ? n * static_cast<size_t>(layout.world) : 0);
  mpi::check(MPI_Gather(own.data(), static_cast<int>(n), MPI_DOUBLE, all.data(), static_cast<int>(n), MPI_DOUBLE, 0,
                        MPI_COMM_WORLD),
             "MPI_Gather (stage times)");
  std::vector<records::StageTimes> stages;
  if (rank != 0) return stages;
  std::vector<double> busiest(static_cast<size_t>(layout.pp), -1);
  stages.resize(static_cast<size_t>(layout.pp));
  for (int r = 0; r < layout.world; ++r) {
    const size_t s = static_cast<size_t>(parallel::coords_of(layout, r).pp);
    const double* t = &all[static_cast<size_t>(r) * n];
    // Whole microseconds: a deep pipeline writes pp entries per line, and a timer's last digits are noise (a
    // double's shortest form, 0.042026129998703254, is three times the text of 0.042026).
    StepTimes raw, times;
    size_t i = 0;
#define CAIRN_TRAIN_GET_PHASE(name) \
  raw.name = t[i++];                \
  times.name = std::round(raw.name * 1e6) / 1e6;
    CAIRN_STEP_TIME_FIELDS(CAIRN_TRAIN_GET_PHASE)
#undef CAIRN_TRAIN_GET_PHASE
    const double busy = raw.forward + raw.backward;  // the busiest rank by the unrounded figures
    if (busy > busiest[s]) {
      busiest[s] = busy;
      stages[s] = {static_cast<int64_t>(s), r, times};
    }
  }
  return stages;
}

FlopCounts flop_counts(const Settings& s, const gpt::GptConfig& g, const gpu::DeviceInfo& device,
                       const kernels::Backend& backend) {
  FlopCounts f;
  costmodel::ModelSpec spec;
  spec.layers = g.layers;
  spec.hidden = g.hidden;
  spec.heads = spec.kv_heads = g.heads;
  spec.ffn_hidden = 4 * static_cast<int64_t>(g.hidden);
  spec.seq_len = g.seq_len;
  spec.vocab = g.vocab;
  f.model_per_token = costmodel::model_flops_per_token(spec);
  // MFU counts model FLOPs only (as cairn-plan and Megatron report it); recomputation's extra forward work
  // goes into hardware FLOPs ("hfu" in metrics lines), from the model's own count of what it reruns.
  f.hardware_per_token = f.model_per_token + gpt::recompute_flops_per_token(g, s.recompute);
  if (s.peak_tflops > 0) {
    f.peak_tflops = s.peak_tflops;
  } else {
    // A GPU's datasheet peak (fp32, or bf16 tensor cores with precision = "bf16") when it is a known one; else, as
    // on a CPU, the measured peak of this rank's GEMM.
    double datasheet = s.bf16 ? device.peak_tflops_bf16 : device.peak_tflops_fp32;
    f.peak_tflops = s.on_gpu && datasheet > 0 ? mpi::allreduce(datasheet) / s.world : measure_peak_tflops(s, backend);
  }
  return f;
}

void StepReporter::open(const Config& cfg, int64_t step) {
  if (s_.rank != 0) return;
  const Provenance& prov = provenance();
  atomic_write(join_path(s_.train_dir, "config.toml"),
               strprintf("# effective config of %s %s (git %s) on %s at %s\n# command line: %s\n", prov.tool.c_str(),
                         prov.version.c_str(), prov.git_sha.c_str(), prov.host.c_str(), prov.time_utc.c_str(),
                         prov.command_line.c_str()) +
                   cfg.to_toml(true));
  jsonl_ = metrics::JsonlWriter(join_path(s_.train_dir, "metrics.jsonl"), step);
  // Each start (and each resume) records who wrote the lines that follow; readers skip this kind.
  records::MetricsLine line;
  line.kind = "provenance";
  line.step = step;
  line.provenance = prov.to_json();
  // The denominator of the lines' mfu: on a CPU a GEMM measured at each start, so two runs' MFU compare only with it.
  if (flops_.peak_tflops > 0) line.peak_tflops = flops_.peak_tflops;
  jsonl_.write(line.to_json());
  if (s_.tensorboard) {
    // A new event file, opened by a START at the first step this run computes: TensorBoard drops what earlier files
    // hold from that step on (a killed run's steps past its checkpoint, an abandoned line after a rollback), as
    // metrics.jsonl drops its lines.
    tb_ = std::make_unique<metrics::TfEventsWriter>(s_.train_dir);
    tb_->add_session_start(step + 1, unix_seconds(),
                           strprintf("cairn-train starts after step %lld", static_cast<long long>(step)));
    // Who wrote these scalars, in TensorBoard's Text tab (Markdown: the command and config as code blocks).
    auto indented = [](const std::string& text) {
      std::string out = "    ";
      for (char c : text) out += c == '\n' ? std::string("\n    ") : std::string(1, c);
      return out;
    };
    tb_->add_text("provenance",
                  strprintf("**%s** %s (git %s) on %s at %s\n\n", prov.tool.c_str(), prov.version.c_str(),
                            prov.git_sha.c_str(), prov.host.c_str(), prov.time_utc.c_str()) +
                      indented(prov.command_line) +
                      (flops_.peak_tflops > 0
                           ? strprintf("\n\nMFU divides by a peak of %.6g TFLOP/s per rank.", flops_.peak_tflops)
                           : std::string()) +
                      "\n\nEffective config:\n\n" + indented(prov.config_toml),
                  step + 1, unix_seconds());
    tb_->flush();
  }
}

void StepReporter::reopen(int64_t step) {
  if (s_.rank != 0) return;
  jsonl_ = metrics::JsonlWriter(join_path(s_.train_dir, "metrics.jsonl"), step);
  if (tb_) {
    tb_->add_session_start(step + 1, unix_seconds(),
                           strprintf("restored the checkpoint of step %lld", static_cast<long long>(step)));
    tb_->flush();
  }
}

void StepReporter::start_clock(int64_t first_step) {
  run_t0_ = monotonic_seconds();
  first_step_ = first_step;
}

void StepReporter::write(StepRecord& r) {
  const int64_t tokens_per_step = s_.global_batch * s_.T;
  r.tokens_per_s = tokens_per_step / std::max(r.time.total, 1e-9);
  r.tflops = flops_.model_per_token * r.tokens_per_s / 1e12 / s_.world;
  r.mfu = flops_.peak_tflops > 0 ? r.tflops / flops_.peak_tflops : 0;
  if (s_.rank != 0) return;
  if (s_.recompute == gpt::Recompute::Full && flops_.peak_tflops > 0)
    r.hfu = flops_.hardware_per_token * r.tokens_per_s / 1e12 / s_.world / flops_.peak_tflops;
  std::string mem_note;
  if (s_.on_gpu) {
    // Rank 0's device memory: high-water of cairn's allocations (compare PyTorch's max_memory_allocated) and
    // what the device has in use now (CUDA context, cuBLAS and NCCL buffers included).
    const double gib = 1024.0 * 1024.0 * 1024.0;
    r.peak_mem_gib = static_cast<double>(gpu::peak_allocated_bytes()) / gib;
    r.device_mem_gib = static_cast<double>(gpu::device_used_bytes()) / gib;
    mem_note = strprintf(" | mem %.2f GiB", *r.peak_mem_gib);
  }
  jsonl_.write(r.line(unix_seconds()).to_json());
  if (tb_) {
    tb_->add_scalars({{"train/loss", r.loss},
                      {"train/lr", static_cast<float>(r.lr)},
                      {"train/grad_norm", static_cast<float>(r.grad_norm)},
                      {"train/tokens_per_s", static_cast<float>(r.tokens_per_s)},
                      {"train/mfu", static_cast<float>(r.mfu)},
                      {"train/skipped_total", static_cast<float>(r.skipped_total)},
                      {"time/data_s", static_cast<float>(r.time.data)},
                      {"time/step_s", static_cast<float>(r.time.total)},
                      {"time/forward_s", static_cast<float>(r.time.forward)},
                      {"time/backward_s", static_cast<float>(r.time.backward)},
                      {"time/dp_comm_s", static_cast<float>(r.time.comm)},
                      {"time/tp_comm_s", static_cast<float>(r.time.tp_comm)},
                      {"time/cp_comm_s", static_cast<float>(r.time.cp_comm)},
                      {"time/zero_comm_s", static_cast<float>(r.time.zero_comm)},
                      {"time/pp_wait_s", static_cast<float>(r.time.pp_wait)},
                      {"time/optimizer_s", static_cast<float>(r.time.optimizer)},
                      {"memory/max_rank_gib", static_cast<float>(r.mem_gib)}},
                     r.step, unix_seconds());
    // Pipelines: each stage's busy time (its busiest rank's forward + backward) and that rank's waits for its
    // neighbours, so an unbalanced split or a slow stage shows.
    for (const records::StageTimes& st : r.stages) {
      const long long k = static_cast<long long>(st.stage);
      tb_->add_scalars({{strprintf("time/stage%lld_busy_s", k), static_cast<float>(st.time.forward + st.time.backward)},
                        {strprintf("time/stage%lld_pp_wait_s", k), static_cast<float>(st.time.pp_wait)}},
                       r.step, unix_seconds());
    }
  }
  if (r.step % s_.log_every == 0 || r.step == s_.steps) {
    double elapsed = monotonic_seconds() - run_t0_;
    double eta = elapsed / static_cast<double>(r.step - first_step_) * static_cast<double>(s_.steps - r.step);
    CAIRN_LOG_INFO(
        "step %lld/%lld | loss %.4f | lr %.2e | norm %.3f | %s tok/s | mfu %.1f%% | data %.0f ms%s | ETA %s%s",
        static_cast<long long>(r.step), static_cast<long long>(s_.steps), static_cast<double>(r.loss), r.lr,
        r.grad_norm, format_rate(r.tokens_per_s).c_str(), 100 * r.mfu, 1e3 * r.time.data, mem_note.c_str(),
        format_duration(eta).c_str(), r.skipped ? " | SKIPPED" : "");
  }
}

void StepReporter::write_val(int64_t step, int64_t tokens, double val_loss, uint64_t first_window, uint64_t windows) {
  if (s_.rank != 0) return;
  // Which windows were scored, so cairn-eval can reproduce the figure exactly.
  records::MetricsLine line;
  line.kind = "val";
  line.step = step;
  line.tokens = tokens;
  line.val_loss = val_loss;
  line.val_first_window = static_cast<int64_t>(first_window);
  line.val_windows = static_cast<int64_t>(windows);
  line.seq_len = s_.T;
  line.wall_time = unix_seconds();
  jsonl_.write(line.to_json());
  if (tb_) tb_->add_scalar("val/loss", static_cast<float>(val_loss), step, unix_seconds());
  CAIRN_LOG_INFO("step %lld | val loss %.4f", static_cast<long long>(step), val_loss);
}

void StepReporter::flush() {
  if (tb_) tb_->flush();
}

void StepReporter::sync() {
  jsonl_.sync();
  if (tb_) tb_->flush();
}

}  // namespace cairn::train
