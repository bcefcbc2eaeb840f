// Tolerant readers of one run directory's outputs (train, eval, sweep, plan, data) for cairn-report.
#pragma once
#include <cmath>
#include <limits>
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
};

// Reads whatever `dir` holds. Throws UsageError if `dir` is not a directory, or if sweep/sweep.json or
// plan/plans.json is malformed (invalid JSON, a wrong type or non-finite number in a key the report
// reads: the message names the file and key). Everything else (missing files, corrupt JSONL lines,
// other unreadable files) is recorded in the RunData and never throws.
RunData read_run(const std::string& dir);

// Reads several runs in parallel (threads), in order.
std::vector<RunData> read_runs(const std::vector<std::string>& dirs, int threads = 0);

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
