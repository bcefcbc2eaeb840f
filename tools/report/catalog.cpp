// Metric catalog of cairn-report: names, units, directions, and how each is computed from a run.
#include "catalog.h"

#include <algorithm>
#include <cctype>
#include <sstream>
#include <stdexcept>

#include "cairn/config.h"
#include "cairn/plot.h"
#include "cairn/sections/report.h"

namespace cairn::report {
namespace {

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

Better eval_direction(const std::string& metric) {
  std::string m = metric;
  std::transform(m.begin(), m.end(), m.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const char* lower : {"loss", "ppl", "perplexity", "bpb", "bits", "error", "err", "nll", "wer", "cer"})
    if (m.find(lower) != std::string::npos) return Better::Lower;
  return Better::Higher;
}

// Splits "<collective>[_<tier>]" (collective may itself contain '_', e.g. reduce_scatter).
bool split_collective_tier(const std::string& rest, std::string* coll, std::string* tier) {
  *tier = "";
  *coll = rest;
  for (const auto& t : known_tiers()) {
    std::string suffix = "_" + t;
    if (rest.size() > suffix.size() && rest.compare(rest.size() - suffix.size(), suffix.size(), suffix) == 0) {
      *tier = t;
      *coll = rest.substr(0, rest.size() - suffix.size());
      break;
    }
  }
  std::string norm = normalize_collective(*coll);
  for (const auto& c : known_collectives())
    if (c == norm) {
      *coll = c;
      return true;
    }
  return false;
}

double last_finite(const std::vector<double>& y) {
  for (size_t i = y.size(); i-- > 0;)
    if (std::isfinite(y[i])) return y[i];
  return kNaN;
}
double first_finite(const std::vector<double>& y) {
  for (double v : y)
    if (std::isfinite(v)) return v;
  return kNaN;
}
double min_finite(const std::vector<double>& y, size_t from = 0) {
  double m = kNaN;
  for (size_t i = from; i < y.size(); ++i)
    if (std::isfinite(y[i]) && (std::isnan(m) || y[i] < m)) m = y[i];
  return m;
}
double max_finite(const std::vector<double>& y, size_t from = 0) {
  double m = kNaN;
  for (size_t i = from; i < y.size(); ++i)
    if (std::isfinite(y[i]) && (std::isnan(m) || y[i] > m)) m = y[i];
  return m;
}
// Mean of the last k finite values.
double tail_mean(const std::vector<double>& y, size_t k) {
  double s = 0;
  size_t n = 0;
  for (size_t i = y.size(); i-- > 0 && n < k;)
    if (std::isfinite(y[i])) {
      s += y[i];
      ++n;
    }
  return n ? s / static_cast<double>(n) : kNaN;
}

// The lowest mean of k consecutive finite values (all of them when there are fewer): the best the run did by the
// measure tail_mean gives its end, so a run's best is never worse than its final value.
double min_window_mean(const std::vector<double>& y, size_t k) {
  std::vector<double> f;
  for (double v : y)
    if (std::isfinite(v)) f.push_back(v);
  if (f.empty() || k == 0) return kNaN;
  if (f.size() <= k) return tail_mean(f, k);
  double s = 0;
  for (size_t i = 0; i < k; ++i) s += f[i];
  double best = s;
  for (size_t i = k; i < f.size(); ++i) {
    s += f[i] - f[i - k];
    best = std::min(best, s);
  }
  // The sliding sum drifts by rounding: the last window is the final value exactly, so take it as computed there.
  return std::min(best / static_cast<double>(k), tail_mean(f, k));
}

const json* object_at(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it != j.end() && it->is_object() ? &*it : nullptr;
}

// First numeric value among several possible key names.
double first_num(const json& j, std::initializer_list<const char*> keys) {
  if (!j.is_object()) return kNaN;
  for (const char* k : keys) {
    double v = num_or_nan(j, k);
    if (!std::isnan(v)) return v;
  }
  return kNaN;
}

void set(std::map<std::string, MetricValue>& m, const std::string& name, double value, double best = kNaN) {
  if (std::isnan(value)) return;
  m[name] = {value, best};
}

// The count a gate checks before comparing name with a baseline (MetricValue::count).
void set_count(std::map<std::string, MetricValue>& m, const std::string& name, double count, const char* unit) {
  auto it = m.find(name);
  if (it == m.end() || !std::isfinite(count)) return;
  it->second.count = count;
  it->second.count_unit = unit;
}

}  // namespace

const std::vector<std::string>& known_collectives() {
  static const std::vector<std::string> k{"allreduce", "allgather", "reducescatter", "alltoall",
                                          "broadcast", "reduce",    "sendrecv"};
  return k;
}
const std::vector<std::string>& known_tiers() {
  static const std::vector<std::string> k{"world", "intra", "inter"};
  return k;
}

std::string normalize_collective(const std::string& name) {
  std::string out;
  for (char c : name)
    if (c != '_' && c != '-') out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

const std::vector<MetricDef>& fixed_metrics() {
  static const std::vector<MetricDef> k{
      {"loss", "", "train", Better::Lower,
       "final training loss: mean of the last 5% of logged steps (1..50 records); best: the lowest such mean over "
       "the run"},
      {"val_loss", "", "train", Better::Lower, "last validation loss"},
      {"best_val_loss", "", "train", Better::Lower, "lowest validation loss"},
      {"tokens_per_s", "tok/s", "train", Better::Higher, "median training throughput after warm-up"},
      {"mfu", "%", "train", Better::Higher, "median model FLOPs utilisation after warm-up"},
      {"tflops", "TFLOP/s", "train", Better::Higher, "median achieved TFLOP/s per GPU after warm-up"},
      {"mfu_peak_tflops", "TFLOP/s", "train", Better::Neither,
       "peak TFLOP/s per device that mfu divides by ([train] peak_tflops, a GPU's datasheet, or on a CPU the GEMM "
       "peak measured at the run's last start: compare two runs' mfu only where these agree)"},
      {"step_time_s", "s", "train", Better::Lower, "median step time (time_s.total) after warm-up"},
      {"data_wait_s", "s", "train", Better::Lower, "median time waiting for data per step after warm-up"},
      {"comm_s", "s", "train", Better::Lower, "median exposed communication time per step after warm-up"},
      {"pipeline_wait_s", "s", "train", Better::Lower,
       "pipelined runs: median pipeline wait per step of the critical stage (the most compute) after warm-up: the "
       "bubble and transfers"},
      {"stage_imbalance", "%", "train", Better::Lower,
       "pipelined runs: median of the busiest stage's compute over the least busy one's, minus 1, after warm-up"},
      {"grad_norm", "", "train", Better::Neither, "median gradient norm after warm-up"},
      {"skipped_total", "", "train", Better::Lower, "optimizer steps skipped (non-finite or clipped-out gradients)"},
      {"steps", "", "train", Better::Neither, "last logged training step"},
      {"tokens", "tok", "train", Better::Neither, "tokens trained at the last logged step"},
      {"train_time_s", "s", "train", Better::Lower, "wall time between the first and last logged step"},
      {"avg_busbw", "GB/s", "sweep", Better::Higher,
       "sweep.json avg_busbw (mean of the blocks' average bus bandwidth)"},
      {"wrong", "", "sweep", Better::Lower, "wrong results found by the sweep's correctness checks"},
      {"plan_step_time_s", "s", "plan", Better::Lower, "best plan's predicted step time"},
      {"plan_tokens_per_s", "tok/s", "plan", Better::Higher, "best plan's predicted throughput"},
      {"plan_mfu", "%", "plan", Better::Higher, "best plan's predicted MFU"},
      {"plan_memory_gib", "GiB", "plan", Better::Lower, "best plan's predicted memory per GPU"},
      {"plan_error_pct", "%", "plan", Better::Lower,
       "|measured - predicted| / predicted step time of the plan the training used, in %"},
      {"data_tokens", "tok", "data", Better::Neither, "tokens in the dataset"},
      {"data_shards", "", "data", Better::Neither, "shards in the dataset"},
      {"data_documents", "", "data", Better::Neither, "documents in the dataset"},
      {"data_bytes_per_token", "B", "data", Better::Neither, "text bytes per token (tokenizer compression)"},
      {"data_shard_imbalance", "%", "data", Better::Lower, "(largest shard - mean) / mean tokens per shard"},
      {"data_mix_deviation", "%", "data", Better::Lower,
       "mixtures: worst |realised - requested| share of a source over the largest windows stats.json measures, in "
       "points"},
      {"data_mix_max_epochs", "", "data", Better::Neither, "mixtures: epochs of the most repeated source"},
  };
  return k;
}

std::optional<MetricDef> resolve_metric(const std::string& raw) {
  for (const auto& d : fixed_metrics())
    if (d.name == raw) return d;
  std::string name = raw;
  // eval.<task>.<metric> and eval/<task>/<metric> are spellings of eval_<task>_<metric>.
  if (starts_with(name, "eval.") || starts_with(name, "eval/")) {
    char sep = name[4];
    auto p = name.find(sep, 5);
    if (p == std::string::npos || p == 5 || p + 1 >= name.size()) return std::nullopt;
    name = "eval_" + name.substr(5, p - 5) + "_" + name.substr(p + 1);
    std::string metric = raw.substr(p + 1);
    return MetricDef{name, "", "eval", eval_direction(metric), "evaluation result"};
  }
  if (starts_with(name, "eval_")) {
    if (name.size() < 8 || name.find('_', 5) == std::string::npos) return std::nullopt;
    std::string metric = name.substr(name.rfind('_') + 1);
    return MetricDef{name, "", "eval", eval_direction(metric), "evaluation result"};
  }
  struct Pattern {
    const char* prefix;
    const char* unit;
    Better better;
    const char* doc;
  };
  static const Pattern patterns[] = {
      {"fit_busbw_", "GB/s", Better::Higher, "fitted bus bandwidth (beta)"},
      {"busbw_", "GB/s", Better::Higher, "peak measured bus bandwidth over message sizes"},
      {"alpha_", "us", Better::Lower, "fitted latency (alpha)"},
  };
  for (const auto& p : patterns) {
    if (!starts_with(name, p.prefix)) continue;
    std::string coll, tier;
    if (!split_collective_tier(name.substr(std::string(p.prefix).size()), &coll, &tier)) return std::nullopt;
    std::string canonical = std::string(p.prefix) + coll + (tier.empty() ? "" : "_" + tier);
    return MetricDef{canonical, p.unit, "sweep", p.better, p.doc};
  }
  return std::nullopt;
}

std::string suggest_metric(const std::string& name) {
  std::vector<std::string> names;
  for (const auto& d : fixed_metrics()) names.push_back(d.name);
  for (const auto& c : known_collectives()) {
    names.push_back("busbw_" + c);
    names.push_back("alpha_" + c);
    names.push_back("fit_busbw_" + c);
  }
  std::string best;
  size_t best_d = 4;
  for (const auto& n : names) {
    size_t d = edit_distance(name, n);
    if (d < best_d) {
      best_d = d;
      best = n;
    }
  }
  return best;
}

namespace {
// The sweep's per-collective metric names, as patterns (--list-metrics, its JSON form).
const std::vector<MetricDef>& sweep_metric_patterns() {
  static const std::vector<MetricDef> defs = {
      {"busbw_<coll>[_<tier>]", "GB/s", "sweep", Better::Higher, "peak measured bus bandwidth over message sizes"},
      {"fit_busbw_<coll>[_<tier>]", "GB/s", "sweep", Better::Higher, "fitted bus bandwidth beta"},
      {"alpha_<coll>[_<tier>]", "us", "sweep", Better::Lower, "fitted latency alpha"},
  };
  return defs;
}

// "    name<pad to width> doc [unit] (lower is better)", one line of --list-metrics.
void help_line(std::ostream& os, const MetricDef& d, size_t width) {
  os << "    " << d.name << ' ';
  for (size_t i = d.name.size() + 1; i < width; ++i) os << ' ';
  os << d.doc << (d.unit.empty() ? "" : " [" + d.unit + "]")
     << (d.better == Better::Lower    ? " (lower is better)"
         : d.better == Better::Higher ? " (higher is better)"
                                      : "")
     << "\n";
}
}  // namespace

nlohmann::json metrics_catalog_json() {
  using nlohmann::json;
  auto better = [](Better b) { return b == Better::Lower ? "lower" : b == Better::Higher ? "higher" : "neither"; };
  json fixed = json::array();
  for (const auto& d : fixed_metrics())
    fixed.push_back(
        {{"name", d.name}, {"group", d.group}, {"doc", d.doc}, {"unit", d.unit}, {"better", better(d.better)}});
  json patterns = json::array();
  for (const auto& d : sweep_metric_patterns())
    patterns.push_back({{"pattern", d.name}, {"doc", d.doc}, {"unit", d.unit}, {"better", better(d.better)}});
  patterns.push_back(
      {{"pattern", "eval_<task>_<metric>"},
       {"doc", "eval/results.jsonl's value at the last evaluated step; lower is better for loss/ppl/perplexity/bpb/"
               "error, else higher"},
       {"unit", ""},
       {"better", "by name"}});
  return {{"metrics", fixed},
          {"patterns", patterns},
          {"collectives", known_collectives()},
          {"tiers", known_tiers()},
          {"rules", report_gate_rule_kinds()}};
}

std::string metrics_help() {
  std::ostringstream os;
  os << "Metric names for [report.gates] and the comparison table:\n";
  std::string group;
  for (const auto& d : fixed_metrics()) {
    if (d.group != group) {
      group = d.group;
      os << "  " << group << ":\n";
    }
    help_line(os, d, 22);
  }
  os << "  sweep, per collective (";
  for (size_t i = 0; i < known_collectives().size(); ++i) os << (i ? ", " : "") << known_collectives()[i];
  os << ")\n  and optionally per tier (_world, _intra, _inter; default: world, else the best tier):\n";
  for (const auto& d : sweep_metric_patterns()) help_line(os, d, 24);
  os << "  eval, per task and metric of eval/results.jsonl (value at the last evaluated step):\n";
  os << "    eval_<task>_<metric>    e.g. eval_hellaswag_acc, eval_lambada_ppl; lower is better for metrics\n";
  os << "                            named like loss/ppl/perplexity/bpb/error, else higher\n";
  os << "Gate rules (one or more per metric): max_increase, max_increase_pct, max_drop, max_drop_pct\n"
        "(against --baseline), max, min (absolute), e.g. val_loss = { max_increase = 0.02 }.\n";
  return os.str();
}

std::vector<double> ema_smooth(const std::vector<double>& y, double weight) {
  std::vector<double> out(y.size(), kNaN);
  if (weight <= 0) return y;
  double acc = 0, norm = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    if (!std::isfinite(y[i])) continue;
    acc = acc * weight + (1 - weight) * y[i];
    norm = norm * weight + (1 - weight);
    out[i] = acc / norm;
  }
  return out;
}

double median_from(const std::vector<double>& y, size_t from) {
  std::vector<double> v;
  v.reserve(y.size() > from ? y.size() - from : 0);
  for (size_t i = from; i < y.size(); ++i)
    if (std::isfinite(y[i])) v.push_back(y[i]);
  if (v.empty()) return kNaN;
  size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<long>(mid), v.end());
  double m = v[mid];
  if (v.size() % 2 == 0) {
    double lo = *std::max_element(v.begin(), v.begin() + static_cast<long>(mid));
    m = (m + lo) / 2;
  }
  return m;
}

size_t warmup_index(size_t n, double warmup_frac) {
  if (n < 3) return 0;
  size_t w = static_cast<size_t>(static_cast<double>(n) * std::clamp(warmup_frac, 0.0, 0.9));
  return std::max<size_t>(1, w);
}

// Every producer (cairn-train's metrics, cairn-plan's plans) writes these as fractions; a guess by magnitude would
// turn a 160 % stage imbalance into "1.6 %" and pass the gate that should fail.
double as_percent(double fraction) { return std::isfinite(fraction) ? fraction * 100 : fraction; }

json plan_used_by_training(const RunData& run, bool* matched) {
  *matched = false;
  const json* plans = nullptr;
  if (run.plans.is_object() && run.plans.contains("plans") && run.plans["plans"].is_array() &&
      !run.plans["plans"].empty())
    plans = &run.plans["plans"];
  if (!plans) return nullptr;
  const json* par = object_at(run.config, "parallel");
  if (par) {
    for (const auto& p : *plans) {
      if (!p.is_object()) continue;
      bool all_equal = true;
      int compared = 0;
      for (const char* k : {"dp", "tp", "pp", "v", "mb", "zero", "recompute", "sp"}) {
        auto a = par->find(k);
        auto b = p.find(k);
        if (a == par->end() || b == p.end() || a->is_array() || a->is_null()) continue;
        // dp = 0 and mb = 0 in a trainer's config mean "derived": nothing to compare.
        if ((std::string_view(k) == "dp" || std::string_view(k) == "mb") && a->is_number() && *a == 0) continue;
        ++compared;
        if (*a != *b) all_equal = false;
      }
      if (compared > 0 && all_equal) {
        *matched = true;
        return p;
      }
    }
  }
  return (*plans)[0];
}

const json* data_mixture(const RunData& run) {
  for (const json* src : {&run.data_stats, &run.data_index}) {
    if (!src->is_object()) continue;
    auto it = src->find("mixture");
    if (it != src->end() && it->is_object() && it->contains("sources") && (*it)["sources"].is_array()) return &*it;
  }
  return nullptr;
}

std::vector<double> data_tokens_per_shard(const RunData& run) {
  std::vector<double> out;
  auto from_array = [&](const json& arr) {
    for (const auto& e : arr) {
      if (e.is_number()) out.push_back(e.get<double>());
      else if (e.is_object()) out.push_back(first_num(e, {"tokens", "num_tokens", "n_tokens"}));
    }
  };
  for (const json* src : {&run.data_stats, &run.data_index}) {
    if (!src->is_object()) continue;
    for (const char* key : {"tokens_per_shard", "shard_tokens", "shards"}) {
      auto it = src->find(key);
      if (it != src->end() && it->is_array() && !it->empty()) {
        from_array(*it);
        bool any = std::any_of(out.begin(), out.end(), [](double v) { return std::isfinite(v); });
        if (any) return out;
        out.clear();
      }
    }
  }
  return out;
}

Histogram data_doc_length_histogram(const RunData& run) {
  Histogram h;
  if (!run.data_stats.is_object()) return h;
  const json* hist = nullptr;
  for (const char* key : {"doc_length_histogram", "document_length_histogram", "doc_len_histogram", "doc_length_hist",
                          "length_histogram"}) {
    auto it = run.data_stats.find(key);
    if (it != run.data_stats.end() && (it->is_object() || it->is_array())) {
      hist = &*it;
      break;
    }
  }
  if (!hist) return h;
  if (hist->is_object()) {
    const json* edges = nullptr;
    const json* counts = nullptr;
    for (const char* k : {"edges", "bin_edges", "bins"})
      if (hist->contains(k) && (*hist)[k].is_array()) edges = &(*hist)[k];
    for (const char* k : {"counts", "count", "values"})
      if (hist->contains(k) && (*hist)[k].is_array()) counts = &(*hist)[k];
    if (!edges || !counts) return h;
    size_t n = counts->size();
    bool edges_are_bounds = edges->size() == n + 1;
    for (size_t i = 0; i < n; ++i) {
      if (!(*counts)[i].is_number()) continue;
      double lo = i < edges->size() && (*edges)[i].is_number() ? (*edges)[i].get<double>() : kNaN;
      double hi = edges_are_bounds && (*edges)[i + 1].is_number()        ? (*edges)[i + 1].get<double>()
                  : i + 1 < edges->size() && (*edges)[i + 1].is_number() ? (*edges)[i + 1].get<double>()
                                                                         : kNaN;
      h.lo.push_back(lo);
      h.hi.push_back(hi);
      h.count.push_back((*counts)[i].get<double>());
    }
  } else {
    for (const auto& b : *hist) {
      if (b.is_array() && b.size() >= 3 && b[0].is_number() && b[1].is_number() && b[2].is_number()) {
        h.lo.push_back(b[0].get<double>());
        h.hi.push_back(b[1].get<double>());
        h.count.push_back(b[2].get<double>());
      } else if (b.is_object()) {
        double c = first_num(b, {"count", "n", "docs"});
        if (std::isnan(c)) continue;
        h.lo.push_back(first_num(b, {"lo", "min", "from", "start"}));
        h.hi.push_back(first_num(b, {"hi", "max", "to", "end"}));
        h.count.push_back(c);
      }
    }
  }
  return h;
}

namespace {

using Metrics = std::map<std::string, MetricValue>;

// Optimizer steps skipped: the logged running total, else the number of records logged with skipped > 0.
double skipped_steps(const TrainSeries& t) {
  double skipped = last_finite(t.skipped_total);
  if (std::isnan(skipped)) {
    double s = 0;
    bool any = false;
    for (double v : t.skipped)
      if (std::isfinite(v)) {
        s += v > 0 ? 1 : 0;
        any = true;
      }
    if (any) skipped = s;
  }
  return skipped;
}

// Training: final loss (tail mean), medians after the warm-up, the last step's counters; then validation.
void train_metrics(Metrics& m, const RunData& run, const MetricSettings& st) {
  const TrainSeries& t = run.train;
  if (t.size() > 0) {
    size_t n = t.size();
    size_t w = warmup_index(n, st.warmup_frac);
    size_t k = std::clamp<size_t>(n / 20, 1, 50);
    // A run whose last loss is not finite diverged: its final loss is unknown, and the tail mean of the finite ones
    // before would pass a gate the run failed. Left unset, the gate fails with missing_reason's account. Best: the
    // lowest mean over k consecutive steps, the final value's own measure (the EMA-smoothed curve's minimum lagged
    // the raw tail of a short run, so "best" read worse than "final").
    if (std::isfinite(t.loss.back())) set(m, "loss", tail_mean(t.loss, k), min_window_mean(t.loss, k));
    set(m, "tokens_per_s", median_from(t.tokens_per_s, w), max_finite(t.tokens_per_s, w));
    set(m, "mfu", as_percent(median_from(t.mfu, w)), as_percent(max_finite(t.mfu, w)));
    set(m, "tflops", median_from(t.tflops, w), max_finite(t.tflops, w));
    set(m, "mfu_peak_tflops", run.mfu_peak_tflops);
    set(m, "step_time_s", median_from(t.t_total, w), min_finite(t.t_total, w));
    set(m, "data_wait_s", median_from(t.t_data, w));
    set(m, "comm_s", median_from(t.t_comm, w));
    set(m, "pipeline_wait_s", median_from(t.pipeline_wait, w));
    set(m, "stage_imbalance", as_percent(median_from(t.stage_imbalance, w)));
    set(m, "grad_norm", median_from(t.grad_norm, w));
    set(m, "skipped_total", skipped_steps(t));
    set(m, "steps", t.step.back());
    set(m, "tokens", last_finite(t.tokens));
    double w0 = first_finite(t.wall_time), w1 = last_finite(t.wall_time);
    if (std::isfinite(w0) && std::isfinite(w1) && w1 >= w0) set(m, "train_time_s", w1 - w0);
  }
  if (run.val.size() > 0) {
    if (std::isfinite(run.val.val_loss.back()))
      set(m, "val_loss", run.val.val_loss.back(), min_finite(run.val.val_loss));
    set(m, "best_val_loss", min_finite(run.val.val_loss));
    // Another val_batches, or a cairn-train that counted the windows otherwise, gives another sum.
    const double windows = run.val.val_windows.empty() ? kNaN : run.val.val_windows.back();
    for (const char* name : {"val_loss", "best_val_loss"}) set_count(m, name, windows, "windows");
  }
}

// Eval: value at the last evaluated step per (task, metric); best over steps.
void eval_metrics(Metrics& m, const RunData& run) {
  std::map<std::string, std::pair<double, MetricValue>> ev;  // name -> (step, value)
  for (const auto& r : run.eval) {
    std::string name = "eval_" + r.task + "_" + r.metric;
    Better b = eval_direction(r.metric);
    auto it = ev.find(name);
    if (it == ev.end()) {
      MetricValue mv{r.value, r.value};
      mv.count = r.n;
      mv.count_unit = "examples";
      ev[name] = {r.step, mv};
      continue;
    }
    auto& [step, mv] = it->second;
    if (!(r.step < step)) {
      step = r.step;
      mv.value = r.value;
      mv.count = r.n;
    }
    mv.best = b == Better::Lower ? std::min(mv.best, r.value) : std::max(mv.best, r.value);
  }
  for (const auto& [name, sv] : ev) m[name] = sv.second;
}

// Fitted alpha and beta per collective and tier, and per collective (world tier, else the first).
void sweep_fit_metrics(Metrics& m, const json& fit_list) {
  // Several fits per collective and tier (-d/-o all, -r -1): the one in fabric.toml
  // ("in_fabric", the model cairn-plan reads), else the first.
  struct Chosen {
    double alpha, beta;
    bool in_fabric;
  };
  std::map<std::string, std::map<std::string, Chosen>> fits;
  for (const auto& f : fit_list) {
    if (!f.is_object() || !f.contains("collective") || !f["collective"].is_string()) continue;
    std::string coll = normalize_collective(f["collective"].get<std::string>());
    std::string tier = f.contains("tier") && f["tier"].is_string() ? f["tier"].get<std::string>() : "world";
    bool in_fabric = f.contains("in_fabric") && f["in_fabric"].is_boolean() && f["in_fabric"].get<bool>();
    Chosen c{num_or_nan(f, "alpha_us"), num_or_nan(f, "busbw_gbps"), in_fabric};
    auto [it, fresh] = fits[coll].try_emplace(tier, c);
    if (!fresh && in_fabric && !it->second.in_fabric) it->second = c;
  }
  for (const auto& [coll, tiers] : fits) {
    for (const auto& [tier, c] : tiers) {
      set(m, "alpha_" + coll + "_" + tier, c.alpha);
      set(m, "fit_busbw_" + coll + "_" + tier, c.beta);
    }
    auto w = tiers.find("world");
    const Chosen& chosen = w != tiers.end() ? w->second : tiers.begin()->second;
    set(m, "alpha_" + coll, chosen.alpha);
    set(m, "fit_busbw_" + coll, chosen.beta);
  }
}

// Sweep (either sweep.json layout; see sweep_rows): peak bus bandwidth per collective and tier, the fits,
// the average bandwidth and the wrong results.
void sweep_metrics(Metrics& m, const RunData& run) {
  if (!run.sweep.is_object()) return;
  std::map<std::string, std::map<std::string, double>> per_coll;  // coll -> tier -> peak busbw
  double wrong_sum = 0;
  bool wrong_any = false;
  for (const SweepRow& r : sweep_rows(run.sweep)) {
    std::string coll = normalize_collective(r.collective);
    double bw = kNaN;
    for (int side = 0; side < 2; ++side) {
      double b = r.busbw[side];
      if (std::isfinite(b) && (std::isnan(bw) || b > bw)) bw = b;
      if (std::isfinite(r.wrong[side])) {
        wrong_sum += r.wrong[side];
        wrong_any = true;
      }
    }
    if (std::isnan(bw)) continue;
    double& cur = per_coll[coll][r.tier];
    if (cur == 0 || bw > cur) cur = bw;
  }
  for (const auto& [coll, tiers] : per_coll) {
    double overall = kNaN;
    for (const auto& [tier, bw] : tiers) {
      set(m, "busbw_" + coll + "_" + tier, bw, bw);
      if (std::isnan(overall) || bw > overall) overall = bw;
    }
    auto w = tiers.find("world");
    set(m, "busbw_" + coll, w != tiers.end() ? w->second : overall);
  }
  if (const json* fit_list = sweep_fits(run.sweep)) sweep_fit_metrics(m, *fit_list);
  set(m, "avg_busbw", sweep_avg_busbw(run.sweep));
  double wrong = sweep_wrong(run.sweep);
  if (std::isnan(wrong) && wrong_any) wrong = wrong_sum;
  set(m, "wrong", wrong);
}

// Plan: the best plan's predictions, and the error of the used plan's step time against the measured one
// (so after train_metrics, which sets step_time_s).
void plan_metrics(Metrics& m, const RunData& run) {
  if (!(run.plans.is_object() && run.plans.contains("plans") && run.plans["plans"].is_array() &&
        !run.plans["plans"].empty() && run.plans["plans"][0].is_object()))
    return;
  const json& best = run.plans["plans"][0];
  set(m, "plan_step_time_s", num_or_nan(best, "step_time_s"));
  set(m, "plan_tokens_per_s", num_or_nan(best, "tokens_per_s"));
  set(m, "plan_mfu", as_percent(num_or_nan(best, "mfu")));
  set(m, "plan_memory_gib", num_or_nan(best, "memory_gib"));
  auto measured = m.find("step_time_s");
  bool matched = false;
  json used = plan_used_by_training(run, &matched);
  if (measured != m.end() && used.is_object()) {
    double pred = num_or_nan(used, "step_time_s");
    if (std::isfinite(pred) && pred > 0)
      set(m, "plan_error_pct", std::fabs(measured->second.value - pred) / pred * 100);
  }
}

// A mixture (cairn-reshard mix): the worst deviation over its largest measured windows and the most
// repeated source's epochs.
void mixture_metrics(Metrics& m, const RunData& run) {
  const json* mix = data_mixture(run);
  if (!mix) return;
  double epochs = kNaN;
  for (const auto& s : (*mix)["sources"])
    if (s.is_object() && s.contains("epochs") && s["epochs"].is_number())
      epochs = std::isnan(epochs) ? s["epochs"].get<double>() : std::max(epochs, s["epochs"].get<double>());
  set(m, "data_mix_max_epochs", epochs);
  double widest = -1, dev = kNaN;
  for (const auto& w : mix->value("windows", json::array())) {
    if (!w.is_object() || !w.contains("worst_deviation") || !w["worst_deviation"].is_number()) continue;
    double t = w.value("tokens", 0.0);
    if (t > widest) widest = t, dev = w["worst_deviation"].get<double>() * 100;
  }
  set(m, "data_mix_deviation", dev);
}

// Data: from stats.json, else index.json, else summed over the shards.
void data_metrics(Metrics& m, const RunData& run) {
  std::vector<double> per_shard = data_tokens_per_shard(run);
  double total = first_num(run.data_stats, {"total_tokens", "tokens", "num_tokens"});
  if (std::isnan(total)) total = first_num(run.data_index, {"total_tokens", "tokens", "num_tokens"});
  if (std::isnan(total) && !per_shard.empty()) {
    total = 0;
    for (double v : per_shard)
      if (std::isfinite(v)) total += v;
  }
  set(m, "data_tokens", total);
  double shards = first_num(run.data_stats, {"shards", "num_shards"});
  if (std::isnan(shards)) shards = first_num(run.data_index, {"num_shards"});
  if (std::isnan(shards) && !per_shard.empty()) shards = static_cast<double>(per_shard.size());
  set(m, "data_shards", shards);
  double docs = first_num(run.data_stats, {"documents", "num_documents", "total_documents", "docs"});
  if (std::isnan(docs)) docs = first_num(run.data_index, {"total_documents", "documents", "num_documents", "docs"});
  set(m, "data_documents", docs);
  set(m, "data_bytes_per_token", first_num(run.data_stats, {"bytes_per_token"}));
  set(m, "data_shard_imbalance", first_num(run.data_stats, {"shard_imbalance"}) * 100);
  mixture_metrics(m, run);
}

}  // namespace

std::map<std::string, MetricValue> compute_metrics(const RunData& run, const MetricSettings& st) {
  if (run.dropped) throw std::logic_error("compute_metrics: the columns of run \"" + run.name + "\" were dropped");
  std::map<std::string, MetricValue> m;
  train_metrics(m, run, st);
  eval_metrics(m, run);
  sweep_metrics(m, run);
  plan_metrics(m, run);
  data_metrics(m, run);
  return m;
}

std::vector<StageRow> stage_rows(const RunData& r, const MetricSettings& st) {
  if (r.dropped) return r.dropped->stages;
  const TrainSeries& t = r.train;
  std::vector<StageRow> rows;
  if (t.stage_busy.empty()) return rows;
  const size_t w = warmup_index(t.size(), st.warmup_frac);
  std::vector<double> critical(t.stage_busy.size(), 0);
  double steps = 0;
  for (size_t i = w; i < t.size(); ++i) {
    const double c = t.critical_stage[i];
    if (c >= 0 && c < double(critical.size())) critical[size_t(c)] += 1, steps += 1;
  }
  for (size_t k = 0; k < t.stage_busy.size(); ++k)
    rows.push_back({k, median_from(t.stage_busy[k], w), median_from(t.stage_wait[k], w),
                    steps > 0 ? 100 * critical[k] / steps : kNaN});
  return rows;
}

SeriesEnd series_end(const std::vector<double>& step, const std::vector<double>& y) {
  SeriesEnd e;
  e.records = y.size();
  if (y.empty()) return e;
  e.last_step = step.back();
  e.last_finite = std::isfinite(y.back());
  for (size_t i = y.size(); i-- > 0;)
    if (std::isfinite(y[i])) {
      e.finite = y[i];
      e.finite_step = step[i];
      break;
    }
  return e;
}

double mfu_max(const RunData& run) { return run.dropped ? run.dropped->mfu_max : max_finite(run.train.mfu); }

void drop_series(RunData& run, const MetricSettings& st) {
  if (run.dropped) return;
  SeriesDigest d;
  d.train_records = run.train.size();
  d.val_records = run.val.size();
  d.last_step = run.last_step();
  d.mfu_max = mfu_max(run);
  d.loss = series_end(run.train.step, run.train.loss);
  d.val_loss = series_end(run.val.step, run.val.val_loss);
  d.stages = stage_rows(run, st);
  run.dropped = std::move(d);
  run.train = TrainSeries{};  // assigned, not cleared: clear() keeps the capacity
  run.val = ValSeries{};
}

namespace {

// Why a series whose last value is not finite (null: cairn-train writes a NaN or infinite loss so) has no final
// value; empty when its last value is finite or it has none at all.
std::string nonfinite_last_reason(const std::string& run, const std::string& name, const SeriesEnd& e) {
  if (e.records == 0 || e.last_finite) return "";
  std::string at = plot::format_value(e.last_step, "", 10);
  if (std::isnan(e.finite)) return "run \"" + run + "\": " + name + " is not finite at any step (last step " + at + ")";
  return "run \"" + run + "\": " + name + " is not finite at its last step " + at + " (last finite value " +
         plot::format_value(e.finite, "", 6) + " at step " + plot::format_value(e.finite_step, "", 10) +
         "): the run diverged";
}

}  // namespace

std::string missing_reason(const RunData& run, const MetricDef& d) {
  auto stage_reason = [&](const std::string& stage, const std::string& file) -> std::string {
    if (!run.has(stage)) return "run \"" + run.name + "\" has no " + stage + "/ stage";
    for (const auto& miss : run.missing)
      if (miss.find(file) != std::string::npos) return "run \"" + run.name + "\": " + miss + " is missing or empty";
    return "";
  };
  if (d.group == "train") {
    std::string r = stage_reason("train", "metrics.jsonl");
    if (!r.empty()) return r;
    if (d.name == "loss" || d.name == "val_loss") {
      const bool loss = d.name == "loss";
      const SeriesEnd end = run.dropped ? (loss ? run.dropped->loss : run.dropped->val_loss)
                            : loss      ? series_end(run.train.step, run.train.loss)
                                        : series_end(run.val.step, run.val.val_loss);
      r = nonfinite_last_reason(run.name, d.name, end);
      if (!r.empty()) return r;
    }
    if (d.name == "val_loss" || d.name == "best_val_loss")
      return "run \"" + run.name + "\": no validation records in train/metrics.jsonl";
    return "run \"" + run.name + "\": train/metrics.jsonl has no values for " + d.name;
  }
  if (d.group == "eval") {
    std::string r = stage_reason("eval", "results.jsonl");
    if (!r.empty()) return r;
    // eval_<task>_<metric> names are open-ended, so a misspelt one is only found here: name the closest the run has.
    std::vector<std::string> have;
    for (const auto& e : run.eval) {
      std::string n = "eval_";
      n.append(e.task).append("_").append(e.metric);
      if (std::find(have.begin(), have.end(), n) == have.end()) have.push_back(n);
    }
    const std::string hint = closest_match(d.name, have);
    return "run \"" + run.name + "\": no eval/results.jsonl records for " + d.name +
           (hint.empty() ? std::string() : " (did you mean " + hint + "?)");
  }
  if (d.group == "sweep") {
    std::string r = stage_reason("sweep", "sweep.json");
    if (!r.empty()) return r;
    return "run \"" + run.name + "\": sweep.json has no results for " + d.name;
  }
  if (d.group == "plan") {
    std::string r = stage_reason("plan", "plans.json");
    if (!r.empty()) return r;
    if (d.name == "plan_error_pct") return "run \"" + run.name + "\": needs both plans.json and training step times";
    return "run \"" + run.name + "\": plans.json has no value for " + d.name;
  }
  if (d.group == "data") {
    if (!run.has("data")) return "run \"" + run.name + "\" has no data/ stage";
    return "run \"" + run.name + "\": data/stats.json has no value for " + d.name;
  }
  return "not available";
}

}  // namespace cairn::report
