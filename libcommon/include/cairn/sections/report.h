// [report] and [report.gates]: cairn-report's inputs and regression gates.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "cairn/config_section.h"

namespace cairn {

struct ReportSection {
  static constexpr const char* kSection = "report";
  std::vector<std::string> runs;
  std::string baseline;
  std::string title;
  double smooth = 0.9;
  double warmup_frac = 0.1;
  int64_t max_points = 0;
  int top_plans = 10;
  int chart_width = 620;
  int chart_runs = 12;
  int threads = 0;
  template <class K>
  static void keys(K& k) {
    using S = ReportSection;
    k(&S::runs, "runs", "run directories to report on (positional arguments add to these)");
    k(&S::baseline, "baseline", Flag{"-b,--baseline"},
      "reference run directory for comparisons and gates (--baseline)");
    k(&S::title, "title", Flag{"--title"}, "report title (default: the runs' names)");
    k(&S::smooth, "smooth", Range{0.0, 0.999},
      "EMA weight of smoothed loss curves (TensorBoard-style, debiased; 0 = raw only)");
    k(&S::warmup_frac, "warmup_frac", Range{0.0, 0.9},
      "fraction of logged steps left out of throughput, MFU and step-time medians");
    k(&S::max_points, "max_points", Range{0, 1e7},
      "points per chart series after min/max downsampling (0 = about 4 per pixel column)");
    k(&S::top_plans, "top_plans", Range{1, 1000}, "plans listed per run in the plan table");
    k(&S::chart_width, "chart_width", Range{300, 4000}, "chart width in pixels");
    k(&S::chart_runs, "chart_runs", Range{0, 100000},
      "runs overlaid in a chart: the baseline and the last ones given (0 = all); the tables and the across-runs "
      "charts hold every run");
    k(&S::threads, "threads", Range{0, 1024}, "threads reading run directories (0 = one per core)");
  }
};

// [report.gates]: metric = { max_increase = x | ... }, an open section of inline tables.
inline constexpr const char* kReportGatesSection = "report.gates";
// The rules a gate's table may hold: its schema's table keys (a misspelled rule is an error at load, naming the file
// position) and cairn-report's gate parser read this one list.
inline const std::vector<std::string>& report_gate_rule_kinds() {
  static const std::vector<std::string> k{"max_increase", "max_increase_pct", "max_drop", "max_drop_pct", "max", "min"};
  return k;
}
inline constexpr const char* kReportGatesDoc =
    "regression gates: metric = { max_increase = x | max_increase_pct = p | max_drop = x | max_drop_pct = p | max "
    "= m | min = m } (cairn-report --list-metrics)";

}  // namespace cairn
