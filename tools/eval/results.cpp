// The results record of cairn-eval: results.jsonl (the record restarts resume from), results.h5,
// lm-evaluation-harness JSON per checkpoint, and the stdout summary table.
#include <cmath>
#include <fstream>

#include "cairn/error.h"
#include "cairn/files.h"
#include "cairn/h5.h"
#include "cairn/log.h"
#include "cairn/provenance.h"
#include "eval.h"

namespace cairn::eval {

using nlohmann::json;

namespace {
json number_or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }
}  // namespace

std::vector<ResultRow> read_results(const std::string& path) {
  std::vector<ResultRow> rows;
  if (!path_exists(path)) return rows;
  std::ifstream in(path);
  if (!in) throw RuntimeError(errno_message("cannot open", path));
  std::string line;
  int64_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    try {
      json j = json::parse(line);
      ResultRow r;
      r.step = j.at("step").get<int64_t>();
      r.tokens = j.value("tokens", int64_t{0});
      r.checkpoint = j.value("checkpoint", std::string());
      r.task = j.at("task").get<std::string>();
      r.metric = j.at("metric").get<std::string>();
      r.value = j.at("value").is_number() ? j["value"].get<double>() : std::nan("");
      r.stderr_ = j.contains("stderr") && j["stderr"].is_number() ? j["stderr"].get<double>() : std::nan("");
      r.n = j.value("n", int64_t{0});
      r.wall_time = j.value("wall_time", 0.0);
      rows.push_back(r);
    } catch (const json::exception& e) {
      throw UsageError(strprintf("%s:%lld: not a cairn-eval result line (%s); move the file away to start over",
                                 path.c_str(), static_cast<long long>(lineno), e.what()));
    }
  }
  return rows;
}

void write_results_jsonl(const std::string& path, const std::vector<ResultRow>& rows) {
  std::string text;
  for (const auto& r : rows) {
    json j = {{"step", r.step},         {"tokens", r.tokens}, {"checkpoint", r.checkpoint},
              {"task", r.task},         {"metric", r.metric}, {"value", number_or_null(r.value)},
              {"stderr", number_or_null(r.stderr_)}, {"n", r.n}, {"wall_time", r.wall_time}};
    text += j.dump() + "\n";
  }
  atomic_write(path, text);
}

void write_results_h5(const std::string& path, const std::vector<ResultRow>& rows) {
  AtomicFile af(path);
  {
    h5::File f = h5::File::create(af.temp_path());
    std::vector<int64_t> step, tokens, n;
    std::vector<double> value, err, wall;
    std::vector<std::string> ckpt, task, metric;
    for (const auto& r : rows) {
      step.push_back(r.step);
      tokens.push_back(r.tokens);
      n.push_back(r.n);
      value.push_back(r.value);
      err.push_back(r.stderr_);
      wall.push_back(r.wall_time);
      ckpt.push_back(r.checkpoint);
      task.push_back(r.task);
      metric.push_back(r.metric);
    }
    // One row per checkpoint x task x metric, as parallel columns (h5py: f["results/value"][:]).
    h5::Group g = f.create_group("results");
    g.write("step", step);
    g.write("tokens", tokens);
    g.write("n", n);
    g.write("value", value);
    g.write("stderr", err);
    g.write("wall_time", wall);
    g.write_strings("checkpoint", ckpt);
    g.write_strings("task", task);
    g.write_strings("metric", metric);
    g.set_attr("rows", static_cast<int64_t>(rows.size()));
    f.set_attr("format", "cairn-eval-results");
    f.set_attr("format_version", int64_t{1});
    h5::write_provenance(f);
    f.close();
  }
  af.commit();
}

json lm_eval_json(int64_t step, int64_t tokens, const std::string& checkpoint, const std::vector<TaskResult>& results,
                  const Config& cfg, const gpt::GptConfig& model, int batch_size) {
  json out;
  json res = json::object(), configs = json::object(), versions = json::object(), nshot = json::object(),
       hib = json::object(), nsamples = json::object(), groups = json::object(), perf = json::object();
  for (const auto& r : results) {
    json t = {{"alias", r.task}};
    json h = json::object();
    for (const auto& m : r.metrics) {
      t[m.name + ",none"] = number_or_null(m.value);
      // The harness writes "N/A" where a metric has no standard error.
      t[m.name + "_stderr,none"] = std::isfinite(m.stderr_) ? json(m.stderr_) : json("N/A");
      h[m.name] = m.higher_is_better;
    }
    res[r.task] = t;
    configs[r.task] = r.config;
    versions[r.task] = r.config.contains("version") ? r.config["version"] : json(1.0);
    nshot[r.task] = 0;
    hib[r.task] = h;
    nsamples[r.task] = {{"original", r.samples + r.skipped_bad}, {"effective", r.samples}};
    groups[r.task] = json::array();
    perf[r.task] = {{"seconds", r.seconds},
                    {"tokens_scored", r.tokens_scored},
                    {"tokens_processed", r.tokens_processed},
                    {"tokens_per_s", r.seconds > 0 ? r.tokens_processed / r.seconds : 0.0},
                    {"examples_per_s", r.seconds > 0 ? r.samples / r.seconds : 0.0},
                    {"skipped_bad", r.skipped_bad}};
  }
  out["results"] = res;
  out["group_subtasks"] = groups;
  out["configs"] = configs;
  out["versions"] = versions;
  out["n-shot"] = nshot;
  out["higher_is_better"] = hib;
  out["n-samples"] = nsamples;
  out["config"] = {{"model", "cairn-gpt"},
                   {"model_args", strprintf("checkpoint=%s,layers=%d,hidden=%d,heads=%d,seq_len=%d,vocab=%d",
                                            checkpoint.c_str(), model.layers, model.hidden, model.heads,
                                            model.seq_len, model.vocab_real)},
                   {"batch_size", batch_size},
                   {"device", cfg.get_string("eval.backend")},
                   {"limit", cfg.get_int("eval.limit") > 0 ? json(cfg.get_int("eval.limit")) : json(nullptr)},
                   {"step", step},
                   {"tokens", tokens}};
  out["git_hash"] = cairn_git_sha();
  out["date"] = utc_now_iso8601();
  out["cairn"] = {{"step", step}, {"tokens", tokens}, {"checkpoint", checkpoint}, {"performance", perf},
                  {"provenance", provenance().to_json()}};
  return out;
}

std::string summary_table(int64_t step, int64_t tokens, const std::string& checkpoint,
                          const std::vector<TaskResult>& results) {
  std::string s = strprintf("checkpoint %s (step %lld, %lld tokens)\n", checkpoint.c_str(), static_cast<long long>(step),
                            static_cast<long long>(tokens));
  s += "|      Task       |     Metric      |    Value    |   Stderr   |   n    | tokens/s | examples/s |\n";
  s += "|-----------------|-----------------|-------------|------------|--------|----------|------------|\n";
  for (const auto& r : results) {
    double tps = r.seconds > 0 ? r.tokens_processed / r.seconds : 0, eps = r.seconds > 0 ? r.samples / r.seconds : 0;
    bool first = true;
    for (const auto& m : r.metrics) {
      std::string err = std::isfinite(m.stderr_) ? strprintf("%10.4f", m.stderr_) : std::string("       N/A");
      std::string val = std::abs(m.value) < 1e6 ? strprintf("%11.5f", m.value) : strprintf("%11.5g", m.value);
      s += strprintf("| %-15s | %-15s | %s | %s | %6lld | %8s | %10s |\n", first ? r.task.c_str() : "",
                     m.name.c_str(), val.c_str(), err.c_str(), static_cast<long long>(r.samples),
                     first ? strprintf("%.0f", tps).c_str() : "", first ? strprintf("%.1f", eps).c_str() : "");
      first = false;
    }
  }
  return s;
}

}  // namespace cairn::eval
