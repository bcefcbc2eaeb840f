// cairn-train's per-step record (StepTimes, StepRecord) and where it goes: metrics.jsonl, TensorBoard, the
// progress line on stderr; plus the FLOP figures MFU is computed from.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cairn/config.h"
#include "cairn/gpt.h"
#include "cairn/kernels/backend.h"
#include "cairn/metrics.h"
#include "cairn/parallel.h"
#include "cairn/records.h"
#include "gpu.h"
#include "settings.h"

namespace cairn::train {

// Per-rank timing of one step, in seconds; metrics lines carry it as "time_s". Its phases are listed once, in
// cairn/records.h (CAIRN_STEP_TIME_FIELDS), with what each one counts.
using StepTimes = records::StepTimes;

// One optimizer step as rank 0 reports it (the time split is rank 0's).
struct StepRecord {
  int64_t step = 0, tokens = 0;
  float loss = 0;
  double lr = 0, grad_norm = 0;
  bool skipped = false;
  int64_t skipped_total = 0;
  StepTimes time;
  // Filled by StepReporter::write from time.total, the FLOP figures and the device.
  double tokens_per_s = 0, tflops = 0, mfu = 0;
  std::optional<double> hfu;                           // recompute = "full": with the rerun FLOPs counted
  std::optional<double> peak_mem_gib, device_mem_gib;  // GPU: rank 0's device memory
  double mem_gib = 0;  // the most any rank holds in cairn's buffers: parameters, gradients, optimizer, activations
  std::vector<records::StageTimes> stages;  // pp > 1: each pipeline stage's busiest rank (stage_times)

  records::MetricsLine line(double wall_time) const;  // a metrics.jsonl "train" line
};

// Each pipeline stage's split of the step as its busiest rank timed it (the most forward + backward of the stage's
// ranks), in stage order; collective over MPI_COMM_WORLD (every rank passes its own times), the result on rank 0
// only. Rank 0's split alone cannot show the pipeline: its waits are stage 0's, not the critical stage's bubble.
std::vector<records::StageTimes> stage_times(const StepTimes& mine, const parallel::Layout& layout, int rank);

// What MFU is computed from: model FLOPs per token (the cost model's, 3 x forward: Megatron's accounting, the figure
// cairn-plan predicts with), hardware FLOPs per token (plus what activation recomputation reruns) and the peak
// TFLOP/s of one rank ([train] peak_tflops, a known GPU's datasheet peak, or a measured GEMM; collective).
struct FlopCounts {
  double model_per_token = 0, hardware_per_token = 0, peak_tflops = 0;
};
FlopCounts flop_counts(const Settings& s, const gpt::GptConfig& g, const gpu::DeviceInfo& device,
                       const kernels::Backend& backend);

// Rank 0's observability sinks in <run>/train/: config.toml, metrics.jsonl, TensorBoard events, the progress line.
// Every call may be made on every rank; only rank 0 writes.
class StepReporter {
 public:
  StepReporter(const Settings& s, const FlopCounts& flops) : s_(s), flops_(flops) {}
  // Writes config.toml, opens metrics.jsonl (dropping lines after `step`, then a provenance line) and a new
  // TensorBoard event file (starting with a SessionLog START at step + 1).
  void open(const Config& cfg, int64_t step);
  // After a checkpoint restore: metrics.jsonl again without the lines after `step`, TensorBoard restarted at step + 1.
  void reopen(int64_t step);
  // Start of the timed steps (for the ETA of the progress line).
  void start_clock(int64_t first_step);
  // Fills the derived fields of r, then (rank 0) writes it everywhere.
  void write(StepRecord& r);
  // A validation result: val_loss = mean token loss over windows [first_window, +windows).
  void write_val(int64_t step, int64_t tokens, double val_loss, uint64_t first_window, uint64_t windows);
  void flush();
  // metrics.jsonl onto the disk (before a checkpoint is sealed: a crash after it must not lose the steps it covers).
  void sync();

 private:
  const Settings& s_;
  FlopCounts flops_;
  metrics::JsonlWriter jsonl_;
  std::unique_ptr<metrics::TfEventsWriter> tb_;
  double run_t0_ = 0;
  int64_t first_step_ = 0;
};

}  // namespace cairn::train
