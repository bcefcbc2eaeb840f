// cairn-report: reads run directories, compares them with a baseline, checks gates, writes the report.
#pragma once
#include <string>
#include <vector>

#include "cairn/config.h"
#include "charts.h"
#include "gates.h"

namespace cairn::report {

// What to report on (from [report] keys, positional run directories and --baseline).
struct ReportInputs {
  std::vector<std::string> runs;  // run directories, baseline included or not
  std::string baseline;           // "" = none
  std::string out_dir;            // report goes to <out_dir>/report/
  std::string title;
  MetricSettings metric_settings;
  ChartSettings chart_settings;
  int top_plans = 10;
  int threads = 0;
  std::vector<GateRule> gates;
};

// Builds the inputs from the effective config; `cli_runs` are the positional directories. Gate
// errors (unknown metric, bad rule) are UsageError, raised here before any run is read.
ReportInputs report_inputs(const Config& cfg, const std::vector<std::string>& cli_runs);

// Everything the report shows, computed once and rendered three ways.
struct ReportModel {
  std::string title;
  std::vector<RunData> runs;  // baseline first when there is one
  int baseline = -1;
  std::vector<std::map<std::string, MetricValue>> metrics;  // per run
  std::vector<MetricDef> table_metrics;                     // rows of the comparison table
  std::vector<GateResult> gates;
  std::vector<ChartOut> charts;
  ReportInputs inputs;
  double seconds = 0;  // time to build (read + compute + render charts)
  size_t gates_failed() const;
};

ReportModel build_report(const ReportInputs& inputs);

std::string render_html(const ReportModel& model);
std::string render_markdown(const ReportModel& model);
json render_json(const ReportModel& model);

// Writes index.html, summary.md and summary.json to <out_dir>/report/ (atomically) and returns
// the exit code: 0, or 3 when a gate failed (the caller throws GateFailure with a summary line).
struct ReportResult {
  ReportModel model;
  std::string report_dir;
  std::string json_text;
};
ReportResult run_report(const ReportInputs& inputs);

// "2 of 5 gates failed: val_loss (run b): 3.31 is not <= 3.27 ..." (for the exit-3 message).
std::string gate_failure_message(const ReportModel& model);

}  // namespace cairn::report
