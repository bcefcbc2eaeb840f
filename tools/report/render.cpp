// Renders cairn-report's model as self-contained XHTML-compatible HTML, Markdown and JSON.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "cairn/json_text.h"
#include "cairn/log.h"
#include "cairn/plot.h"
#include "cairn/provenance.h"
#include "cairn/records.h"
#include "report.h"

namespace cairn::report {
namespace {

using plot::format_value;
using plot::xml_escape;

std::string fmt_or_na(double v, const std::string& unit, int digits = 4) {
  return std::isnan(v) ? "n/a" : format_value(v, unit, digits);
}

// Signed difference with units, e.g. "+0.012" or "-3.1%".
std::string signed_fmt(double v, const std::string& unit, int digits = 3) {
  if (std::isnan(v)) return "n/a";
  std::string s = format_value(v, unit, digits);
  return v > 0 ? "+" + s : s;
}

enum class Verdict { Better, Worse, Same, Unknown };
Verdict compare(double value, double base, Better better) {
  if (std::isnan(value) || std::isnan(base)) return Verdict::Unknown;
  double tol = 1e-9 * std::max(1.0, std::fabs(base));
  if (std::fabs(value - base) <= tol) return Verdict::Same;
  if (better == Better::Neither) return Verdict::Unknown;
  bool lower = value < base;
  return (better == Better::Lower) == lower ? Verdict::Better : Verdict::Worse;
}
const char* verdict_word(Verdict v) {
  switch (v) {
    case Verdict::Better: return "better";
    case Verdict::Worse: return "worse";
    case Verdict::Same: return "same";
    default: return "";
  }
}

std::string json_cell(const json& j) {
  if (j.is_null()) return "";
  if (j.is_string()) return j.get<std::string>();
  if (j.is_boolean()) return j.get<bool>() ? "yes" : "no";
  if (j.is_number_integer()) return std::to_string(j.get<long long>());
  if (j.is_number()) return format_value(j.get<double>(), "", 4);
  return json_text(j);
}

const char* kCss = R"CSS(
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;margin:0;color:#1f2328;background:#f4f5f7;font-size:14px}
header{background:#1f2937;color:#fff;padding:14px 24px}
header h1{margin:0;font-size:20px}
header p{margin:4px 0 0;color:#cbd5e1;font-size:12px}
nav{padding:8px 24px;background:#e5e7eb;font-size:13px}
nav a{margin-right:14px;color:#1f2937}
main{padding:4px 24px 32px}
section{background:#fff;border:1px solid #dfe2e6;border-radius:6px;padding:10px 16px 14px;margin:14px 0}
h2{font-size:17px;margin:4px 0 10px}
h3{font-size:14px;margin:14px 0 6px}
.banner{padding:10px 14px;border-radius:6px;font-weight:600;font-size:15px;margin:14px 0 0}
.banner.pass{background:#dcfce7;color:#14532d;border:1px solid #86efac}
.banner.fail{background:#fee2e2;color:#7f1d1d;border:1px solid #fca5a5}
.banner.none{background:#f1f5f9;color:#334155;border:1px solid #cbd5e1}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(540px,1fr));gap:12px}
.charts figure{margin:0;border:1px solid #eceef1;border-radius:4px;padding:4px}
.charts svg{width:100%;height:auto;display:block}
.scroll{overflow-x:auto}
table{border-collapse:collapse;font-size:13px;margin:4px 0}
th,td{border-bottom:1px solid #eceef1;padding:4px 9px;text-align:right;vertical-align:top;white-space:nowrap}
th{background:#f8fafc;font-weight:600}
td.l,th.l{text-align:left}
td.wrap{white-space:normal;max-width:560px;text-align:left}
.pass{color:#15803d;font-weight:600}
.fail{color:#b91c1c;font-weight:600}
.better{color:#15803d}
.worse{color:#b91c1c}
.same,.muted{color:#6b7280}
.small{font-size:11px}
ul.problems{margin:4px 0;padding-left:18px;font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
code{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
footer{padding:8px 24px 24px;color:#6b7280;font-size:12px}
)CSS";

struct Html {
  std::string o;
  Html& operator<<(const std::string& s) {
    o += s;
    return *this;
  }
};

std::string stage_list(const RunData& r) {
  std::string s;
  for (const char* st : {"sweep", "plan", "data", "train", "eval"}) {
    if (!s.empty()) s += " ";
    s += r.has(st) ? std::string(st) : "";
  }
  std::string out;
  std::istringstream is(s);
  std::string w;
  while (is >> w) out += (out.empty() ? "" : ", ") + w;
  return out.empty() ? "none" : out;
}

std::string absent_list(const RunData& r) {
  std::string out;
  for (const char* st : {"sweep", "plan", "data", "train", "eval"})
    if (!r.has(st)) out += (out.empty() ? "" : ", ") + std::string(st);
  return out;
}

// Builds that trained the run (A, B, A is 2).
size_t distinct_builds(const RunData& r) { return std::set<std::string>(r.builds.begin(), r.builds.end()).size(); }

std::string train_status(const RunData& r) {
  if (r.train_records() == 0) return r.has("train") ? "no records" : "";
  std::string s = "step " + format_value(r.last_step(), "", 6);
  s += r.train_finished ? ", finished" : ", not finished";
  if (!r.restarts.empty()) s += ", " + std::to_string(r.restarts.size()) + " restart(s)";
  if (r.builds.size() > 1) s += ", " + std::to_string(distinct_builds(r)) + " builds";
  return s;
}

const RunData* first_run_with(const ReportModel& m, bool (*pred)(const RunData&)) {
  for (const auto& r : m.runs)
    if (pred(r)) return &r;
  return nullptr;
}

bool section_has(const ReportModel& m, const std::string& section) {
  return std::any_of(m.charts.begin(), m.charts.end(), [&](const ChartOut& c) { return c.section == section; });
}

void charts_html(Html& h, const ReportModel& m, const std::string& section) {
  h << "<div class=\"charts\">";
  for (const auto& c : m.charts)
    if (c.section == section) h << "<figure>" << c.svg << "</figure>";
  h << "</div>";
}

const json* plans_of(const RunData& r) {
  if (r.plans.is_object() && r.plans.contains("plans") && r.plans["plans"].is_array() && !r.plans["plans"].empty())
    return &r.plans["plans"];
  return nullptr;
}

// Rows of layout_predict.json (bench/layout_predict.sh), or null.
const json* layout_rows_of(const RunData& r) {
  const json& lp = r.layout_predict;
  if (lp.is_object() && lp.contains("rows") && lp["rows"].is_array() && !lp["rows"].empty()) return &lp["rows"];
  return nullptr;
}

// One table row of a layout: {layout, ranks, predicted s, measured s, error, the error of the prediction learned from
// the bench's runs (calibrate --from-runs; n/a without it), spread between the bench's rounds, predicted memory,
// measured memory, error, background cores}; memory in MiB (these runs hold tens of MiB).
std::vector<std::string> layout_cells(const json& row) {
  auto mib = [&](const char* k) { return num_or_nan(row, k) * 1024; };
  auto layout = row.find("layout");  // value() would throw a raw type_error for a non-string
  return {layout != row.end() && layout->is_string() ? layout->get<std::string>() : std::string(),
          json_cell(row.value("ranks", json())),
          fmt_or_na(num_or_nan(row, "predicted_step_s"), "s"),
          fmt_or_na(num_or_nan(row, "measured_step_s"), "s"),
          signed_fmt(num_or_nan(row, "step_error_pct"), "%"),
          signed_fmt(num_or_nan(row, "learned_step_error_pct"), "%"),
          fmt_or_na(num_or_nan(row, "round_spread_pct"), "%"),
          fmt_or_na(mib("predicted_mem_gib"), "MiB"),
          fmt_or_na(mib("measured_mem_gib"), "MiB"),
          signed_fmt(num_or_nan(row, "mem_error_pct"), "%"),
          fmt_or_na(num_or_nan(row, "background_cores"), "")};
}
const char* const kLayoutHeads[] = {"layout",          "ranks",         "predicted step",    "measured step",
                                    "error",           "learned error", "spread (rounds)",   "predicted memory",
                                    "measured memory", "error",         "other load (cores)"};

// "step time: mean |error| 12.3 %, max 40.1 %, 20/24 within 15 %; memory: ...; learned from the 12 layouts of 2
// ranks, the other layouts' step time: ..."
std::string layout_summary(const json& lp) {
  std::string out;
  if (!lp.contains("summary") || !lp["summary"].is_object()) return out;
  const json& s = lp["summary"];
  double target = num_or_nan(s, "target_pct");
  auto figures = [&](const json& st) {
    return "mean |error| " + fmt_or_na(num_or_nan(st, "mean_abs_pct"), "%") + ", max " +
           fmt_or_na(num_or_nan(st, "max_abs_pct"), "%") + ", " + json_cell(st.value("within_target", json())) + "/" +
           json_cell(st.value("n", json())) + " within " + fmt_or_na(target, "%");
  };
  for (const char* k : {"step", "memory"}) {
    if (!s.contains(k) || !s[k].is_object()) continue;
    out += std::string(out.empty() ? "" : "; ") + (std::string(k) == "step" ? "step time" : "memory") + ": " +
           figures(s[k]);
  }
  if (s.contains("learned") && s["learned"].is_object()) {
    const json& l = s["learned"];
    const json held = l.value("step_held_out", json());
    std::string factors;  // what the refit changed: compute (or GEMM, attention, memory) and link tiers
    if (l.contains("factors") && l["factors"].is_object())
      for (const auto& [name, f] : l["factors"].items())
        if (f.is_number()) factors += (factors.empty() ? "" : ", ") + name + " x" + strprintf("%.3g", f.get<double>());
    // The GEMM table learned at the runs' matmul shapes (bench files written before it lack the count).
    if (l.contains("gemm_shapes") && l["gemm_shapes"].is_number() && l["gemm_shapes"].get<double>() > 0)
      factors += strprintf("%sGEMM table at %.0f shapes", factors.empty() ? "" : ", ", l["gemm_shapes"].get<double>());
    if (held.is_object() && l.contains("fit_on") && l["fit_on"].is_string())
      out += "; learned from " + l["fit_on"].get<std::string>() + " (calibrate --from-runs" +
             (factors.empty() ? "" : ": " + factors) + "), the other layouts' step time: " + figures(held);
  }
  return out;
}

// cairn-train --profile-kernels (train/kernel_profile.json): each op's calls and seconds summed over the ranks,
// longest first (records::kernel_profile_totals), and the steps they cover.
struct KernelOps : records::KernelProfileTotals {
  double steps = kNaN;
};
using KernelOp = records::KernelOpTotal;
std::optional<KernelOps> kernel_ops_of(const RunData& r) {
  KernelOps k;
  static_cast<records::KernelProfileTotals&>(k) = records::kernel_profile_totals(r.kernel_profile);
  if (k.ops.empty()) return std::nullopt;
  k.steps = num_or_nan(r.kernel_profile, "steps");
  return k;
}
// Table cells of one op: op, calls, seconds, share, microseconds per call, milliseconds per step and rank.
std::vector<std::string> kernel_cells(const KernelOps& k, const KernelOp& op) {
  const double per_step = k.steps > 0 && k.ranks > 0 ? op.seconds / k.steps / k.ranks : kNaN;
  return {op.op,
          std::to_string(std::llround(op.calls)),
          fmt_or_na(op.seconds, "s"),
          fmt_or_na(k.seconds > 0 ? 100 * op.seconds / k.seconds : kNaN, "%"),
          fmt_or_na(op.calls > 0 ? 1e6 * op.seconds / op.calls : kNaN, ""),
          fmt_or_na(1e3 * per_step, "")};
}
const char* const kKernelHeads[] = {"op", "calls", "time", "share", "us per call", "ms per step and rank"};
constexpr size_t kKernelRows = 15;  // the rest is summed into one row
// "12 ops, 3.9 s over 2 ranks and 20 steps (97.9 ms per step and rank)"
std::string kernel_summary(const KernelOps& k) {
  std::string s = std::to_string(k.ops.size()) + " ops, " + fmt_or_na(k.seconds, "s") + " over " +
                  format_value(k.ranks, "", 6) + " rank(s)";
  if (k.steps > 0)
    s += " and " + format_value(k.steps, "", 9) + " steps (" + fmt_or_na(1e3 * k.seconds / k.steps / k.ranks, "") +
         " ms per step and rank)";
  return s + "; every op synchronized after its call";
}
// The rows shown: the longest kKernelRows ops, then the rest as one "(N other ops)" row.
std::vector<KernelOp> kernel_rows(const KernelOps& k) {
  std::vector<KernelOp> rows(k.ops.begin(), k.ops.begin() + std::min(k.ops.size(), kKernelRows));
  if (k.ops.size() > kKernelRows) {
    KernelOp rest{"(" + std::to_string(k.ops.size() - kKernelRows) + " other ops)", 0, 0};
    for (size_t i = kKernelRows; i < k.ops.size(); ++i) rest.calls += k.ops[i].calls, rest.seconds += k.ops[i].seconds;
    rows.push_back(rest);
  }
  return rows;
}

// A pipelined run's stages (stage_rows in catalog.h), one table row each.
const char* const kStageHeads[] = {"stage", "compute", "pipeline wait", "critical (% of steps)"};
std::vector<std::string> stage_cells(const StageRow& s) {
  return {std::to_string(s.stage), fmt_or_na(s.busy, "s"), fmt_or_na(s.wait, "s"), fmt_or_na(s.critical_pct, "%")};
}
const char* const kStageNote =
    "Medians after the warm-up; each stage as its busiest rank timed it (cairn-train's per-stage split). The "
    "critical stage's wait is the bubble and transfers; another stage's also holds its slack.";

// ---- The parts of render_html, one per region of the page, in page order.

void html_head_and_header(Html& h, const ReportModel& m, const Provenance& prov) {
  h << "<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n<head>\n"
    << "<meta charset=\"utf-8\"/>\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"/>\n"
    << "<meta name=\"generator\" content=\"cairn-report " << xml_escape(cairn_version()) << "\"/>\n"
    << "<title>cairn report: " << xml_escape(m.title) << "</title>\n<style>" << kCss << "</style>\n</head>\n<body>\n";
  h << "<header><h1>cairn report: " << xml_escape(m.title) << "</h1><p>" << std::to_string(m.runs.size()) << " run(s)"
    << (m.baseline >= 0 ? ", baseline " + xml_escape(m.runs[static_cast<size_t>(m.baseline)].name) : "")
    << " &#183; generated " << xml_escape(prov.time_utc.empty() ? utc_now_iso8601() : prov.time_utc) << " on "
    << xml_escape(prov.host.empty() ? hostname_string() : prov.host) << " by cairn-report "
    << xml_escape(cairn_version()) << " (" << xml_escape(cairn_git_sha()) << ")</p></header>\n";
}

// Whether the page has an Evaluation / Plan / Data / Layouts section (the tables show without charts too).
bool has_eval_section(const ReportModel& m) {
  return first_run_with(m, [](const RunData& r) { return !r.eval.empty(); }) != nullptr;
}
bool has_plan_section(const ReportModel& m) {
  return first_run_with(m, [](const RunData& r) { return plans_of(r) != nullptr; }) != nullptr;
}
bool has_data_section(const ReportModel& m) {
  return section_has(m, "data") || first_run_with(m, [](const RunData& r) { return r.has("data"); });
}
bool has_layouts_section(const ReportModel& m) {
  return first_run_with(m, [](const RunData& r) { return layout_rows_of(r) != nullptr; }) != nullptr;
}
bool has_kernels_section(const ReportModel& m) {
  return first_run_with(m, [](const RunData& r) { return kernel_ops_of(r).has_value(); }) != nullptr;
}

void html_nav(Html& h, const ReportModel& m) {
  h << "<nav><a href=\"#gates\">Gates</a><a href=\"#runs\">Runs</a><a href=\"#comparison\">Comparison</a>";
  for (const char* s : {"train", "eval", "sweep", "plan", "data"}) {
    static const std::map<std::string, std::string> names{
        {"train", "Training"}, {"eval", "Evaluation"}, {"sweep", "Collectives"}, {"plan", "Plan"}, {"data", "Data"}};
    bool has = section_has(m, s) || (std::string(s) == "plan" && has_plan_section(m)) ||
               (std::string(s) == "eval" && has_eval_section(m)) || (std::string(s) == "data" && has_data_section(m));
    if (has) h << "<a href=\"#" << s << "\">" << names.at(s) << "</a>";
  }
  if (has_layouts_section(m)) h << "<a href=\"#layouts\">Layouts</a>";
  if (has_kernels_section(m)) h << "<a href=\"#kernels\">Kernels</a>";
  h << "</nav>\n<main>\n";
}

// Verdict banner and the table of gate checks.
void html_gates(Html& h, const ReportModel& m) {
  size_t failed = m.gates_failed();
  h << "<section id=\"gates\"><h2>Gates</h2>";
  if (m.gates.empty()) h << "<div class=\"banner none\">No gates configured ([report.gates] is empty).</div>";
  else if (failed == 0)
    h << "<div class=\"banner pass\">PASS: all " << std::to_string(m.gates.size()) << " gate checks passed.</div>";
  else
    h << "<div class=\"banner fail\">FAIL: " << std::to_string(failed) << " of " << std::to_string(m.gates.size())
      << " gate checks failed (exit code 3).</div>";
  if (!m.gates.empty()) {
    h << "<div class=\"scroll\"><table><thead><tr><th class=\"l\">verdict</th><th class=\"l\">metric</th><th "
         "class=\"l\">run</th><th class=\"l\">rule</th><th>baseline</th><th>value</th><th>limit</th><th "
         "class=\"l\">reason</th></tr></thead><tbody>";
    for (const auto& g : m.gates) {
      h << "<tr><td class=\"l " << (g.pass ? "pass" : "fail") << "\">" << (g.pass ? "PASS" : "FAIL")
        << "</td><td class=\"l\"><code>" << xml_escape(g.metric) << "</code></td><td class=\"l\">" << xml_escape(g.run)
        << "</td><td class=\"l\"><code>" << xml_escape(g.rule) << "</code></td><td>"
        << fmt_or_na(g.baseline, g.unit, g.digits) << "</td><td>" << fmt_or_na(g.value, g.unit, g.digits) << "</td><td>"
        << xml_escape(g.limit_text.empty() ? "n/a" : g.limit_text) << "</td><td class=\"wrap\">" << xml_escape(g.reason)
        << "</td></tr>";
    }
    h << "</tbody></table></div>";
  }
  h << "</section>\n";
}

// The runs, which stages and files each lacks, and the problems found reading them.
void html_runs(Html& h, const ReportModel& m) {
  h << "<section id=\"runs\"><h2>Runs</h2><div class=\"scroll\"><table><thead><tr><th class=\"l\">run</th><th "
       "class=\"l\">directory</th><th class=\"l\">stages</th><th class=\"l\">not present</th><th "
       "class=\"l\">training</th><th class=\"l\">missing files</th><th>problems</th></tr></thead><tbody>";
  for (size_t i = 0; i < m.runs.size(); ++i) {
    const auto& r = m.runs[i];
    const std::string color = run_color(m.runs, m.baseline, i, m.inputs.chart_settings.chart_runs);
    h << "<tr><td class=\"l\">";
    if (!color.empty()) h << "<span style=\"color:" << xml_escape(color) << "\">&#9632;</span> ";
    else h << "<span class=\"muted\" title=\"not drawn in the overlaid charts\">&#9633;</span> ";
    h << xml_escape(run_label(r)) << "</td><td class=\"l\"><code>" << xml_escape(r.dir)
      << "</code></td><td class=\"l\">" << xml_escape(stage_list(r)) << "</td><td class=\"l muted\">"
      << xml_escape(absent_list(r)) << "</td><td class=\"l\">" << xml_escape(train_status(r))
      << "</td><td class=\"wrap\">";
    for (size_t k = 0; k < r.missing.size(); ++k)
      h << (k ? "<br/>" : "") << "<code>" << xml_escape(r.missing[k]) << "</code>";
    h << "</td><td>" << std::to_string(r.problem_count) << "</td></tr>";
  }
  h << "</tbody></table></div>";
  for (const auto& r : m.runs) {
    if (r.problem_count == 0) continue;
    h << "<h3>Problems in " << xml_escape(r.name) << " (" << std::to_string(r.problem_count)
      << ")</h3><ul class=\"problems\">";
    for (const auto& p : r.problems) h << "<li>" << xml_escape(p) << "</li>";
    if (r.problem_count > r.problems.size())
      h << "<li>... and " << std::to_string(r.problem_count - r.problems.size()) << " more</li>";
    h << "</ul>";
  }
  h << "</section>\n";
}

// The baseline's value of a metric, or NaN (no baseline, or the baseline lacks it).
double baseline_value(const ReportModel& m, const std::string& metric) {
  if (m.baseline < 0) return kNaN;
  const auto& base_metrics = m.metrics[static_cast<size_t>(m.baseline)];
  auto b = base_metrics.find(metric);
  return b != base_metrics.end() ? b->second.value : kNaN;
}

// One cell of the comparison table: value, best (grey), change against the baseline (coloured).
void html_comparison_cell(Html& h, const ReportModel& m, size_t run, const MetricDef& d, double base) {
  auto it = m.metrics[run].find(d.name);
  if (it == m.metrics[run].end()) {
    h << "<td class=\"muted\">n/a</td>";
    return;
  }
  const MetricValue& v = it->second;
  h << "<td>" << xml_escape(fmt_or_na(v.value, d.unit));
  if (std::isfinite(v.best) && std::fabs(v.best - v.value) > 1e-12 * std::max(1.0, std::fabs(v.value)))
    h << " <span class=\"small muted\">(best " << xml_escape(fmt_or_na(v.best, d.unit)) << ")</span>";
  if (m.baseline >= 0 && static_cast<int>(run) != m.baseline && std::isfinite(base)) {
    Verdict vd = compare(v.value, base, d.better);
    double delta = v.value - base;
    std::string text = vd == Verdict::Same ? "="
                       : base != 0         ? signed_fmt(delta / std::fabs(base) * 100, "%")
                                           : signed_fmt(delta, d.unit);
    h << " <span class=\"small " << verdict_word(vd) << "\" title=\""
      << xml_escape(std::string(verdict_word(vd)) + " " + signed_fmt(delta, d.unit)) << "\">" << xml_escape(text)
      << (vd == Verdict::Better  ? " &#9650;"
          : vd == Verdict::Worse ? " &#9660;"
                                 : "")
      << "</span>";
  }
  h << "</td>";
}

void html_comparison(Html& h, const ReportModel& m) {
  h << "<section id=\"comparison\"><h2>Comparison</h2>";
  if (m.table_metrics.empty()) h << "<p class=\"muted\">No metrics found in any run.</p>";
  else {
    h << "<p class=\"small muted\">Final values"
      << (m.baseline >= 0 ? "; change against the baseline, coloured by whether it is better or worse" : "")
      << "; small grey: best over the run.</p><div class=\"scroll\"><table><thead><tr><th class=\"l\">metric</th>";
    for (const auto& r : m.runs) h << "<th>" << xml_escape(run_label(r)) << "</th>";
    h << "</tr></thead><tbody>";
    for (const auto& d : m.table_metrics) {
      h << "<tr><td class=\"l\"><code>" << xml_escape(d.name) << "</code>"
        << (d.unit.empty() ? "" : " <span class=\"muted small\">[" + xml_escape(d.unit) + "]</span>") << "</td>";
      const double base = baseline_value(m, d.name);
      for (size_t i = 0; i < m.runs.size(); ++i) html_comparison_cell(h, m, i, d, base);
      h << "</tr>";
    }
    h << "</tbody></table></div>";
  }
  h << "</section>\n";
}

// Latest result per task/metric and run, then the curves of metrics evaluated more than once.
void html_eval(Html& h, const ReportModel& m) {
  h << "<section id=\"eval\"><h2>Evaluation</h2><div class=\"scroll\"><table><thead><tr><th class=\"l\">task</th><th "
       "class=\"l\">metric</th>";
  for (const auto& r : m.runs) h << "<th>" << xml_escape(run_label(r)) << "</th>";
  h << "</tr></thead><tbody>";
  std::map<std::pair<std::string, std::string>, std::map<size_t, const EvalRecord*>> latest;
  for (size_t i = 0; i < m.runs.size(); ++i)
    for (const auto& e : m.runs[i].eval) {
      const EvalRecord*& slot = latest[{e.task, e.metric}][i];
      if (!slot || !(e.step < slot->step)) slot = &e;
    }
  for (const auto& [key, per_run] : latest) {
    h << "<tr><td class=\"l\">" << xml_escape(key.first) << "</td><td class=\"l\">" << xml_escape(key.second)
      << "</td>";
    for (size_t i = 0; i < m.runs.size(); ++i) {
      auto it = per_run.find(i);
      if (it == per_run.end()) {
        h << "<td class=\"muted\">n/a</td>";
        continue;
      }
      const EvalRecord& e = *it->second;
      h << "<td>" << xml_escape(format_value(e.value, "", 4));
      if (std::isfinite(e.stderr_value))
        h << " <span class=\"small muted\">&#177; " << xml_escape(format_value(e.stderr_value, "", 2)) << "</span>";
      if (std::isfinite(e.step))
        h << " <span class=\"small muted\">@" << xml_escape(format_value(e.step, "", 6)) << "</span>";
      h << "</td>";
    }
    h << "</tr>";
  }
  h << "</tbody></table></div>";
  charts_html(h, m, "eval");
  h << "</section>\n";
}

// "type op root N" of a fitted sweep block: op when it has one (not "none"), root when not -1.
std::string sweep_fit_variant(const json& f) {
  auto str = [&](const char* k) {
    auto it = f.find(k);
    return it != f.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  std::string variant = str("type");
  std::string op = str("redop");
  if (!op.empty() && op != "none") variant += (variant.empty() ? "" : " ") + op;
  auto root = f.find("root");
  if (root != f.end() && root->is_number_integer() && root->get<long long>() >= 0)
    variant += " root " + std::to_string(root->get<long long>());
  return variant;
}

void html_sweep(Html& h, const ReportModel& m) {
  h << "<section id=\"sweep\"><h2>Collectives (cairn-sweep)</h2>";
  charts_html(h, m, "sweep");
  h << "<h3>Fitted alpha-beta models</h3><div class=\"scroll\"><table><thead><tr><th class=\"l\">run</th><th "
       "class=\"l\">collective</th><th class=\"l\">tier</th><th class=\"l\">type / op</th><th>alpha</th><th>busbw "
       "(beta)</th><th>r&#178;</th><th>half peak at</th><th>peak busbw</th></tr></thead><tbody>";
  for (const auto& r : m.runs) {
    const json* fits = sweep_fits(r.sweep);
    if (!fits) continue;
    for (const auto& f : *fits) {
      if (!f.is_object()) continue;
      h << "<tr><td class=\"l\">" << xml_escape(r.name) << "</td><td class=\"l\">"
        << xml_escape(json_cell(f.value("collective", json()))) << "</td><td class=\"l\">"
        << xml_escape(json_cell(f.value("tier", json("world")))) << "</td><td class=\"l\">"
        << xml_escape(sweep_fit_variant(f)) << "</td><td>" << xml_escape(fmt_or_na(num_or_nan(f, "alpha_us"), "us"))
        << "</td><td>" << xml_escape(fmt_or_na(num_or_nan(f, "busbw_gbps"), "GB/s")) << "</td><td>"
        << xml_escape(fmt_or_na(num_or_nan(f, "r2"), "")) << "</td><td>"
        << xml_escape(fmt_or_na(num_or_nan(f, "half_peak_bytes"), "B")) << "</td><td>"
        << xml_escape(fmt_or_na(num_or_nan(f, "peak_busbw_gbps"), "GB/s")) << "</td></tr>";
    }
  }
  h << "</tbody></table></div></section>\n";
}

// The table of a run's top plans; the plan the training used (when it matched one) highlighted.
void html_top_plans_table(Html& h, const ReportModel& m, const RunData& r, const json& plans, const json& used,
                          bool matched) {
  h << "<h3>Top plans: " << xml_escape(run_label(r)) << "</h3><div class=\"scroll\"><table><thead><tr><th>#</th>";
  static const std::vector<std::pair<const char*, const char*>> cols{{"dp", ""},        {"tp", ""}, {"pp", ""},
                                                                     {"v", ""},         {"mb", ""}, {"zero", ""},
                                                                     {"recompute", ""}, {"sp", ""}};
  for (const auto& [k, u] : cols) h << "<th>" << k << "</th>";
  h << "<th>step time</th><th>tokens/s</th><th>TFLOP/s/GPU</th><th>MFU</th><th>memory</th></tr></thead><tbody>";
  int n = 0;
  for (const auto& p : plans) {
    if (n >= m.inputs.top_plans) break;
    if (!p.is_object()) continue;
    bool is_used = matched && p == used;
    h << "<tr" << (is_used ? " style=\"background:#eef6ff\" title=\"used by the training run\"" : "") << "><td>"
      << std::to_string(++n) << (is_used ? " &#10003;" : "") << "</td>";
    for (const auto& [k, u] : cols) h << "<td>" << xml_escape(json_cell(p.value(k, json()))) << "</td>";
    h << "<td>" << xml_escape(fmt_or_na(num_or_nan(p, "step_time_s"), "s")) << "</td><td>"
      << xml_escape(fmt_or_na(num_or_nan(p, "tokens_per_s"), "tok/s")) << "</td><td>"
      << xml_escape(fmt_or_na(num_or_nan(p, "tflops_per_gpu"), "")) << "</td><td>"
      << xml_escape(fmt_or_na(as_percent(num_or_nan(p, "mfu")), "%")) << "</td><td>"
      << xml_escape(fmt_or_na(num_or_nan(p, "memory_gib"), "GiB")) << "</td></tr>";
  }
  h << "</tbody></table></div>";
}

// Per run: its top plans (or a pointer to an identical list already shown), and the predicted step time
// of the plan the training used against the measured one.
void html_plan(Html& h, const ReportModel& m) {
  h << "<section id=\"plan\"><h2>Plan (cairn-plan)</h2>";
  std::vector<std::pair<const json*, std::string>> shown;  // plan lists already tabulated
  for (const auto& r : m.runs) {
    const json* plans = plans_of(r);
    if (!plans) continue;
    bool matched = false;
    json used = plan_used_by_training(r, &matched);
    auto same = std::find_if(shown.begin(), shown.end(), [&](const auto& s) { return *s.first == *plans; });
    if (same != shown.end()) {
      h << "<h3>Top plans: " << xml_escape(run_label(r)) << "</h3><p class=\"muted\">Same plans as "
        << xml_escape(same->second) << ".</p>";
    } else {
      shown.emplace_back(plans, r.name);
      html_top_plans_table(h, m, r, *plans, used, matched);
    }
    const auto& run_metrics = m.metrics[static_cast<size_t>(&r - m.runs.data())];
    auto meas = run_metrics.find("step_time_s");
    if (used.is_object() && meas != run_metrics.end()) {
      double pred = num_or_nan(used, "step_time_s");
      double mv = meas->second.value;
      h << "<p>Predicted step time " << xml_escape(fmt_or_na(pred, "s")) << " vs measured median "
        << xml_escape(fmt_or_na(mv, "s")) << " (" << xml_escape(signed_fmt((mv - pred) / pred * 100, "%")) << ")"
        << (matched ? " for the plan the training used."
                    : "; the training's [parallel] did not match a listed plan, compared with the best plan.")
        << "</p>";
    }
  }
  charts_html(h, m, "plan");
  h << "</section>\n";
}

void html_layouts(Html& h, const ReportModel& m) {
  h << "<section id=\"layouts\"><h2>Layouts: predicted vs measured (cairn-plan vs cairn-train)</h2>";
  for (const auto& r : m.runs) {
    const json* rows = layout_rows_of(r);
    if (!rows) continue;
    h << "<h3>" << xml_escape(run_label(r)) << "</h3><p class=\"muted\">"
      << xml_escape(layout_summary(r.layout_predict)) << "</p><div class=\"scroll\"><table><thead><tr>";
    for (const char* c : kLayoutHeads)
      h << "<th" << (c == kLayoutHeads[0] ? " class=\"l\"" : "") << ">" << c << "</th>";
    h << "</tr></thead><tbody>";
    for (const auto& row : *rows) {
      if (!row.is_object()) continue;
      auto cells = layout_cells(row);
      h << "<tr" << (row.contains("error") ? " title=\"" + xml_escape(json_cell(row["error"])) + "\"" : "") << ">";
      for (size_t k = 0; k < cells.size(); ++k)
        h << "<td" << (k == 0 ? " class=\"l\"" : "") << ">" << xml_escape(cells[k]) << "</td>";
      h << "</tr>";
    }
    h << "</tbody></table></div>";
  }
  h << "</section>\n";
}

void html_kernels(Html& h, const ReportModel& m) {
  h << "<section id=\"kernels\"><h2>Kernel time (cairn-train --profile-kernels)</h2>";
  for (const auto& r : m.runs) {
    const auto k = kernel_ops_of(r);
    if (!k) continue;
    h << "<h3>" << xml_escape(run_label(r)) << "</h3><p class=\"muted\">" << xml_escape(kernel_summary(*k))
      << "</p><div class=\"scroll\"><table><thead><tr>";
    for (const char* c : kKernelHeads)
      h << "<th" << (c == kKernelHeads[0] ? " class=\"l\"" : "") << ">" << c << "</th>";
    h << "</tr></thead><tbody>";
    for (const auto& op : kernel_rows(*k)) {
      const auto cells = kernel_cells(*k, op);
      h << "<tr>";
      for (size_t c = 0; c < cells.size(); ++c)
        h << "<td" << (c == 0 ? " class=\"l\"" : "") << ">" << xml_escape(cells[c]) << "</td>";
      h << "</tr>";
    }
    h << "</tbody></table></div>";
  }
  h << "</section>\n";
}

// A mixture's table rows: source, weight, realised weight, tokens, documents, epochs.
std::vector<std::string> mixture_cells(const json& s) {
  auto num = [&](const char* k) { return s.contains(k) && s[k].is_number() ? s[k].get<double>() : kNaN; };
  return {s.value("path", ""),
          fmt_or_na(num("weight"), ""),
          fmt_or_na(num("realised_weight"), ""),
          fmt_or_na(num("tokens"), "tok"),
          fmt_or_na(num("documents"), ""),
          fmt_or_na(num("epochs"), "")};
}
const char* const kMixtureHeads[] = {"source", "weight", "realised", "tokens", "documents", "epochs"};

// "windows of N x T tokens: worst |share - weight| D (mean E) over W windows" per measured size.
std::vector<std::string> mixture_window_lines(const json& mix) {
  std::vector<std::string> out;
  for (const auto& w : mix.value("windows", json::array())) {
    if (!w.is_object()) continue;
    const std::string size =
        json_cell(w.value("sequences", json())) + " x " + json_cell(mix.value("seq_len", json())) + " tokens";
    if (!w.contains("worst_deviation") || !w["worst_deviation"].is_number()) {
      out.push_back("windows of " + size + ": none fit in a shard");
      continue;
    }
    const json mean = w.value("mean_deviation", json());
    out.push_back("windows of " + size + ": worst |share - weight| " +
                  fmt_or_na(w["worst_deviation"].get<double>(), "") + " (mean " +
                  fmt_or_na(mean.is_number() ? mean.get<double>() : kNaN, "") + ") over " +
                  json_cell(w.value("windows", json())) + " windows");
  }
  return out;
}

void html_mixtures(Html& h, const ReportModel& m) {
  for (const auto& r : m.runs) {
    const json* mix = data_mixture(r);
    if (!mix) continue;
    h << "<h3>Mixture: " << xml_escape(run_label(r)) << "</h3><div class=\"scroll\"><table><thead><tr>";
    for (const char* c : kMixtureHeads)
      h << "<th" << (c == kMixtureHeads[0] ? " class=\"l\"" : "") << ">" << c << "</th>";
    h << "</tr></thead><tbody>";
    for (const auto& s : (*mix)["sources"]) {
      if (!s.is_object()) continue;
      auto cells = mixture_cells(s);
      h << "<tr><td class=\"l\"><code>" << xml_escape(cells[0]) << "</code></td>";
      for (size_t c = 1; c < cells.size(); ++c) h << "<td>" << xml_escape(cells[c]) << "</td>";
      h << "</tr>";
    }
    h << "</tbody></table></div>";
    for (const auto& line : mixture_window_lines(*mix)) h << "<p class=\"muted\">" << xml_escape(line) << "</p>";
  }
}

void html_data(Html& h, const ReportModel& m) {
  h << "<section id=\"data\"><h2>Data (cairn-reshard)</h2><div class=\"scroll\"><table><thead><tr><th "
       "class=\"l\">run</th><th "
       "class=\"l\">dataset</th><th>tokens</th><th>shards</th><th>documents</th><th>bytes/token</th></tr></"
       "thead><tbody>";
  for (size_t i = 0; i < m.runs.size(); ++i) {
    const auto& r = m.runs[i];
    if (!r.has("data")) continue;
    auto get = [&](const char* k) {
      auto it = m.metrics[i].find(k);
      return it == m.metrics[i].end() ? kNaN : it->second.value;
    };
    h << "<tr><td class=\"l\">" << xml_escape(r.name) << "</td><td class=\"l\"><code>" << xml_escape(r.data_dir)
      << "</code></td><td>" << xml_escape(fmt_or_na(get("data_tokens"), "")) << "</td><td>"
      << xml_escape(fmt_or_na(get("data_shards"), "")) << "</td><td>"
      << xml_escape(fmt_or_na(get("data_documents"), "")) << "</td><td>"
      << xml_escape(fmt_or_na(get("data_bytes_per_token"), "")) << "</td></tr>";
  }
  h << "</tbody></table></div>";
  html_mixtures(h, m);
  charts_html(h, m, "data");
  h << "</section>\n";
}

}  // namespace

std::string render_html(const ReportModel& m) {
  Html h;
  h.o.reserve(1 << 20);
  const auto& prov = provenance();
  html_head_and_header(h, m, prov);
  html_nav(h, m);
  html_gates(h, m);
  html_runs(h, m);
  html_comparison(h, m);
  if (section_has(m, "train")) {
    h << "<section id=\"train\"><h2>Training</h2>";
    charts_html(h, m, "train");
    for (const auto& r : m.runs) {
      const auto rows = stage_rows(r, m.inputs.metric_settings);
      if (rows.empty()) continue;
      h << "<h3>Pipeline stages: " << xml_escape(run_label(r)) << "</h3><p class=\"muted\">" << xml_escape(kStageNote)
        << "</p><div class=\"scroll\"><table><thead><tr>";
      for (const char* c : kStageHeads)
        h << "<th" << (c == kStageHeads[0] ? " class=\"l\"" : "") << ">" << c << "</th>";
      h << "</tr></thead><tbody>";
      for (const auto& row : rows) {
        const auto cells = stage_cells(row);
        h << "<tr>";
        for (size_t k = 0; k < cells.size(); ++k)
          h << "<td" << (k == 0 ? " class=\"l\"" : "") << ">" << xml_escape(cells[k]) << "</td>";
        h << "</tr>";
      }
      h << "</tbody></table></div>";
    }
    h << "</section>\n";
  }
  if (has_eval_section(m)) html_eval(h, m);
  if (section_has(m, "sweep")) html_sweep(h, m);
  if (has_plan_section(m)) html_plan(h, m);
  if (has_layouts_section(m)) html_layouts(h, m);
  if (has_kernels_section(m)) html_kernels(h, m);
  if (has_data_section(m)) html_data(h, m);
  h << "</main>\n<footer>Command: <code>" << xml_escape(prov.command_line) << "</code><br/>Built in "
    << xml_escape(format_value(m.seconds, "s", 3)) << ". Charts are inline SVG; this file fetches nothing.</footer>\n";
  h << "</body>\n</html>\n";
  return std::move(h.o);
}

namespace {
std::string md_cell(const std::string& raw) {
  std::string s = plot::valid_utf8(raw), o;
  for (char c : s) {
    if (c == '|') o += "\\|";
    else if (c == '\n') o += ' ';
    else o += c;
  }
  return o;
}
}  // namespace

std::string render_markdown(const ReportModel& m) {
  std::ostringstream os;
  size_t failed = m.gates_failed();
  os << "## cairn report: " << md_cell(m.title) << "\n\n";
  if (m.gates.empty()) os << "No gates configured.\n\n";
  else if (failed == 0) os << "**PASS**: all " << m.gates.size() << " gate checks passed.\n\n";
  else os << "**FAIL**: " << failed << " of " << m.gates.size() << " gate checks failed.\n\n";
  os << "Runs: ";
  for (size_t i = 0; i < m.runs.size(); ++i) os << (i ? ", " : "") << "`" << md_cell(run_label(m.runs[i])) << "`";
  os << "\n\n";
  // Last values of runs that stopped at different steps (or did not finish) are not like for like: said here, as
  // the HTML's run table says it, so a CI log reader sees it too.
  {
    std::string steps;
    bool differ = false, unfinished = false;
    double first = kNaN;
    for (const auto& r : m.runs) {
      if (r.train_records() == 0) continue;
      const double last = r.last_step();
      if (std::isnan(first)) first = last;
      differ = differ || last != first;
      unfinished = unfinished || !r.train_finished;
      if (!steps.empty()) steps += ", ";
      steps += '`';
      steps += md_cell(run_label(r));
      steps += "` ";
      steps += md_cell(train_status(r));
    }
    if (differ || (unfinished && m.runs.size() > 1))
      os << "Note: the runs' training ended at different points (" << steps
         << "); the comparison and gates use each run's last values.\n\n";
  }
  for (const auto& r : m.runs) {
    if (r.builds.size() < 2) continue;
    std::string list;
    for (const auto& b : r.builds) list += (list.empty() ? "git " : ", then ") + b;
    os << "Note: `" << md_cell(run_label(r)) << "` was trained by " << distinct_builds(r) << " builds ("
       << md_cell(list)
       << "): resumed by another build, its curves continue within float32 rounding of the first, not bitwise.\n\n";
  }
  if (!m.gates.empty()) {
    os << "### Gates\n\n| verdict | metric | run | rule | baseline | value | limit | reason |\n"
          "|---|---|---|---|---:|---:|---|---|\n";
    for (const auto& g : m.gates)
      os << "| " << (g.pass ? "PASS" : "**FAIL**") << " | `" << md_cell(g.metric) << "` | " << md_cell(g.run) << " | `"
         << md_cell(g.rule) << "` | " << fmt_or_na(g.baseline, g.unit, g.digits) << " | "
         << fmt_or_na(g.value, g.unit, g.digits) << " | " << md_cell(g.limit_text.empty() ? "n/a" : g.limit_text)
         << " | " << md_cell(g.reason) << " |\n";
    os << "\n";
  }
  // A CI log or a pull-request comment cannot show 200 columns: past [report] chart_runs runs the table has the runs
  // the charts draw (the baseline and the last ones given); index.html and summary.json hold every run.
  const std::vector<size_t> columns = drawn_runs(m.runs.size(), m.baseline, m.inputs.chart_settings.chart_runs);
  if (!m.table_metrics.empty()) {
    os << "### Comparison\n\n";
    if (columns.size() < m.runs.size())
      os << "Columns: " << (m.baseline >= 0 ? "the baseline and the last " : "the last ")
         << columns.size() - (m.baseline >= 0 ? 1 : 0) << " of " << m.runs.size()
         << " runs (`[report] chart_runs`); index.html and summary.json hold every run.\n\n";
    os << "| metric |";
    for (size_t i : columns) os << " " << md_cell(run_label(m.runs[i])) << " |";
    os << "\n|---|";
    for (size_t k = 0; k < columns.size(); ++k) os << "---:|";
    os << "\n";
    for (const auto& d : m.table_metrics) {
      os << "| `" << md_cell(d.name) << "`" << (d.unit.empty() ? "" : " [" + d.unit + "]") << " |";
      double base = kNaN;
      if (m.baseline >= 0) {
        auto b = m.metrics[static_cast<size_t>(m.baseline)].find(d.name);
        if (b != m.metrics[static_cast<size_t>(m.baseline)].end()) base = b->second.value;
      }
      for (size_t i : columns) {
        auto it = m.metrics[i].find(d.name);
        if (it == m.metrics[i].end()) {
          os << " n/a |";
          continue;
        }
        os << " " << md_cell(fmt_or_na(it->second.value, d.unit));
        if (m.baseline >= 0 && static_cast<int>(i) != m.baseline && std::isfinite(base) && base != 0) {
          Verdict vd = compare(it->second.value, base, d.better);
          os << " (" << signed_fmt((it->second.value - base) / std::fabs(base) * 100, "%");
          if (vd == Verdict::Better || vd == Verdict::Worse) os << " " << verdict_word(vd);
          os << ")";
        }
        os << " |";
      }
      os << "\n";
    }
    os << "\n";
  }
  for (size_t i : columns) {
    const RunData& r = m.runs[i];
    const auto rows = stage_rows(r, m.inputs.metric_settings);
    if (rows.empty()) continue;
    os << "### Pipeline stages (" << md_cell(run_label(r)) << ")\n\n" << md_cell(kStageNote) << "\n\n|";
    for (const char* c : kStageHeads) os << " " << c << " |";
    os << "\n|---|---:|---:|---:|\n";
    for (const auto& row : rows) {
      os << "|";
      for (const auto& c : stage_cells(row)) os << " " << md_cell(c) << " |";
      os << "\n";
    }
    os << "\n";
  }
  for (size_t i : columns) {
    const RunData& r = m.runs[i];
    const json* rows = layout_rows_of(r);
    if (!rows) continue;
    os << "### Layouts: predicted vs measured (" << md_cell(run_label(r)) << ")\n\n"
       << md_cell(layout_summary(r.layout_predict)) << "\n\n|";
    for (const char* c : kLayoutHeads) os << " " << c << " |";
    os << "\n|---|";
    for (size_t k = 1; k < std::size(kLayoutHeads); ++k) os << "---:|";
    os << "\n";
    for (const auto& row : *rows) {
      if (!row.is_object()) continue;
      os << "|";
      for (const auto& c : layout_cells(row)) os << " " << md_cell(c) << " |";
      os << "\n";
    }
    os << "\n";
  }
  for (size_t i : columns) {
    const RunData& r = m.runs[i];
    const auto k = kernel_ops_of(r);
    if (!k) continue;
    os << "### Kernel time (" << md_cell(run_label(r)) << ")\n\n" << md_cell(kernel_summary(*k)) << "\n\n|";
    for (const char* c : kKernelHeads) os << " " << c << " |";
    os << "\n|---|---:|---:|---:|---:|---:|\n";
    for (const auto& op : kernel_rows(*k)) {
      const auto cells = kernel_cells(*k, op);
      os << "| `" << md_cell(cells[0]) << "` |";
      for (size_t c = 1; c < cells.size(); ++c) os << " " << md_cell(cells[c]) << " |";
      os << "\n";
    }
    os << "\n";
  }
  for (size_t i : columns) {
    const RunData& r = m.runs[i];
    const json* mix = data_mixture(r);
    if (!mix) continue;
    os << "### Data mixture (" << md_cell(run_label(r)) << ")\n\n|";
    for (const char* c : kMixtureHeads) os << " " << c << " |";
    os << "\n|---|---:|---:|---:|---:|---:|\n";
    for (const auto& s : (*mix)["sources"]) {
      if (!s.is_object()) continue;
      auto cells = mixture_cells(s);
      os << "| `" << md_cell(cells[0]) << "` |";
      for (size_t c = 1; c < cells.size(); ++c) os << " " << md_cell(cells[c]) << " |";
      os << "\n";
    }
    os << "\n";
    for (const auto& line : mixture_window_lines(*mix)) os << "- " << md_cell(line) << "\n";
    os << "\n";
  }
  bool any_missing = false;
  for (const auto& r : m.runs) any_missing |= !r.missing.empty() || r.problem_count > 0;
  if (any_missing) {
    os << "### Missing pieces and problems\n\n";
    for (const auto& r : m.runs) {
      for (const auto& miss : r.missing) os << "- `" << md_cell(r.name) << "`: missing `" << md_cell(miss) << "`\n";
      for (const auto& p : r.problems) os << "- `" << md_cell(r.name) << "`: " << md_cell(p) << "\n";
      if (r.problem_count > r.problems.size())
        os << "- `" << md_cell(r.name) << "`: ... and " << (r.problem_count - r.problems.size()) << " more problems\n";
    }
    os << "\n";
  }
  os << "_" << m.charts.size() << " charts in `report/index.html`; every number in `report/summary.json`._\n";
  const Provenance prov = provenance();
  os << "\n_" << md_cell(prov.tool) << " " << md_cell(prov.version) << " (git " << md_cell(prov.git_sha) << ") on "
     << md_cell(prov.host) << ", " << md_cell(prov.time_utc) << ": `" << md_cell(prov.command_line) << "`_\n";
  return os.str();
}

json render_json(const ReportModel& m) {
  json j;
  j["provenance"] = provenance().to_json();
  j["title"] = m.title;
  j["verdict"] = m.gates.empty() ? "no gates" : m.gates_failed() ? "fail" : "pass";
  j["exit_code"] = m.gates_failed() ? 3 : 0;
  j["gates_failed"] = m.gates_failed();
  j["gates_total"] = m.gates.size();
  j["baseline"] = m.baseline >= 0 ? json(m.runs[static_cast<size_t>(m.baseline)].name) : json(nullptr);
  j["settings"] = {{"smooth", m.inputs.metric_settings.smooth},
                   {"warmup_frac", m.inputs.metric_settings.warmup_frac},
                   {"max_points", m.inputs.chart_settings.max_points}};
  json runs = json::array();
  for (size_t i = 0; i < m.runs.size(); ++i) {
    const auto& r = m.runs[i];
    json jr;
    jr["name"] = r.name;
    jr["dir"] = r.dir;
    jr["baseline"] = r.is_baseline;
    jr["stages"] = r.present;
    std::vector<std::string> absent;
    for (const char* st : {"sweep", "plan", "data", "train", "eval"})
      if (!r.has(st)) absent.emplace_back(st);
    jr["absent_stages"] = absent;
    jr["missing"] = r.missing;
    jr["problems"] = r.problems;
    jr["problem_count"] = r.problem_count;
    jr["train_records"] = r.train_records();
    jr["val_records"] = r.val_records();
    jr["eval_records"] = r.eval.size();
    jr["train_finished"] = r.train_finished;
    jr["restarts_at_step"] = r.restarts;
    jr["trained_by_builds"] = r.builds;
    json met = json::object();
    for (const auto& [name, v] : m.metrics[i]) {
      auto def = resolve_metric(name);
      met[name] = {{"value", v.value}, {"best", v.best}, {"unit", def ? def->unit : ""}};
    }
    jr["metrics"] = met;
    bool matched = false;
    json used = plan_used_by_training(r, &matched);
    if (used.is_object()) jr["plan_used"] = {{"plan", used}, {"matched_config", matched}};
    // The numbers of the plan, sweep-fit and eval tables too.
    if (const json* plans = plans_of(r)) {
      json top = json::array();
      for (const auto& p : *plans) {
        if (static_cast<int>(top.size()) >= m.inputs.top_plans) break;
        json row = p;
        if (row.is_object()) row.erase("breakdown");
        top.push_back(row);
      }
      jr["top_plans"] = top;
    }
    if (const json* fits = sweep_fits(r.sweep)) jr["sweep_fits"] = *fits;
    if (const json* mix = data_mixture(r)) jr["data_mixture"] = *mix;
    if (layout_rows_of(r)) {
      json lp = r.layout_predict;
      lp.erase("provenance");
      jr["layout_predict"] = lp;
    }
    if (const auto rows = stage_rows(r, m.inputs.metric_settings); !rows.empty()) {
      json st = json::array();
      for (const auto& row : rows)
        st.push_back({{"stage", row.stage},
                      {"compute_s", std::isfinite(row.busy) ? json(row.busy) : json()},
                      {"pp_wait_s", std::isfinite(row.wait) ? json(row.wait) : json()},
                      {"critical_pct", std::isfinite(row.critical_pct) ? json(row.critical_pct) : json()}});
      jr["pipeline_stages"] = st;
    }
    if (const auto k = kernel_ops_of(r)) {  // summed over ranks, longest first
      json ops = json::array();
      for (const auto& op : k->ops) ops.push_back({{"op", op.op}, {"calls", op.calls}, {"seconds", op.seconds}});
      jr["kernel_profile"] = {{"ranks", k->ranks},
                              {"steps", k->steps > 0 ? json(k->steps) : json()},
                              {"seconds", k->seconds},
                              {"ops", ops}};
    }
    json ev = json::array();
    for (const auto& e : r.eval)
      ev.push_back(
          {{"step", e.step}, {"task", e.task}, {"metric", e.metric}, {"value", e.value}, {"stderr", e.stderr_value}});
    if (!ev.empty()) jr["eval"] = ev;
    runs.push_back(jr);
  }
  j["runs"] = runs;
  json cmp = json::array();
  for (const auto& d : m.table_metrics) {
    json row;
    row["metric"] = d.name;
    row["unit"] = d.unit;
    row["better"] = d.better == Better::Lower ? "lower" : d.better == Better::Higher ? "higher" : "neither";
    double base = kNaN;
    if (m.baseline >= 0) {
      auto b = m.metrics[static_cast<size_t>(m.baseline)].find(d.name);
      if (b != m.metrics[static_cast<size_t>(m.baseline)].end()) base = b->second.value;
    }
    json vals = json::object();
    for (size_t i = 0; i < m.runs.size(); ++i) {
      auto it = m.metrics[i].find(d.name);
      if (it == m.metrics[i].end()) {
        vals[m.runs[i].name] = nullptr;
        continue;
      }
      json c = {{"value", it->second.value}, {"best", it->second.best}};
      if (m.baseline >= 0 && static_cast<int>(i) != m.baseline && std::isfinite(base)) {
        c["delta"] = it->second.value - base;
        c["delta_pct"] = base != 0 ? json((it->second.value - base) / std::fabs(base) * 100) : json(nullptr);
        c["verdict"] = verdict_word(compare(it->second.value, base, d.better));
      }
      vals[m.runs[i].name] = c;
    }
    row["runs"] = vals;
    cmp.push_back(row);
  }
  j["comparison"] = cmp;
  json gates = json::array();
  for (const auto& g : m.gates)
    gates.push_back({{"metric", g.metric},
                     {"run", g.run},
                     {"rule", g.rule},
                     {"unit", g.unit},
                     {"baseline", g.baseline},
                     {"value", g.value},
                     {"limit", g.limit},
                     {"limit_text", g.limit_text},
                     {"verdict", g.pass ? "pass" : "fail"},
                     {"reason", g.reason}});
  j["gates"] = gates;
  json charts = json::array();
  for (const auto& c : m.charts)
    charts.push_back(
        {{"id", c.id}, {"section", c.section}, {"title", c.title}, {"points", c.points}, {"series", c.series}});
  j["charts"] = charts;
  j["build_seconds"] = m.seconds;
  return j;
}

}  // namespace cairn::report
