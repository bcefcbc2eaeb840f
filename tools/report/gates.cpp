// Parsing and evaluation of cairn-report's regression gates.
#include "gates.h"

#include <cmath>

#include "cairn/config.h"
#include "cairn/config_origin.h"
#include "cairn/error.h"
#include "cairn/log.h"
#include "cairn/plot.h"
#include "cairn/sections/report.h"

namespace cairn::report {
namespace {

const std::vector<std::string>& rule_kinds() { return report_gate_rule_kinds(); }

// Rounding slack so that a value exactly at the limit (3.0 + 0.02 vs 3.02) passes.
double slack(double limit) { return 1e-12 * std::max(1.0, std::fabs(limit)); }

std::string fmt(double v, const std::string& unit, int digits) { return plot::format_value(v, unit, digits); }

std::string amount_text(double a) {
  std::string s = plot::format_value(a, "", 6);
  return s;
}

}  // namespace

std::string GateRule::text() const { return kind + " = " + amount_text(amount); }

std::vector<GateRule> parse_gates(const json& gates) {
  std::vector<GateRule> rules;
  if (gates.is_null()) return rules;
  if (!gates.is_object()) throw UsageError("[report.gates] must be a table of metric = { rule = number }");
  for (auto it = gates.begin(); it != gates.end(); ++it) {
    const std::string& key = it.key();
    std::optional<MetricDef> def = resolve_metric(key);
    if (!def) {
      std::string hint = suggest_metric(key);
      throw UsageError(dotted_name("report.gates", key) + ": unknown gate metric \"" + key + "\"" +
                       (hint.empty() ? "" : " (did you mean \"" + hint + "\"?)") + "; see cairn-report --list-metrics");
    }
    const json& spec = it.value();
    if (!spec.is_object() || spec.empty())
      throw UsageError(dotted_name("report.gates", key) + ": expected a table such as { max_increase = 0.02 }, got " +
                       config_value_text(spec));
    for (auto r = spec.begin(); r != spec.end(); ++r) {
      bool known = false;
      for (const auto& k : rule_kinds()) known |= k == r.key();
      if (!known)
        throw UsageError(
            dotted_name("report.gates", key) + "." + r.key() +
            ": unknown gate rule (use max_increase, max_increase_pct, max_drop, max_drop_pct, max or min)");
      if (!r.value().is_number() || !std::isfinite(r.value().get<double>()))
        throw UsageError(dotted_name("report.gates", key) + "." + r.key() + ": expected a number, got " +
                         config_value_text(r.value()));
      // A relative rule against the metric's direction bounds an improvement, not a regression: almost always a
      // slip (max_drop_pct on val_loss lets the loss rise freely). Said, not refused: it may be meant.
      const std::string& kind = r.key();
      const bool bounds_rise = kind == "max_increase" || kind == "max_increase_pct";
      const bool bounds_drop = kind == "max_drop" || kind == "max_drop_pct";
      if ((def->better == Better::Lower && bounds_drop) || (def->better == Better::Higher && bounds_rise))
        CAIRN_LOG_WARN("%s.%s: %s is better %s, so this rule bounds an improvement and lets a regression pass "
                       "(did you mean %s?)",
                       dotted_name("report.gates", key).c_str(), kind.c_str(), def->name.c_str(),
                       def->better == Better::Lower ? "lower" : "higher",
                       def->better == Better::Lower ? (kind == "max_drop" ? "max_increase" : "max_increase_pct")
                                                    : (kind == "max_increase" ? "max_drop" : "max_drop_pct"));
      GateRule g;
      g.metric = *def;
      g.key = key;
      g.kind = r.key();
      g.amount = r.value().get<double>();
      rules.push_back(g);
    }
  }
  return rules;
}

std::vector<GateRule> parse_gates(const Config& cfg) {
  const json gates = cfg.section(kReportGatesSection);
  if (!gates.is_object()) return parse_gates(gates);
  std::vector<GateRule> rules;
  for (auto it = gates.begin(); it != gates.end(); ++it) try {
      for (GateRule& r : parse_gates(json{{it.key(), it.value()}})) rules.push_back(std::move(r));
    } catch (const UsageError& e) {
      throw with_origin(cfg, dotted_name(kReportGatesSection, it.key()), e);
    }
  return rules;
}

std::vector<GateResult> evaluate_gates(const std::vector<GateRule>& rules, const std::vector<RunData>& runs,
                                       const std::vector<std::map<std::string, MetricValue>>& metrics, int baseline) {
  std::vector<GateResult> out;
  std::vector<size_t> checked;
  for (size_t i = 0; i < runs.size(); ++i)
    if (static_cast<int>(i) != baseline) checked.push_back(i);
  if (checked.empty() && baseline >= 0) checked.push_back(static_cast<size_t>(baseline));

  for (const auto& rule : rules) {
    for (size_t ri : checked) {
      GateResult g;
      g.run = runs[ri].name;
      g.metric = rule.metric.name;
      g.unit = rule.metric.unit;
      g.rule = rule.text();
      auto v = metrics[ri].find(rule.metric.name);
      if (v != metrics[ri].end()) g.value = v->second.value;
      if (rule.relative()) {
        if (baseline < 0) {
          g.reason = "needs a baseline run (--baseline DIR)";
        } else if (static_cast<int>(ri) == baseline) {
          g.reason = "no run to compare with the baseline";
        } else {
          auto b = metrics[static_cast<size_t>(baseline)].find(rule.metric.name);
          if (b != metrics[static_cast<size_t>(baseline)].end()) g.baseline = b->second.value;
          else g.reason = "baseline: " + missing_reason(runs[static_cast<size_t>(baseline)], rule.metric);
          // A value over other validation windows (another val_batches, or a cairn-train that counted them
          // otherwise) or other eval examples (another --limit, split or task file) is another sum: a difference
          // would be read as a regression or an improvement that is neither.
          const auto& bm = metrics[static_cast<size_t>(baseline)];
          const double w = v != metrics[ri].end() ? v->second.count : kNaN, wb = b != bm.end() ? b->second.count : kNaN;
          if (g.reason.empty() && std::isfinite(w) && std::isfinite(wb) && w != wb) {
            const bool windows = std::string(v->second.count_unit) == "windows";
            g.reason =
                strprintf("not comparable: the run's %s averages %.0f %s, the baseline's %.0f (%s); compare runs "
                          "scored alike or take a new baseline",
                          rule.metric.name.c_str(), w, v->second.count_unit, wb,
                          windows
                              ? "[train] val_batches or the cairn-train version differ"
                              : "the task's data, --limit, train_val's val_batches or the cairn-eval version differ");
          }
        }
      }
      if (std::isnan(g.value)) {
        std::string why = missing_reason(runs[ri], rule.metric);
        g.reason = g.reason.empty() ? why : why + "; " + g.reason;
      }
      if (g.reason.empty()) {
        const double base = g.baseline, a = rule.amount;
        const std::string& u = g.unit;
        const std::string& k = rule.kind;
        const bool upper = k == "max_increase" || k == "max_increase_pct" || k == "max";
        if (k == "max_increase") g.limit = base + a;
        else if (k == "max_increase_pct") g.limit = base + std::fabs(base) * a / 100;
        else if (k == "max_drop") g.limit = base - a;
        else if (k == "max_drop_pct") g.limit = base - std::fabs(base) * a / 100;
        else g.limit = a;
        g.pass = upper ? g.value <= g.limit + slack(g.limit) : g.value >= g.limit - slack(g.limit);
        // Enough digits that a value just past its limit does not print as the limit ("FAIL 3.02, <= 3.02").
        while (g.digits < 12 && g.value != g.limit && fmt(g.value, u, g.digits) == fmt(g.limit, u, g.digits))
          ++g.digits;
        const int dg = g.digits;
        const std::string bound = (upper ? "<= " : ">= ") + fmt(g.limit, u, dg);
        if (k == "max_increase") g.limit_text = bound + " (baseline + " + amount_text(a) + ")";
        else if (k == "max_increase_pct") g.limit_text = bound + " (baseline + " + amount_text(a) + "%)";
        else if (k == "max_drop") g.limit_text = bound + " (baseline - " + amount_text(a) + ")";
        else if (k == "max_drop_pct") g.limit_text = bound + " (baseline - " + amount_text(a) + "%)";
        else g.limit_text = bound;
        if (!g.pass) {
          double d = g.value - base;
          std::string pct = base != 0 ? plot::format_value(d / std::fabs(base) * 100, "%", 3) : "n/a";
          if (d > 0) pct = "+" + pct;
          std::string abs_d = (d > 0 ? "+" : "") + fmt(d, u, dg);
          if (k == "max_increase")
            g.reason = abs_d + " vs baseline " + fmt(base, u, dg) + "; allowed increase " + fmt(a, u, dg);
          else if (k == "max_increase_pct")
            g.reason = pct + " vs baseline " + fmt(base, u, dg) + "; allowed increase " + amount_text(a) + "%";
          else if (k == "max_drop")
            g.reason = abs_d + " vs baseline " + fmt(base, u, dg) + "; allowed drop " + fmt(a, u, dg);
          else if (k == "max_drop_pct")
            g.reason = pct + " vs baseline " + fmt(base, u, dg) + "; allowed drop " + amount_text(a) + "%";
          else if (k == "max") g.reason = fmt(g.value, u, dg) + " is above the maximum " + fmt(a, u, dg);
          else g.reason = fmt(g.value, u, dg) + " is below the minimum " + fmt(a, u, dg);
        }
      }
      out.push_back(g);
    }
  }
  return out;
}

}  // namespace cairn::report
