// Charts of cairn-report: one SVG per view (training, eval, sweep, plan, data), runs overlaid.
#pragma once
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
};

// The colour of run i: the baseline is dark grey, the others take the palette in order.
std::string run_color(const std::vector<RunData>& runs, int baseline, size_t i);
// "name" or "name (baseline)".
std::string run_label(const RunData& run);

std::vector<ChartOut> build_charts(const std::vector<RunData>& runs, int baseline, const ChartSettings& settings);

// One chart's series, e.g. for tests: counts the data points of an SVG (its data-points attribute).
size_t svg_points(const std::string& svg);

}  // namespace cairn::report
