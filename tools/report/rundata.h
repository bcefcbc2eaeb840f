// Tolerant readers of one run directory's outputs (train, eval, sweep, plan, data) for cairn-report.
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace cairn::report {

using json = nlohmann::json;
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Training records from train/metrics.jsonl, one entry per logged step (columns; NaN = absent).
struct TrainSeries {
  std::vector<double> step, tokens, loss, lr, grad_norm, tokens_per_s, mfu, tflops, wall_time;
  std::vector<double> skipped;        // per record: skipped this step (0/1)
  std::vector<double> skipped_total;  // running count as logged
  std::vector<double> t_data, t_forward, t_backward, t_comm, t_optimizer, t_total;  // time_s.*
  // Pipelined runs (the line's stages; NaN without): the critical stage's (most compute) pp_wait, and the busiest
  // stage's compute over the least busy one's, minus 1.
  std::vector<double> pipeline_wait, stage_imbalance;
  std::vector<double> critical_stage;  // the number of the stage with the most compute (records::critical_stage)
  // Per pipeline stage (outer index), per record: the stage's busiest rank's compute (forward + backward net of the
  // TP, CP and ZeRO collectives inside) and its pp_wait; NaN where a record lacks the stage.
  std::vector<std::vector<double>> stage_busy, stage_wait;
  size_t size() const { return step.size(); }
};

struct ValSeries {
  std::vector<double> step, tokens, val_loss;
  std::vector<double> val_windows;  // windows each value averages (NaN: not recorded)
  size_t size() const { return step.size(); }
};

struct EvalRecord {
  double step = kNaN, tokens = kNaN;
  std::string checkpoint, task, metric;
  double value = kNaN, stderr_value = kNaN;
  double n = kNaN;  // examples (windows, items) the value averages; NaN in rows that do not say
};

// A pipelined run's stage (the train lines' per-stage splits), medians after the warm-up: its compute (its busiest
// rank's forward + backward net of the collectives inside) and pipeline wait, and the share of steps on which it was
// the critical stage (the most compute).
struct StageRow {
  size_t stage = 0;
  double busy = kNaN, wait = kNaN, critical_pct = kNaN;
};

// How a per-step series ends, for the account of a last value that is not finite (missing_reason).
struct SeriesEnd {
  size_t records = 0;
  double last_step = kNaN;                   // the last record's step
  bool last_finite = false;                  // whether the last record's value is finite
  double finite = kNaN, finite_step = kNaN;  // the last finite value and its step (NaN: none)
};

// What the tables, gates and summary.json read of a run's per-step columns besides its metrics (computed before):
// kept when a run the charts do not draw drops its columns (drop_series), which take ~160 bytes per logged step.
struct SeriesDigest {
  size_t train_records = 0, val_records = 0;
  double last_step = kNaN;  // the last train record's step
  double mfu_max = kNaN;    // the largest finite mfu: the MFU chart reads fractions unless some run logged > 1.5
  SeriesEnd loss, val_loss;
  std::vector<StageRow> stages;  // stage_rows at the report's warm-up
};

// Everything cairn-report knows about one run directory. Pieces that are absent are listed in
// `missing` (the report renders the rest); unreadable records go to `problems` as "file:line: why".
struct RunData {
  std::string dir;
  std::string name;
  bool is_baseline = false;
  std::vector<std::string> present;   // stages found: "sweep", "plan", "data", "train", "eval"
  std::vector<std::string> missing;   // e.g. "train/metrics.jsonl"
  std::vector<std::string> problems;  // e.g. "runs/a/train/metrics.jsonl:17: invalid JSON (...)"
  size_t problem_count = 0;           // problems beyond those kept are counted here

  TrainSeries train;
  ValSeries val;
  // Set once train and val were emptied (drop_series, for a run the charts do not draw): what is left of them.
  std::optional<SeriesDigest> dropped;
  double mfu_peak_tflops = std::nan("");  // the peak the train lines' mfu divides by (the last start's), or NaN
  bool train_finished = false;
  std::vector<double> restarts;  // steps at which a requeued run restarted (earlier lines superseded)
  // git sha of the cairn-train of each start (metrics.jsonl's provenance lines), consecutive repeats merged: more
  // than one when the run was resumed by another build (an upgrade mid-run).
  std::vector<std::string> builds;

  std::vector<EvalRecord> eval;

  json sweep;           // sweep/sweep.json, or null
  json fabric;          // sweep/fabric.toml as JSON, or null
  json plans;           // plan/plans.json, or null
  json layout_predict;  // layout_predict.json (bench/layout_predict.sh: predicted vs measured per layout), or null
  json kernel_profile;  // train/kernel_profile.json (cairn-train --profile-kernels: per-op time per rank), or null
  json data_stats;      // data/stats.json, or null
  json data_index;      // data/index.json, or null
  std::string data_dir;
  json config;  // <run>/config.toml as JSON, or null

  bool has(const std::string& stage) const;
  void problem(const std::string& text);
  // Records read and the last train step (NaN: none), from the columns or, once they are dropped, the digest.
  size_t train_records() const { return dropped ? dropped->train_records : train.size(); }
  size_t val_records() const { return dropped ? dropped->val_records : val.size(); }
  double last_step() const { return dropped ? dropped->last_step : train.step.empty() ? kNaN : train.step.back(); }
};

// Reads whatever `dir` holds. Throws UsageError if `dir` is not a directory, or if sweep/sweep.json or
// plan/plans.json is malformed (invalid JSON, a wrong type or non-finite number in a key the report
// reads: the message names the file and key). Everything else (missing files, corrupt JSONL lines,
// other unreadable files) is recorded in the RunData and never throws. `bytes_read`, when given, is told the bytes
// of train/metrics.jsonl and eval/results.jsonl as they are parsed (read_runs' progress).
RunData read_run(const std::string& dir, const std::function<void(uint64_t)>& bytes_read = {});

// Reads several runs in parallel (threads), in order. after_read(i, run) is called in the reader thread once run i
// is read: cairn-report computes the run's metrics there and drops the columns of a run it does not draw, so that
// beside the drawn runs at most `threads` runs' columns are in memory (60 runs of 600,000 steps took 6.4 GB).
// Reading at least kProgressBytes of JSONL prints progress on stderr (cairn::Progress).
std::vector<RunData> read_runs(const std::vector<std::string>& dirs, int threads = 0,
                               const std::function<void(size_t, RunData&)>& after_read = {});
inline constexpr uint64_t kProgressBytes = uint64_t{256} << 20;

// Parses metrics.jsonl text (exposed for tests and benchmarks); `path` names it in problems.
void parse_metrics_jsonl(const std::string& text, const std::string& path, RunData& run);
// Parses eval/results.jsonl text.
void parse_eval_jsonl(const std::string& text, const std::string& path, RunData& run);

// Number at `key` of a JSON object, NaN when absent/null/not a number (bools count as 0/1).
double num_or_nan(const json& obj, const char* key);

// sweep/sweep.json comes in two layouts, both read:
//  - version 3 (cairn-sweep now): nccl-tests' -J document, with cairn's additions under "cairn" at
//    the top (fits, avg_busbw, wrong, runs, ...) and in each results[] entry (collective, tier,
//    ranks, oop, ip, nodes);
//  - the flat layout written before (version 2): the same cairn fields beside nccl-tests' keys.
// cairn's top-level fields: sweep["cairn"], or the document itself (flat layout); null when `sweep`
// is not an object.
const json* sweep_extras(const json& sweep);
// cairn's fits list (one entry per measured block), or null.
const json* sweep_fits(const json& sweep);

// One results[] entry, either layout. Measures are [0] out-of-place, [1] in-place; NaN = absent.
struct SweepRow {
  std::string collective;  // as written (not normalized)
  std::string tier = "world";
  std::string type, redop, root;  // nccl-tests' columns ("" when absent; root trimmed)
  double size = kNaN;
  double busbw[2] = {kNaN, kNaN}, algbw[2] = {kNaN, kNaN}, wrong[2] = {kNaN, kNaN};
};
// The results[] entries that name their collective (others, and non-objects, are skipped).
std::vector<SweepRow> sweep_rows(const json& sweep);
// cairn's average bus bandwidth and wrong-result count (nccl-tests' average_bus_bandwidth and
// out_of_bounds when cairn's are absent); NaN when neither is there.
double sweep_avg_busbw(const json& sweep);
double sweep_wrong(const json& sweep);

}  // namespace cairn::report
