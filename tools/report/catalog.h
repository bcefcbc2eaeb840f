// The metrics cairn-report computes per run (the names gates and the comparison table use).
#pragma once
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "rundata.h"

namespace cairn::report {

enum class Better { Lower, Higher, Neither };

struct MetricDef {
  std::string name;   // canonical name, e.g. "val_loss", "busbw_allreduce", "eval_hellaswag_acc"
  std::string unit;   // for display: "", "tok/s", "%", "s", "GB/s", "us", "GiB", "tok", "B"
  std::string group;  // "train", "eval", "sweep", "plan", "data"
  Better better = Better::Neither;
  std::string doc;
};

// A metric's value in one run: `value` is what gates compare; `best` is shown next to it (NaN = n/a).
struct MetricValue {
  double value = kNaN;
  double best = kNaN;
  // What the value averages, for gates to refuse comparing unlike sums: validation windows of cairn-train's
  // val_loss, examples of an eval row (n); NaN when unknown.
  double count = kNaN;
  const char* count_unit = "";  // "windows", "examples"
};

// How per-run numbers are reduced ([report] keys).
struct MetricSettings {
  double warmup_frac = 0.1;  // fraction of logged steps left out of throughput/time medians
  double smooth = 0.9;       // EMA weight for smoothed loss curves (0 = none)
};

// The fixed metrics, in the order the comparison table lists them.
const std::vector<MetricDef>& fixed_metrics();
// Known collectives and tiers of cairn-sweep (for busbw_<collective>[_<tier>] names).
const std::vector<std::string>& known_collectives();
const std::vector<std::string>& known_tiers();

// The definition of a metric name a gate may use, or nullopt when the name is unknown. Accepts the
// patterns busbw_<coll>[_<tier>], fit_busbw_<coll>[_<tier>], alpha_<coll>[_<tier>] and
// eval_<task>_<metric> (also written eval.<task>.<metric> or eval/<task>/<metric>).
std::optional<MetricDef> resolve_metric(const std::string& name);
// Names close to `name` for an error message ("" when none is close).
std::string suggest_metric(const std::string& name);
// Documentation of every metric name (for --help, --list-metrics and docs/report.md).
std::string metrics_help();
// The same as one JSON document (--list-metrics --json): the fixed metrics with group, unit and direction, the
// per-collective and per-task name patterns, the collectives and tiers they take, and the gate rules.
nlohmann::json metrics_catalog_json();

// Every metric available in `run`, by canonical name. Reads the run's columns: call it before drop_series (a run
// whose columns are dropped throws std::logic_error rather than lose its training metrics without a word).
std::map<std::string, MetricValue> compute_metrics(const RunData& run, const MetricSettings& settings);
// A pipelined run's stages (empty for runs without): each stage's medians after the warm-up (StageRow).
std::vector<StageRow> stage_rows(const RunData& run, const MetricSettings& settings);
// How column `y` (against `step`) ends.
SeriesEnd series_end(const std::vector<double>& step, const std::vector<double>& y);
// Empties the run's train and val columns, keeping in run.dropped what the tables, gates and summary.json read of
// them besides the metrics (stage_rows at `settings`' warm-up): for a run the charts do not draw.
void drop_series(RunData& run, const MetricSettings& settings);
// The largest finite mfu a run logged (NaN: none), from its columns or, once dropped, its digest.
double mfu_max(const RunData& run);
// Why `metric` is not available in `run` (e.g. "no train/metrics.jsonl").
std::string missing_reason(const RunData& run, const MetricDef& metric);

// --- analysis helpers shared with the charts ---

// EMA smoothing with TensorBoard's debiasing; NaNs are carried through, not smoothed over.
std::vector<double> ema_smooth(const std::vector<double>& y, double weight);
// Median of the finite values of y[from..]; NaN if none.
double median_from(const std::vector<double>& y, size_t from);
// First index after warm-up for a series of n records.
size_t warmup_index(size_t n, double warmup_frac);
// A fraction (MFU, stage imbalance) in percent.
double as_percent(double fraction);
// Lower-case and without '_' or '-' ("all_reduce" -> "allreduce").
std::string normalize_collective(const std::string& name);

// The plan the training run used: matched by [parallel] of the run's config.toml when possible,
// else the best plan. Null when there are no plans. `matched` says which case it was.
json plan_used_by_training(const RunData& run, bool* matched);

// Per-shard token counts and the document-length histogram from data/stats.json or index.json.
std::vector<double> data_tokens_per_shard(const RunData& run);
// A mixture dataset's description (stats.json "mixture", else index.json's), or nullptr.
const json* data_mixture(const RunData& run);
struct Histogram {
  std::vector<double> lo, hi, count;
};
Histogram data_doc_length_histogram(const RunData& run);

}  // namespace cairn::report
