// Builds cairn-report's charts from the runs' data with libcommon's SVG plotting module.
#include "charts.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <utility>

#include "cairn/plot.h"

namespace cairn::report {
namespace {

using plot::Axis;
using plot::Chart;
using plot::Scale;
using plot::Series;
using plot::Style;

bool any_finite(const std::vector<double>& v) {
  return std::any_of(v.begin(), v.end(), [](double x) { return std::isfinite(x); });
}

// Equal element by element, NaN equal to NaN (an open-ended histogram bucket has no upper bound).
bool same_values(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) return false;
  return true;
}

std::string slug(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::isalnum(static_cast<unsigned char>(c)))
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    else if (!out.empty() && out.back() != '-') out += '-';
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.empty() ? "x" : out;
}

struct Builder {
  const std::vector<RunData>& runs;
  int baseline;
  const std::vector<std::map<std::string, MetricValue>>& metrics;
  const ChartSettings& st;
  std::vector<ChartOut> out;
  std::set<std::string> ids;
  // The runs the charts overlay, and what a chart's subtitle says when others were left out.
  std::vector<size_t> drawn = drawn_runs(runs.size(), baseline, st.chart_runs);
  std::string left_out = drawn.size() < runs.size() ? left_out_note() : "";

  std::string left_out_note() const {
    size_t others = drawn.size() - (baseline >= 0 ? 1 : 0);
    return (baseline >= 0 ? "baseline + last " : "last ") + std::to_string(others) + " of " +
           std::to_string(runs.size()) + " runs";
  }
  // A subtitle with the left-out note (charts that overlay runs).
  std::string overlaid(const std::string& subtitle) const {
    if (left_out.empty()) return subtitle;
    return subtitle.empty() ? left_out : subtitle + "; " + left_out;
  }

  std::string unique_id(const std::string& base) {
    std::string id = base;
    for (int k = 2; ids.count(id); ++k) id = base + "-" + std::to_string(k);
    ids.insert(id);
    return id;
  }

  Chart chart(const std::string& id, const std::string& title) {
    Chart c;
    c.id = unique_id(id);
    c.title = title;
    c.width = st.width;
    c.height = st.height;
    c.max_points_per_series = st.max_points;
    return c;
  }

  void add(const std::string& section, const Chart& c) {
    ChartOut o;
    o.section = section;
    o.id = c.id;
    o.title = c.title;
    o.svg = plot::render_svg(c);
    o.points = svg_points(o.svg);
    for (const auto& s : c.series) o.series.push_back(s.name);
    out.push_back(std::move(o));
  }
  void add(const std::string& section, const plot::BarChart& c) {
    ChartOut o;
    o.section = section;
    o.id = c.id;
    o.title = c.title;
    o.svg = plot::render_svg(c);
    o.points = svg_points(o.svg);
    for (const auto& g : c.groups) o.series.push_back(g.name);
    out.push_back(std::move(o));
  }

  std::string color(size_t i) const { return run_color(runs, baseline, i, st.chart_runs); }

  std::vector<size_t> runs_with_train() const {
    std::vector<size_t> r;
    for (size_t i : drawn)
      if (runs[i].train.size() > 0 || runs[i].val.size() > 0) r.push_back(i);
    return r;
  }

  // A series of column `y` against column `x` of run i.
  Series line(size_t i, const std::vector<double>& x, const std::vector<double>& y, const std::string& suffix = "") {
    Series s;
    s.name = run_label(runs[i]) + suffix;
    s.x = x;
    s.y = y;
    s.color = color(i);
    return s;
  }

  void loss_chart(bool vs_tokens) {
    std::vector<size_t> tr = runs_with_train();
    Chart c = chart(vs_tokens ? "train-loss-tokens" : "train-loss-step", vs_tokens ? "Loss vs tokens" : "Loss vs step");
    c.x = Axis{vs_tokens ? "tokens" : "step", vs_tokens ? "tok" : "", Scale::Linear, {}, {}, false};
    c.y = Axis{"loss", "", Scale::Log, {}, {}, false};
    bool raw = tr.size() <= 4;
    c.subtitle = st.smooth > 0 ? std::string("solid: train, EMA ") + plot::format_value(st.smooth, "", 3) +
                                     (raw ? " (raw faint)" : "") + "; dashed: validation"
                               : "solid: train; dashed: validation";
    c.subtitle = overlaid(c.subtitle);
    // The first steps' loss (~ln V) would squeeze the rest of the curve into a few pixels: the top
    // of the axis is the highest raw loss after the first 10% of steps, so late spikes still show.
    double top = 0;
    for (size_t i : tr) {
      const auto& t = runs[i].train;
      for (size_t k = t.size() / 10; k < t.size(); ++k)
        if (std::isfinite(t.loss[k])) top = std::max(top, t.loss[k]);
      const auto& v = runs[i].val;
      for (size_t k = v.size() / 10; k < v.size(); ++k)
        if (std::isfinite(v.val_loss[k])) top = std::max(top, v.val_loss[k]);
    }
    if (top > 0) {
      c.y.max = top * 1.08;
      c.subtitle += "; first steps clipped";
    }
    bool any = false;
    for (size_t i : tr) {
      const auto& t = runs[i].train;
      const std::vector<double>& x = vs_tokens ? t.tokens : t.step;
      if (t.size() > 0 && any_finite(x) && any_finite(t.loss)) {
        if (raw && st.smooth > 0) {
          Series r = line(i, x, t.loss, " raw");
          r.opacity = 0.28;
          r.width = 1;
          r.in_legend = false;
          c.series.push_back(std::move(r));
        }
        c.series.push_back(line(i, x, ema_smooth(t.loss, st.smooth)));
        any = true;
      }
      const auto& v = runs[i].val;
      const std::vector<double>& vx = vs_tokens ? v.tokens : v.step;
      if (v.size() > 0 && any_finite(vx)) {
        Series s = line(i, vx, v.val_loss, " val");
        s.style = Style::LinePoints;
        s.dashed = true;
        // One legend entry per run: the train curve's; the subtitle explains the dashes. A run
        // with validation records only still gets its entry.
        s.in_legend = !(t.size() > 0 && any_finite(x) && any_finite(t.loss));
        s.width = 1.2;
        c.series.push_back(std::move(s));
        any = true;
      }
    }
    if (any) add("train", c);
  }

  void simple_train_chart(const std::string& id, const std::string& title, const std::string& subtitle,
                          std::vector<double> TrainSeries::*col, Axis y, double scale = 1.0) {
    Chart c = chart(id, title);
    c.subtitle = overlaid(subtitle);
    c.x = Axis{"step", "", Scale::Linear, {}, {}, false};
    c.y = std::move(y);
    for (size_t i : runs_with_train()) {
      const auto& t = runs[i].train;
      const auto& ys = t.*col;
      if (!any_finite(ys)) continue;
      Series s = line(i, t.step, ys);
      if (scale != 1.0)
        for (double& v : s.y) v *= scale;
      c.series.push_back(std::move(s));
    }
    if (!c.series.empty()) add("train", c);
  }

  void grad_norm_chart() {
    Chart c = chart("train-grad-norm", "Gradient norm");
    c.subtitle = overlaid("raw (spikes kept); triangles: skipped steps");
    c.x = Axis{"step", "", Scale::Linear, {}, {}, false};
    c.y = Axis{"gradient norm", "", Scale::Log, {}, {}, false};
    for (size_t i : runs_with_train()) {
      const auto& t = runs[i].train;
      if (any_finite(t.grad_norm)) c.series.push_back(line(i, t.step, t.grad_norm));
      plot::Markers m;
      m.name = c.markers.empty() ? "skipped step (run colour)" : "";
      m.color = color(i);
      double prev_total = 0;
      for (size_t k = 0; k < t.size(); ++k) {
        bool skipped = std::isfinite(t.skipped[k]) && t.skipped[k] > 0;
        if (!skipped && std::isnan(t.skipped[k]) && std::isfinite(t.skipped_total[k])) {
          skipped = t.skipped_total[k] > prev_total;
        }
        if (std::isfinite(t.skipped_total[k])) prev_total = t.skipped_total[k];
        if (skipped) m.x.push_back(t.step[k]);
      }
      if (!m.x.empty()) c.markers.push_back(std::move(m));
    }
    if (!c.series.empty() || !c.markers.empty()) add("train", c);
  }

  struct Phase {
    const char* name;
    std::vector<double> TrainSeries::*col;
    const char* color;
  };
  static const std::vector<Phase>& phases() {
    static const std::vector<Phase> p{{"data wait", &TrainSeries::t_data, "#8c564b"},
                                      {"forward", &TrainSeries::t_forward, "#1f77b4"},
                                      {"backward", &TrainSeries::t_backward, "#ff7f0e"},
                                      {"exposed comm", &TrainSeries::t_comm, "#d62728"},
                                      {"optimizer", &TrainSeries::t_optimizer, "#2ca02c"}};
    return p;
  }

  void step_time_charts() {
    std::vector<size_t> with_time;
    for (size_t i : runs_with_train()) {
      const auto& t = runs[i].train;
      bool any = any_finite(t.t_total);
      for (const auto& p : phases()) any |= any_finite(t.*(p.col));
      if (any) with_time.push_back(i);
    }
    // A stacked area over steps for up to three runs; beyond that the per-run bars tell more.
    size_t shown = 0;
    for (size_t i : with_time) {
      if (shown == 3) break;
      ++shown;
      const auto& t = runs[i].train;
      Chart c = chart("train-step-time-" + slug(runs[i].name), "Step time breakdown: " + run_label(runs[i]));
      c.subtitle = "stacked per step (bucket means when downsampled)";
      c.x = Axis{"step", "", Scale::Linear, {}, {}, false};
      c.y = Axis{"time per step", "s", Scale::Linear, {}, {}, true};
      plot::Stack stk;
      stk.x = t.step;
      std::vector<double> other(t.size(), 0.0);
      bool has_other = false;
      for (const auto& p : phases()) {
        const auto& col = t.*(p.col);
        if (!any_finite(col)) continue;
        stk.names.emplace_back(p.name);
        stk.colors.emplace_back(p.color);
        stk.layers.push_back(col);
      }
      for (size_t k = 0; k < t.size(); ++k) {
        if (!std::isfinite(t.t_total[k])) continue;
        double sum = 0;
        for (const auto& p : phases()) {
          double v = (t.*(p.col))[k];
          if (std::isfinite(v)) sum += v;
        }
        other[k] = std::max(0.0, t.t_total[k] - sum);
        has_other |= other[k] > 1e-12 * std::max(1.0, t.t_total[k]);
      }
      if (has_other) {
        stk.names.emplace_back("other");
        stk.colors.emplace_back("#c7c7c7");
        stk.layers.push_back(other);
      }
      // Warm-up steps (compilation, allocator growth) can take many times a normal step: the axis
      // tops out at the highest total after warm-up so the steady state stays readable.
      double top = 0;
      for (size_t k = warmup_index(t.size(), st.warmup_frac); k < t.size(); ++k) {
        double total = 0;
        for (const auto& layer : stk.layers)
          if (std::isfinite(layer[k])) total += layer[k];
        top = std::max(top, total);
      }
      size_t w = warmup_index(t.size(), st.warmup_frac);
      bool clipped = false;
      for (size_t k = 0; k < w; ++k) {
        double total = 0;
        for (const auto& layer : stk.layers)
          if (std::isfinite(layer[k])) total += layer[k];
        clipped |= total > top * 1.1;
      }
      if (top > 0 && clipped) {
        c.y.max = top * 1.1;
        c.subtitle += "; warm-up steps clipped";
      }
      c.stack = std::move(stk);
      add("train", c);
    }
    if (with_time.size() >= 2) {
      plot::BarChart b;
      b.id = unique_id("train-step-time-runs");
      b.title = "Median step time by phase";
      b.subtitle =
          overlaid("after warm-up (first " + plot::format_value(st.warmup_frac * 100, "%", 3) + " of logged steps)");
      b.width = st.width;
      b.height = st.height;
      b.horizontal = true;
      b.stacked = true;
      b.value_axis = Axis{"time per step", "s", Scale::Linear, {}, {}, true};
      for (size_t i : with_time) b.categories.push_back(run_label(runs[i]));
      std::vector<double> other;
      for (const auto& p : phases()) {
        plot::BarGroup g{p.name, {}, p.color};
        bool any = false;
        for (size_t i : with_time) {
          const auto& t = runs[i].train;
          double m = median_from(t.*(p.col), warmup_index(t.size(), st.warmup_frac));
          g.values.push_back(m);
          any |= std::isfinite(m);
        }
        if (any) b.groups.push_back(std::move(g));
      }
      plot::BarGroup og{"other", {}, "#c7c7c7"};
      bool any_other = false;
      for (size_t k = 0; k < with_time.size(); ++k) {
        const auto& t = runs[with_time[k]].train;
        double total = median_from(t.t_total, warmup_index(t.size(), st.warmup_frac));
        double sum = 0;
        for (const auto& g : b.groups)
          if (std::isfinite(g.values[k])) sum += g.values[k];
        double o = std::isfinite(total) ? std::max(0.0, total - sum) : kNaN;
        og.values.push_back(o);
        any_other |= std::isfinite(o) && o > 0;
      }
      if (any_other) b.groups.push_back(std::move(og));
      add("train", b);
    }
  }

  void train_charts() {
    if (runs_with_train().empty()) return;
    loss_chart(false);
    loss_chart(true);
    simple_train_chart("train-lr", "Learning rate", "", &TrainSeries::lr,
                       Axis{"learning rate", "", Scale::Linear, {}, {}, true});
    grad_norm_chart();
    simple_train_chart("train-throughput", "Throughput", "tokens per second, all ranks", &TrainSeries::tokens_per_s,
                       Axis{"throughput", "tok/s", Scale::Linear, {}, {}, true});
    // MFU is logged as a fraction; shown in percent (unless a run, drawn or not, logged it in percent).
    bool fraction = true;
    for (const auto& r : runs) fraction = fraction && !(mfu_max(r) > 1.5);
    simple_train_chart("train-mfu", "Model FLOPs utilisation", "", &TrainSeries::mfu,
                       Axis{"MFU", "%", Scale::Linear, {}, {}, true}, fraction ? 100.0 : 1.0);
    step_time_charts();
  }

  void eval_charts() {
    // (task, metric) -> per run: step -> (value, stderr)
    std::map<std::pair<std::string, std::string>, std::map<size_t, std::map<double, std::pair<double, double>>>> data;
    for (size_t i : drawn)
      for (const auto& r : runs[i].eval) {
        double x = std::isfinite(r.step) ? r.step : 0;
        data[{r.task, r.metric}][i][x] = {r.value, r.stderr_value};
      }
    for (const auto& [key, per_run] : data) {
      // A metric evaluated at one step only is a number, not a curve: the eval table shows it.
      size_t most_steps = 0;
      for (const auto& [i, points] : per_run) most_steps = std::max(most_steps, points.size());
      if (most_steps < 2) continue;
      Chart c = chart("eval-" + slug(key.first) + "-" + slug(key.second), "Eval: " + key.first + " / " + key.second);
      c.subtitle = overlaid("error bars: reported stderr");
      c.x = Axis{"step", "", Scale::Linear, {}, {}, false};
      c.y = Axis{key.second, "", Scale::Linear, {}, {}, false};
      for (const auto& [i, points] : per_run) {
        Series s = line(i, {}, {});
        s.style = Style::LinePoints;
        for (const auto& [x, vs] : points) {
          s.x.push_back(x);
          s.y.push_back(vs.first);
          s.y_err.push_back(vs.second);
        }
        c.series.push_back(std::move(s));
      }
      add("eval", c);
    }
  }

  void sweep_charts() {
    struct Key {
      std::string coll, tier;
      bool operator<(const Key& o) const { return std::tie(coll, tier) < std::tie(o.coll, o.tier); }
    };
    std::map<Key, std::map<size_t, std::map<std::string, std::vector<std::pair<double, double>>>>> measured;
    std::map<Key, std::map<size_t, std::vector<double>>> factors;  // busbw / algbw
    std::vector<std::string> coll_order;
    for (size_t i : drawn) {
      // Either sweep.json layout (sweep_rows). A variant is one type/op (and root, when the run
      // measured several roots: -r -1) of a collective and tier: one line each.
      std::vector<SweepRow> rows = sweep_rows(runs[i].sweep);
      std::map<Key, std::set<std::string>> roots;
      for (const auto& r : rows) roots[Key{normalize_collective(r.collective), r.tier}].insert(r.root);
      for (const auto& r : rows) {
        Key k{normalize_collective(r.collective), r.tier};
        int side = std::isnan(r.busbw[0]) && !std::isnan(r.busbw[1]) ? 1 : 0;  // out-of-place, else in-place
        double bw = r.busbw[side], alg = r.algbw[side];
        if (std::isnan(bw) || !std::isfinite(r.size)) continue;
        std::string variant = r.type;
        if (!r.redop.empty() && r.redop != "none") variant += " " + r.redop;
        if (roots[k].size() > 1) variant += " root " + r.root;
        measured[k][i][variant].push_back({r.size, bw});
        if (std::isfinite(bw) && std::isfinite(alg) && alg > 0) factors[k][i].push_back(bw / alg);
      }
    }
    for (auto& [k, per_run] : measured) {
      Chart c = chart("sweep-" + k.coll + "-" + k.tier, "Bus bandwidth: " + k.coll + " (" + k.tier + ")");
      c.subtitle = overlaid("points: measured (out-of-place); dashed: fitted alpha-beta model");
      c.x = Axis{"message size", "B", Scale::Log, {}, {}, false};
      c.y = Axis{"bus bandwidth", "GB/s", Scale::Log, {}, {}, false};
      size_t nruns = per_run.size();
      for (auto& [i, variants] : per_run) {
        double xmin = 1e300, xmax = 0;
        for (auto& [variant, pts] : variants) {
          std::sort(pts.begin(), pts.end());
          Series s = line(i, {}, {}, variants.size() > 1 ? " " + variant : "");
          s.style = Style::LinePoints;
          s.dashed = false;
          s.width = 1.2;
          for (auto [x, y] : pts) {
            s.x.push_back(x);
            s.y.push_back(y);
            if (x > 0) {
              xmin = std::min(xmin, x);
              xmax = std::max(xmax, x);
            }
          }
          c.series.push_back(std::move(s));
        }
        // Fitted curve: busbw(S) = S f / (alpha + S f / beta), f = busbw/algbw of the measurements.
        const json* fit_list = sweep_fits(runs[i].sweep);
        if (!fit_list || xmax <= 0) continue;
        double f = median_from(factors[k][i], 0);
        if (!std::isfinite(f) || f <= 0) f = 1;
        // Several fits for this collective and tier (-d/-o all, -r -1): the one cairn-plan reads
        // (in_fabric) when marked, else all of them.
        auto in_fabric = [](const json& fit) {
          auto it = fit.find("in_fabric");
          return it != fit.end() && it->is_boolean() && it->get<bool>();
        };
        std::vector<const json*> matching;
        bool any_in_fabric = false;
        for (const auto& fit : *fit_list) {
          if (!fit.is_object() || !fit.contains("collective") || !fit["collective"].is_string()) continue;
          std::string tier = fit.contains("tier") && fit["tier"].is_string() ? fit["tier"].get<std::string>() : "world";
          if (normalize_collective(fit["collective"].get<std::string>()) != k.coll || tier != k.tier) continue;
          if (fit.contains("valid") && fit["valid"].is_boolean() && !fit["valid"].get<bool>()) continue;
          matching.push_back(&fit);
          any_in_fabric |= in_fabric(fit);
        }
        for (const json* fp : matching) {
          const json& fit = *fp;
          if (any_in_fabric && matching.size() > 1 && !in_fabric(fit)) continue;
          double alpha = num_or_nan(fit, "alpha_us"), beta = num_or_nan(fit, "busbw_gbps");
          if (!(alpha >= 0) || !(beta > 0)) continue;
          Series s = line(i, {}, {}, " fit");
          s.dashed = true;
          s.in_legend = false;  // the subtitle says dashed = fit
          s.width = 1.4;
          const int n = 64;
          for (int j = 0; j < n; ++j) {
            double S = xmin * std::pow(xmax / xmin, static_cast<double>(j) / (n - 1));
            double t = alpha * 1e-6 + S * f / (beta * 1e9);
            s.x.push_back(S);
            s.y.push_back(S * f / t / 1e9);
          }
          c.series.push_back(std::move(s));
          double peak = num_or_nan(fit, "peak_busbw_gbps");
          if (nruns <= 2 && std::isfinite(peak) && peak > 0)
            c.refs.push_back(
                {false, peak,
                 "peak " + plot::format_value(peak, "GB/s", 3) + (nruns > 1 ? " (" + runs[i].name + ")" : ""), color(i),
                 true});
          double half = num_or_nan(fit, "half_peak_bytes");
          if (nruns == 1 && std::isfinite(half) && half > 0)
            c.refs.push_back({true, half, "half peak at " + plot::format_value(half, "B", 3), "#777777", true});
        }
      }
      add("sweep", c);
    }
  }

  void plan_charts() {
    plot::BarChart b;
    b.id = unique_id("plan-predicted-vs-measured");
    b.title = "Plan: predicted vs measured step time";
    b.subtitle = overlaid("");
    b.width = st.width;
    b.height = st.height;
    b.horizontal = true;
    b.value_axis = Axis{"step time", "s", Scale::Linear, {}, {}, true};
    plot::BarGroup pred{"predicted (cairn-plan)", {}, "#9ecae1"}, meas{"measured (median)", {}, "#1f77b4"};
    for (size_t i : drawn) {
      bool matched = false;
      json used = plan_used_by_training(runs[i], &matched);
      const auto& t = runs[i].train;
      double m = median_from(t.t_total, warmup_index(t.size(), st.warmup_frac));
      if (!used.is_object() || !std::isfinite(m)) continue;
      b.categories.push_back(run_label(runs[i]) + (matched ? "" : " (best plan)"));
      pred.values.push_back(num_or_nan(used, "step_time_s"));
      meas.values.push_back(m);
    }
    if (b.categories.empty()) return;
    b.groups = {pred, meas};
    add("plan", b);
  }

  void data_charts() {
    std::vector<size_t> with;
    for (size_t i : drawn)
      if (!data_tokens_per_shard(runs[i]).empty()) with.push_back(i);
    if (!with.empty()) {
      size_t max_shards = 0;
      for (size_t i : with) max_shards = std::max(max_shards, data_tokens_per_shard(runs[i]).size());
      if (max_shards <= 64) {
        plot::BarChart b;
        b.id = unique_id("data-tokens-per-shard");
        b.title = "Tokens per shard";
        b.subtitle = overlaid("");
        b.width = st.width;
        b.height = st.height;
        b.category_label = "shard";
        b.value_axis = Axis{"tokens", "tok", Scale::Linear, {}, {}, true};
        for (size_t k = 0; k < max_shards; ++k) b.categories.push_back(std::to_string(k));
        for (size_t i : with) b.groups.push_back({run_label(runs[i]), data_tokens_per_shard(runs[i]), color(i)});
        add("data", b);
      } else {
        Chart c = chart("data-tokens-per-shard", "Tokens per shard");
        c.subtitle = overlaid("");
        c.x = Axis{"shard", "", Scale::Linear, {}, {}, false};
        c.y = Axis{"tokens", "tok", Scale::Linear, {}, {}, true};
        for (size_t i : with) {
          std::vector<double> y = data_tokens_per_shard(runs[i]), x(y.size());
          for (size_t k = 0; k < x.size(); ++k) x[k] = static_cast<double>(k);
          Series s = line(i, x, y);
          s.style = Style::Points;
          c.series.push_back(std::move(s));
        }
        add("data", c);
      }
    }
    // One histogram per dataset: runs trained on the same data (a nightly and its baseline) share theirs.
    std::vector<std::pair<Histogram, std::vector<size_t>>> shown;
    for (size_t i : drawn) {
      Histogram h = data_doc_length_histogram(runs[i]);
      if (h.count.empty()) continue;
      auto same = std::find_if(shown.begin(), shown.end(), [&](const auto& s) {
        return same_values(s.first.count, h.count) && same_values(s.first.lo, h.lo) && same_values(s.first.hi, h.hi);
      });
      if (same != shown.end()) same->second.push_back(i);
      else shown.push_back({std::move(h), {i}});
    }
    for (const auto& [h, with_it] : shown) {
      size_t i = with_it.front();
      plot::BarChart b;
      b.id = unique_id("data-doc-length-" + slug(runs[i].name));
      b.title = "Document length: " + run_label(runs[i]);
      if (with_it.size() > 1) {
        size_t n = with_it.size() - 1;
        b.subtitle = "the same in " + (n == 1 ? run_label(runs[with_it[1]]) : std::to_string(n) + " other runs drawn");
      }
      b.width = st.width;
      b.height = st.height;
      b.category_label = "document length [tokens]";
      b.value_axis = Axis{"documents", "", Scale::Linear, {}, {}, true};
      for (size_t k = 0; k < h.count.size(); ++k) {
        auto label = [](double v) {
          if (!std::isfinite(v)) return std::string();
          if (v == std::floor(v) && std::fabs(v) < 1e5) return std::to_string(static_cast<long long>(v));
          return plot::format_value(v, "", 3);
        };
        std::string lo = label(h.lo[k]), hi = label(h.hi[k]);
        b.categories.push_back(hi.empty() ? lo + "+" : lo + "-" + hi);
      }
      b.groups.push_back({"documents", h.count, color(i)});
      add("data", b);
    }
  }

  // A headline metric per run, in the order given: the trend over a nightly history or a sweep of runs, which
  // overlaid curves cannot show past a dozen runs. Every run is drawn here, not only `drawn`.
  void across_runs_charts() {
    if (metrics.size() != runs.size()) return;
    std::vector<std::string> names{"val_loss",    "loss",           "tokens_per_s", "mfu",
                                   "step_time_s", "plan_error_pct", "avg_busbw"};
    std::set<std::string> eval_names;
    for (const auto& mm : metrics)
      for (const auto& [name, v] : mm)
        if (name.rfind("eval_", 0) == 0) eval_names.insert(name);
    names.insert(names.end(), eval_names.begin(), eval_names.end());
    for (const auto& name : names) {
      std::optional<MetricDef> def = resolve_metric(name);
      if (!def) continue;
      Series s;
      s.name = name;
      s.style = Style::LinePoints;
      s.color = "#1f77b4";
      s.width = 1.2;
      s.in_legend = false;
      for (size_t i = 0; i < runs.size(); ++i) {
        auto it = metrics[i].find(name);
        double v = it == metrics[i].end() ? kNaN : it->second.value;
        s.x.push_back(static_cast<double>(i + 1));
        s.y.push_back(v);
      }
      size_t finite =
          static_cast<size_t>(std::count_if(s.y.begin(), s.y.end(), [](double v) { return std::isfinite(v); }));
      if (finite < kAcrossRunsMin) continue;
      Chart c = chart("runs-" + slug(name), "Across runs: " + name);
      c.subtitle = "one point per run in the order given: 1 = " + run_label(runs.front()) + ", " +
                   std::to_string(runs.size()) + " = " + run_label(runs.back());
      c.x = Axis{"run", "", Scale::Linear, 1.0, static_cast<double>(runs.size()), false};
      c.y = Axis{name, def->unit, Scale::Linear, {}, {}, false};
      if (baseline >= 0 && std::isfinite(s.y[static_cast<size_t>(baseline)]))
        c.refs.push_back({false, s.y[static_cast<size_t>(baseline)],
                          "baseline " + plot::format_value(s.y[static_cast<size_t>(baseline)], def->unit, 4), "#333333",
                          true});
      c.series.push_back(std::move(s));
      add(def->group, c);
    }
  }
};

}  // namespace

std::vector<size_t> drawn_runs(size_t runs, int baseline, size_t chart_runs) {
  std::vector<size_t> r;
  if (chart_runs == 0 || runs <= chart_runs) {
    for (size_t i = 0; i < runs; ++i) r.push_back(i);
    return r;
  }
  size_t keep = chart_runs;
  if (baseline >= 0 && static_cast<size_t>(baseline) < runs) {
    r.push_back(static_cast<size_t>(baseline));
    keep = std::max<size_t>(1, keep - 1);  // the baseline never takes the last run's place (chart_runs = 1)
  }
  std::vector<size_t> last;
  for (size_t i = runs; i-- > 0 && last.size() < keep;)
    if (static_cast<int>(i) != baseline) last.push_back(i);
  r.insert(r.end(), last.rbegin(), last.rend());
  std::sort(r.begin(), r.end());
  return r;
}

std::string run_color(const std::vector<RunData>& runs, int baseline, size_t i, size_t chart_runs) {
  if (runs.size() > 1 && static_cast<int>(i) == baseline) return "#333333";
  // The palette goes to the runs drawn, in order, so the first ten drawn get its ten distinct colours.
  std::vector<size_t> drawn = drawn_runs(runs.size(), baseline, chart_runs);
  size_t k = 0;
  for (size_t d : drawn) {
    if (d == i) return plot::palette_color(k);
    if (static_cast<int>(d) != baseline || runs.size() == 1) ++k;
  }
  return "";
}

std::string run_label(const RunData& run) { return run.is_baseline ? run.name + " (baseline)" : run.name; }

size_t svg_points(const std::string& svg) {
  auto p = svg.find("data-points=\"");
  if (p == std::string::npos) return 0;
  return static_cast<size_t>(std::strtoull(svg.c_str() + p + 13, nullptr, 10));
}

std::vector<ChartOut> build_charts(const std::vector<RunData>& runs, int baseline,
                                   const std::vector<std::map<std::string, MetricValue>>& metrics,
                                   const ChartSettings& settings) {
  Builder b{runs, baseline, metrics, settings, {}, {}};
  b.train_charts();
  b.eval_charts();
  b.sweep_charts();
  b.plan_charts();
  b.data_charts();
  b.across_runs_charts();
  return std::move(b.out);
}

}  // namespace cairn::report
