// cairn-report's pipeline: inputs from the config, runs read in parallel, metrics, gates, charts, files.
#include "report.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <set>

#include "cairn/cli.h"
#include "cairn/error.h"
#include "cairn/files.h"
#include "cairn/log.h"
#include "cairn/sections/report.h"
#include "cairn/sections/run.h"
#include "cairn/stale_temps.h"

namespace cairn::report {
namespace fs = std::filesystem;

namespace {

std::string canonical(const std::string& p) {
  std::error_code ec;
  auto c = fs::weakly_canonical(p, ec);
  return ec ? p : c.string();
}

}  // namespace

size_t ReportModel::gates_failed() const {
  return static_cast<size_t>(std::count_if(gates.begin(), gates.end(), [](const GateResult& g) { return !g.pass; }));
}

ReportInputs report_inputs(const Config& cfg, const std::vector<std::string>& cli_runs) {
  ReportInputs in;
  in.gates = parse_gates(cfg);
  const ReportSection rs = read_section<ReportSection>(cfg);
  in.runs = rs.runs;
  for (const auto& r : cli_runs) in.runs.push_back(r);
  in.baseline = rs.baseline;
  if (in.runs.empty() && in.baseline.empty())
    throw UsageError("no run directories given (pass them as arguments or set [report] runs)");
  for (const auto& d : in.runs)
    if (!fs::is_directory(d))
      throw UsageError(file_message("cannot open run directory", d,
                                    fs::exists(d) ? "Not a directory" : "No such file or directory"));
  if (!in.baseline.empty() && !fs::is_directory(in.baseline))
    throw UsageError(file_message("cannot open baseline run directory", in.baseline, "No such file or directory"));
  in.title = rs.title;
  in.metric_settings.smooth = rs.smooth;
  in.metric_settings.warmup_frac = rs.warmup_frac;
  in.chart_settings.smooth = in.metric_settings.smooth;
  in.chart_settings.warmup_frac = in.metric_settings.warmup_frac;
  in.chart_settings.max_points = static_cast<size_t>(rs.max_points);
  in.chart_settings.width = rs.chart_width;
  in.chart_settings.chart_runs = static_cast<size_t>(rs.chart_runs);
  in.top_plans = rs.top_plans;
  in.threads = rs.threads;
  // The report goes to [run] dir when --out, --set or CAIRN_RUN_DIR gives it, else into the first run
  // that is not the baseline (a config file's [run] dir names the run it configures, not this report).
  auto origin = cfg.origin("run.dir").kind;
  if (origin == Origin::Set || origin == Origin::Env || in.runs.empty()) {
    in.out_dir = read_section<RunSection>(cfg).dir;
  } else {
    std::string cb = in.baseline.empty() ? "" : canonical(in.baseline);
    in.out_dir = in.runs.empty() ? in.baseline : in.runs.front();
    for (const auto& r : in.runs)
      if (canonical(r) != cb) {
        in.out_dir = r;
        break;
      }
    // A run read from a read-only mount (an archived baseline, another user's run) failed with exit 1 only when
    // the report was written, after every run had been read.
    if (std::string why = creatable_dir_problem(join_path(in.out_dir, "report")); !why.empty())
      throw UsageError(file_message("cannot write the report into run directory", in.out_dir, why) +
                       " (--out DIR writes it elsewhere)");
  }
  return in;
}

ReportModel build_report(const ReportInputs& in) {
  auto t0 = std::chrono::steady_clock::now();
  ReportModel m;
  m.inputs = in;

  // Baseline first, then the runs in the order given, each directory once.
  std::vector<std::string> dirs;
  std::set<std::string> seen;
  if (!in.baseline.empty()) {
    dirs.push_back(in.baseline);
    seen.insert(canonical(in.baseline));
    m.baseline = 0;
  }
  for (const auto& r : in.runs)
    if (seen.insert(canonical(r)).second) dirs.push_back(r);
  // Each run's metrics are computed as soon as it is read, in its reader thread, and a run the charts do not draw
  // then drops its per-step columns: the report holds the drawn runs' columns and at most `threads` others (every
  // run's were held: 60 runs of 600,000 steps took 6.4 GB).
  const std::vector<size_t> drawn = drawn_runs(dirs.size(), m.baseline, in.chart_settings.chart_runs);
  m.metrics.resize(dirs.size());
  m.runs = read_runs(dirs, in.threads, [&](size_t i, RunData& run) {
    m.metrics[i] = compute_metrics(run, in.metric_settings);
    if (!std::binary_search(drawn.begin(), drawn.end(), i)) drop_series(run, in.metric_settings);
  });
  auto t_read = std::chrono::steady_clock::now();
  CAIRN_LOG_DEBUG("report: read %zu run(s) in %.3f s", dirs.size(), std::chrono::duration<double>(t_read - t0).count());
  if (m.baseline == 0) m.runs[0].is_baseline = true;

  // Names must tell runs apart in legends and tables. Runs of one config share its [run] name (a nightly and its
  // baseline, a copied run): their directories' names tell them apart, else their parents' and their order.
  std::map<std::string, int> name_count;
  for (auto& r : m.runs) ++name_count[r.name];
  for (auto& r : m.runs) {
    if (name_count[r.name] < 2) continue;
    std::string dir = r.dir;
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    const std::string base = fs::path(dir).filename().string();
    if (!base.empty() && base != r.name) r.name += " (" + base + ")";
  }
  name_count.clear();
  for (auto& r : m.runs) ++name_count[r.name];
  for (size_t i = 0; i < m.runs.size(); ++i)
    if (name_count[m.runs[i].name] > 1) {
      fs::path p(m.runs[i].dir);
      std::string parent = p.parent_path().filename().string();
      m.runs[i].name = (parent.empty() ? "" : parent + "/") + m.runs[i].name + " #" + std::to_string(i + 1);
    }

  // Table rows: fixed metrics present in any run (catalog order), then eval and sweep names sorted.
  std::set<std::string> present;
  for (const auto& mm : m.metrics)
    for (const auto& [name, v] : mm) present.insert(name);
  for (const auto& d : fixed_metrics())
    if (present.count(d.name)) m.table_metrics.push_back(d);
  std::vector<std::string> pattern_names;
  for (const auto& name : present) {
    bool fixed =
        std::any_of(fixed_metrics().begin(), fixed_metrics().end(), [&](const MetricDef& d) { return d.name == name; });
    if (!fixed) pattern_names.push_back(name);
  }
  // Per-tier and fitted sweep numbers stay in summary.json; the table keeps the headline ones.
  for (const auto& name : pattern_names) {
    auto def = resolve_metric(name);
    if (!def) continue;
    if (def->group == "sweep") {
      bool tiered = false;
      for (const auto& t : known_tiers())
        tiered |= name.size() > t.size() && name.compare(name.size() - t.size(), t.size(), t) == 0;
      if (tiered || name.rfind("fit_busbw_", 0) == 0) continue;
    }
    m.table_metrics.push_back(*def);
  }
  std::stable_sort(m.table_metrics.begin(), m.table_metrics.end(), [](const MetricDef& a, const MetricDef& b) {
    static const std::vector<std::string> order{"train", "eval", "sweep", "plan", "data"};
    auto ia = std::find(order.begin(), order.end(), a.group), ib = std::find(order.begin(), order.end(), b.group);
    return ia < ib;
  });

  m.gates = evaluate_gates(in.gates, m.runs, m.metrics, m.baseline);
  auto t_metrics = std::chrono::steady_clock::now();
  m.charts = build_charts(m.runs, m.baseline, m.metrics, in.chart_settings);
  CAIRN_LOG_DEBUG("report: metrics and gates %.3f s, %zu charts %.3f s",
                  std::chrono::duration<double>(t_metrics - t_read).count(), m.charts.size(),
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t_metrics).count());

  if (!in.title.empty()) m.title = in.title;
  else {
    for (size_t i = 0; i < m.runs.size() && i < 4; ++i) m.title += (i ? ", " : "") + m.runs[i].name;
    if (m.runs.size() > 4) m.title += " and " + std::to_string(m.runs.size() - 4) + " more";
  }
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

std::string gate_failure_message(const ReportModel& m) {
  size_t failed = m.gates_failed();
  std::string s = std::to_string(failed) + " of " + std::to_string(m.gates.size()) + " gate" +
                  (m.gates.size() == 1 ? "" : "s") + " failed";
  size_t shown = 0;
  for (const auto& g : m.gates) {
    if (g.pass) continue;
    if (shown == 3) {
      s += "; ...";
      break;
    }
    s += (shown ? "; " : ": ") + g.metric + " [" + g.run + "] " + g.reason;
    ++shown;
  }
  return s;
}

ReportResult run_report(const ReportInputs& in) {
  // Read first: a bad run directory must not leave an empty report directory behind.
  ReportResult r;
  r.model = build_report(in);
  std::string report_dir = join_path(in.out_dir, "report");
  ensure_dir(report_dir);
  check_writable_dir(report_dir);
  // A report killed while writing left its temp copies (a 128 KB summary.json's among them) beside the files for
  // good: the next report removes those whose writer is gone.
  remove_stale_temps(report_dir, [](const std::string& name) {
    return name == "index.html" || name == "summary.md" || name == "summary.json";
  });
  r.report_dir = report_dir;
  auto t0 = std::chrono::steady_clock::now();
  std::string html = render_html(r.model);
  std::string md = render_markdown(r.model);
  // Invalid UTF-8 quoted from a corrupt file becomes U+FFFD instead of failing the dump.
  r.json_text = render_json(r.model).dump(2, ' ', false, json::error_handler_t::replace) + "\n";
  atomic_write(join_path(report_dir, "index.html"), html);
  atomic_write(join_path(report_dir, "summary.md"), md);
  atomic_write(join_path(report_dir, "summary.json"), r.json_text);
  double render_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const auto& run : r.model.runs) {
    if (!run.missing.empty())
      CAIRN_LOG_WARN("run \"%s\": missing %zu piece(s), e.g. %s", run.name.c_str(), run.missing.size(),
                     run.missing.front().c_str());
    if (run.problem_count > 0)
      CAIRN_LOG_WARN("run \"%s\": %zu problem(s), first: %s", run.name.c_str(), run.problem_count,
                     run.problems.front().c_str());
  }
  size_t points = 0;
  for (const auto& c : r.model.charts) points += c.points;
  CAIRN_LOG_INFO("report: %zu run(s), %zu chart(s) (%zu points), %zu gate check(s), %zu failed; %.2f s -> %s",
                 r.model.runs.size(), r.model.charts.size(), points, r.model.gates.size(), r.model.gates_failed(),
                 r.model.seconds + render_s, join_path(report_dir, "index.html").c_str());
  return r;
}

}  // namespace cairn::report
