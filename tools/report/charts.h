// Charts of cairn-report: one SVG per view (training, eval, sweep, plan, data), runs overlaid.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "catalog.h"

namespace cairn::report {

struct ChartOut {
  std::string section;  // "train", "eval", "sweep", "plan", "data"
  std::string id;
  std::string title;
  std::string svg;
  size_t points = 0;                // data points drawn (after downsampling)
  std::vector<std::string> series;  // names of the series drawn
};

struct ChartSettings {
  double smooth = 0.9;
  double warmup_frac = 0.1;
  size_t max_points = 0;  // per series; 0 = about 4 per pixel column
  int width = 620;
  int height = 340;
  size_t chart_runs = 12;  // runs overlaid per chart: the baseline and the last ones given (0 = all)
};

// The colour of run i: the baseline is dark grey, the runs drawn (drawn_runs) take the palette in order, and a run
// left out of the charts has none ("").
std::string run_color(const std::vector<RunData>& runs, int baseline, size_t i, size_t chart_runs = 0);
// "name" or "name (baseline)".
std::string run_label(const RunData& run);

// `metrics` (per run, as compute_metrics gives them; may be empty) feed the across-runs charts: a headline metric
// per run in the order given, drawn when at least kAcrossRunsMin runs have it (nightly history, sweeps of runs).
std::vector<ChartOut> build_charts(const std::vector<RunData>& runs, int baseline,
                                   const std::vector<std::map<std::string, MetricValue>>& metrics,
                                   const ChartSettings& settings);
inline constexpr size_t kAcrossRunsMin = 8;

// The runs a chart overlays: every run when there are at most `chart_runs` (or it is 0), else the baseline and the
// last runs given, in order (at least one besides the baseline, so chart_runs = 1 draws the baseline and the last).
std::vector<size_t> drawn_runs(size_t runs, int baseline, size_t chart_runs);

// One chart's series, e.g. for tests: counts the data points of an SVG (its data-points attribute).
size_t svg_points(const std::string& svg);

}  // namespace cairn::report
