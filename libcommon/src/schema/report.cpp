// [report] and [report.gates]: cairn-report's inputs and regression gates.
#include "sections.h"

namespace cairn::schema {
void declare_report(Schema& s) {
  s.add("report", "runs", KeyType::StringList, json::array(),
        "run directories to report on (positional arguments add to these)");
  s.add("report", "baseline", KeyType::String, "", "reference run directory for comparisons and gates (--baseline)");
  s.add("report", "title", KeyType::String, "", "report title (default: the runs' names)");
  s.add_range("report", "smooth", KeyType::Float, 0.9, 0.0, 0.999,
              "EMA weight of smoothed loss curves (TensorBoard-style, debiased; 0 = raw only)");
  s.add_range("report", "warmup_frac", KeyType::Float, 0.1, 0.0, 0.9,
              "fraction of logged steps left out of throughput, MFU and step-time medians");
  s.add_range("report", "max_points", KeyType::Int, 0, 0, 1e7,
              "points per chart series after min/max downsampling (0 = about 4 per pixel column)");
  s.add_range("report", "top_plans", KeyType::Int, 10, 1, 1000, "plans listed per run in the plan table");
  s.add_range("report", "chart_width", KeyType::Int, 620, 300, 4000, "chart width in pixels");
  s.add_range("report", "threads", KeyType::Int, 0, 0, 1024, "threads reading run directories (0 = one per core)");
  s.add_open_section("report.gates", KeyType::Table,
                     "regression gates: metric = { max_increase = x | max_increase_pct = p | max_drop = x | "
                     "max_drop_pct = p | max = m | min = m } (cairn-report --list-metrics)");
}
}  // namespace cairn::schema
