// Regression gates of cairn-report: [report.gates] rules checked against a baseline run.
#pragma once
#include <string>
#include <vector>

#include "cairn/config.h"
#include "catalog.h"

namespace cairn::report {

// One rule of one gate, e.g. val_loss max_increase 0.02.
struct GateRule {
  MetricDef metric;  // resolved (canonical name)
  std::string key;   // the metric as written in the config
  std::string kind;  // max_increase | max_increase_pct | max_drop | max_drop_pct | max | min
  double amount = 0;
  bool relative() const { return kind != "max" && kind != "min"; }
  std::string text() const;  // "max_increase = 0.02"
};

// Parses the [report.gates] table ({metric: {rule: number, ...}}). Unknown metrics, unknown rules
// and non-numeric amounts are UsageError (exit 2) naming the key.
std::vector<GateRule> parse_gates(const json& gates);
// The same over the config's [report.gates], each error prefixed with where the gate was set ("exp.toml:12:1",
// "--set"). cairn-report calls it before --print-config, so a config the report would refuse is refused up front
// (nightly.sh checks its config so, before it submits anything).
std::vector<GateRule> parse_gates(const Config& cfg);

struct GateResult {
  std::string run;     // the run checked
  std::string metric;  // canonical metric name
  std::string unit;
  std::string rule;  // "max_drop_pct = 5"
  double baseline = kNaN;
  double value = kNaN;
  double limit = kNaN;     // the threshold the value was compared with
  std::string limit_text;  // "<= 3.27 (baseline + 0.02)"
  int digits = 4;          // significant digits that tell the value from its limit (4 unless they print alike)
  bool pass = false;
  std::string reason;  // why it failed, or "" when it passed
};

// Checks every rule on every run except the baseline (or on the baseline when it is the only run).
// `baseline` indexes `runs` (-1: none). Missing data and missing baselines are failures with a reason.
std::vector<GateResult> evaluate_gates(const std::vector<GateRule>& rules, const std::vector<RunData>& runs,
                                       const std::vector<std::map<std::string, MetricValue>>& metrics, int baseline);

}  // namespace cairn::report
