// Unit tests of cairn-report's readers, metrics and gates (tools/report).
#define BOOST_TEST_MODULE report_tool
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <fstream>
#include <random>

#include "cairn/error.h"
#include "cairn/plot.h"
#include "catalog.h"
#include "charts.h"
#include "gates.h"
#include "report.h"
#include "rundata.h"

using namespace cairn::report;
namespace fs = std::filesystem;

namespace {
std::string train_line(int step, double loss, double tps) {
  return "{\"kind\":\"train\",\"step\":" + std::to_string(step) + ",\"tokens\":" + std::to_string(step * 1000) +
         ",\"loss\":" + std::to_string(loss) +
         ",\"lr\":0.001,\"grad_norm\":1.0,\"tokens_per_s\":" + std::to_string(tps) +
         ",\"mfu\":0.4,\"skipped\":0,\"skipped_total\":0,\"time_s\":{\"data\":0.01,\"forward\":0.1,\"backward\":0.2,"
         "\"comm\":0.05,\"optimizer\":0.02,\"total\":0.4},\"wall_time\":" +
         std::to_string(1000 + step) + "}\n";
}

json gate_table(const std::string& toml_like_metric, const json& rules) { return json{{toml_like_metric, rules}}; }

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("cairn_report_test_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};
}  // namespace

BOOST_AUTO_TEST_CASE(metrics_jsonl_corrupt_torn_and_restarted) {
  std::string text;
  for (int s = 1; s <= 10; ++s) text += train_line(s, 5.0 - 0.1 * s, 1000);
  text += "{\"kind\":\"val\",\"step\":10,\"tokens\":10000,\"val_loss\":4.2}\n";
  text += "{not json}\n";                                          // line 12
  text += "[1,2,3]\n";                                             // line 13: valid JSON, not an object
  for (int s = 8; s <= 12; ++s) text += train_line(s, 3.0, 2000);  // requeued from step 8
  text += "{\"kind\":\"train\",\"step\":13,\"loss\":2.";           // torn last line (line 19)
  RunData run;
  parse_metrics_jsonl(text, "r/train/metrics.jsonl", run);
  BOOST_TEST(run.train.size() == 12u);  // 1..7 kept, 8..12 rewritten
  BOOST_TEST(run.train.step[7] == 8.0);
  BOOST_TEST(run.train.loss[7] == 3.0);
  BOOST_TEST(run.restarts.size() == 1u);
  BOOST_TEST(run.restarts[0] == 8.0);
  BOOST_TEST(run.val.size() == 1u);
  BOOST_TEST(run.problem_count == 3u);
  BOOST_TEST(run.problems[0].rfind("r/train/metrics.jsonl:12: ", 0) == 0u);
  BOOST_TEST(run.problems[1] == "r/train/metrics.jsonl:13: not a JSON object");
  BOOST_TEST(run.problems[2].rfind("r/train/metrics.jsonl:19: ", 0) == 0u);
  BOOST_TEST(run.problems[2].find("torn last line") != std::string::npos);
  BOOST_TEST(run.train.t_total[0] == 0.4);
}

BOOST_AUTO_TEST_CASE(computed_metrics_use_medians_after_warmup) {
  RunData run;
  run.name = "r";
  std::string text;
  for (int s = 1; s <= 100; ++s) text += train_line(s, 3.0, s <= 5 ? 10.0 : 1000.0 + s);  // slow warm-up steps
  parse_metrics_jsonl(text, "m", run);
  MetricSettings st;
  st.warmup_frac = 0.1;
  auto m = compute_metrics(run, st);
  BOOST_TEST(m.at("tokens_per_s").value == 1055.5);  // median of steps 11..100
  BOOST_TEST(m.at("tokens_per_s").best == 1100.0);
  BOOST_TEST(m.at("mfu").value == 40.0, boost::test_tools::tolerance(1e-9));  // fraction shown in percent
  BOOST_TEST(m.at("loss").value == 3.0, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(m.at("steps").value == 100.0);
  BOOST_TEST(m.at("train_time_s").value == 99.0);
  BOOST_TEST(m.at("step_time_s").value == 0.4);
  BOOST_TEST(m.count("val_loss") == 0u);

  RunData ev;
  parse_eval_jsonl("{\"step\":100,\"task\":\"hellaswag\",\"metric\":\"acc\",\"value\":0.30}\n"
                   "{\"step\":200,\"task\":\"hellaswag\",\"metric\":\"acc\",\"value\":0.28}\n"
                   "{\"step\":200,\"task\":\"wiki\",\"metric\":\"ppl\",\"value\":20}\n"
                   "{\"step\":100,\"task\":\"wiki\",\"metric\":\"ppl\",\"value\":25}\n"
                   "{\"step\":300,\"task\":\"wiki\"}\n",
                   "e", ev);
  BOOST_TEST(ev.problem_count == 1u);
  auto em = compute_metrics(ev, st);
  BOOST_TEST(em.at("eval_hellaswag_acc").value == 0.28);  // value at the last step
  BOOST_TEST(em.at("eval_hellaswag_acc").best == 0.30);   // higher is better
  BOOST_TEST(em.at("eval_wiki_ppl").value == 20.0);
  BOOST_TEST(em.at("eval_wiki_ppl").best == 20.0);  // lower is better
}

BOOST_AUTO_TEST_CASE(loss_best_is_measured_like_its_final_value) {
  // A short run whose loss falls to the end (60 steps, 3 per window): the EMA of the curve lags the raw tail, so its
  // minimum read worse than the final value. Best is now the lowest 3-step mean: the last one here.
  RunData run;
  run.name = "r";
  std::string text;
  for (int s = 1; s <= 60; ++s) text += train_line(s, 5.0 - 0.03 * s, 1000.0);
  parse_metrics_jsonl(text, "m", run);
  auto m = compute_metrics(run, MetricSettings{});
  BOOST_TEST(m.at("loss").value == (3.26 + 3.23 + 3.20) / 3, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(m.at("loss").best == m.at("loss").value);
  // A dip before the end: best is that dip's window mean, below the final value.
  RunData dip;
  text.clear();
  for (int s = 1; s <= 60; ++s) text += train_line(s, s >= 30 && s < 33 ? 1.0 : 3.0, 1000.0);
  parse_metrics_jsonl(text, "m", dip);
  auto d = compute_metrics(dip, MetricSettings{});
  BOOST_TEST(d.at("loss").value == 3.0, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(d.at("loss").best == 1.0, boost::test_tools::tolerance(1e-9));
}

BOOST_AUTO_TEST_CASE(pipelined_runs_report_the_critical_stage_wait_and_the_imbalance) {
  // Stage 1 computes more (the head and loss): it is the critical stage, its wait the pipeline's; 30 % more busy
  // than stage 0. Runs without stages have neither metric.
  RunData run;
  std::string text;
  for (int s = 1; s <= 20; ++s)
    text += "{\"kind\":\"train\",\"step\":" + std::to_string(s) +
            ",\"loss\":2,\"time_s\":{\"forward\":0.1,\"backward\":0.2,\"pp_wait\":0.05,\"total\":0.5},"
            "\"stages\":[{\"stage\":0,\"rank\":0,\"time_s\":{\"forward\":0.1,\"backward\":0.2,\"tp_comm\":0,"
            "\"cp_comm\":0,\"zero_comm\":0,\"pp_wait\":0.05}},{\"stage\":1,\"rank\":1,\"time_s\":{\"forward\":"
            "0.14,\"backward\":0.3,\"tp_comm\":0.05,\"cp_comm\":0,\"zero_comm\":0,\"pp_wait\":0.02}}]}\n";
  parse_metrics_jsonl(text, "m", run);
  MetricSettings st;
  auto m = compute_metrics(run, st);
  BOOST_TEST(m.at("pipeline_wait_s").value == 0.02);
  BOOST_TEST(m.at("stage_imbalance").value == 30.0, boost::test_tools::tolerance(1e-9));  // (0.39 / 0.3 - 1) in %
  RunData plain;
  parse_metrics_jsonl(train_line(1, 3.0, 100.0), "p", plain);
  auto pm = compute_metrics(plain, st);
  BOOST_TEST(pm.count("pipeline_wait_s") == 0u);
  BOOST_TEST(pm.count("stage_imbalance") == 0u);
}

BOOST_AUTO_TEST_CASE(gate_names_resolve_or_are_config_errors) {
  BOOST_TEST((resolve_metric("val_loss")->better == Better::Lower));
  BOOST_TEST(resolve_metric("busbw_allreduce")->name == "busbw_allreduce");
  BOOST_TEST(resolve_metric("busbw_reduce_scatter_intra")->name == "busbw_reducescatter_intra");
  BOOST_TEST(resolve_metric("eval.hellaswag.acc")->name == "eval_hellaswag_acc");
  BOOST_TEST((resolve_metric("eval_lambada_ppl")->better == Better::Lower));
  BOOST_TEST(!resolve_metric("busbw_allsum"));
  BOOST_TEST(!resolve_metric("val_los"));
  BOOST_CHECK_EXCEPTION(parse_gates(gate_table("val_los", {{"max_increase", 0.02}})), cairn::UsageError,
                        [](const cairn::UsageError& e) {
                          std::string w = e.what();
                          return e.code() == 2 && w.find("unknown gate metric \"val_los\"") != std::string::npos &&
                                 w.find("did you mean \"val_loss\"") != std::string::npos;
                        });
  BOOST_CHECK_THROW(parse_gates(gate_table("val_loss", {{"max_rise", 0.02}})), cairn::UsageError);
  BOOST_CHECK_THROW(parse_gates(gate_table("val_loss", {{"max_increase", "a lot"}})), cairn::UsageError);
  BOOST_CHECK_THROW(parse_gates(gate_table("val_loss", 0.02)), cairn::UsageError);
  auto rules = parse_gates(json{{"val_loss", {{"max_increase", 0.02}}}, {"wrong", {{"max", 0}}}});
  BOOST_TEST(rules.size() == 2u);
}

BOOST_AUTO_TEST_CASE(gates_pass_fail_and_missing_data) {
  std::vector<RunData> runs(3);
  runs[0].name = "base";
  runs[0].is_baseline = true;
  runs[1].name = "good";
  runs[2].name = "bad";
  runs[2].present = {"train"};
  std::vector<std::map<std::string, MetricValue>> m(3);
  m[0]["val_loss"] = {3.00, 3.00};
  m[0]["tokens_per_s"] = {1000, 1000};
  m[0]["busbw_allreduce"] = {100, 100};
  m[1]["val_loss"] = {3.01, 3.01};
  m[1]["tokens_per_s"] = {960, 960};
  m[1]["busbw_allreduce"] = {95, 95};
  m[1]["wrong"] = {0, 0};
  m[2]["val_loss"] = {3.05, 3.05};    // planted regression: +0.05
  m[2]["tokens_per_s"] = {940, 940};  // -6%
  auto rules = parse_gates(json{{"val_loss", {{"max_increase", 0.02}}},
                                {"tokens_per_s", {{"max_drop_pct", 5}}},
                                {"busbw_allreduce", {{"max_drop_pct", 10}}},
                                {"wrong", {{"max", 0}}}});
  auto res = evaluate_gates(rules, runs, m, 0);
  BOOST_TEST(res.size() == 8u);  // 4 rules x 2 runs (the baseline is not gated)
  auto find = [&](const std::string& run, const std::string& metric) -> const GateResult& {
    for (const auto& g : res)
      if (g.run == run && g.metric == metric) return g;
    BOOST_FAIL("no gate result for " + run + " " + metric);
    return res.front();
  };
  BOOST_TEST(find("good", "val_loss").pass);
  BOOST_TEST(find("good", "val_loss").limit == 3.02, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(find("good", "tokens_per_s").pass);
  BOOST_TEST(find("good", "tokens_per_s").limit == 950.0, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(find("good", "busbw_allreduce").pass);
  BOOST_TEST(find("good", "wrong").pass);
  const GateResult& vl = find("bad", "val_loss");
  BOOST_TEST(!vl.pass);
  BOOST_TEST(vl.baseline == 3.0);
  BOOST_TEST(vl.value == 3.05);
  BOOST_TEST(vl.reason == "+0.05 vs baseline 3; allowed increase 0.02");
  BOOST_TEST(!find("bad", "tokens_per_s").pass);
  // Missing data fails, with the reason.
  const GateResult& bw = find("bad", "busbw_allreduce");
  BOOST_TEST(!bw.pass);
  BOOST_TEST(bw.reason.find("has no sweep/ stage") != std::string::npos);
  BOOST_TEST(!find("bad", "wrong").pass);

  // Relative gates without a baseline fail with the reason; absolute ones still work.
  auto nobase = evaluate_gates(rules, runs, m, -1);
  for (const auto& g : nobase) {
    if (g.metric == "wrong" && g.run == "good") BOOST_TEST(g.pass);
    if (g.metric == "val_loss") {
      BOOST_TEST(!g.pass);
      BOOST_TEST(g.reason.find("needs a baseline") != std::string::npos);
    }
  }
  // Higher-is-better bounds: min.
  auto mins = evaluate_gates(parse_gates(json{{"tokens_per_s", {{"min", 950}}}}), runs, m, 0);
  BOOST_TEST(mins[0].pass);
  BOOST_TEST(!mins[1].pass);
}

// Twenty runs (a nightly history): the curves overlay the baseline and the last eleven, the across-runs charts hold
// all twenty, and runs of one dataset share one document-length histogram.
BOOST_AUTO_TEST_CASE(many_runs_overlay_a_dozen_and_trend_all) {
  BOOST_TEST(drawn_runs(5, 0, 12) == std::vector<size_t>({0, 1, 2, 3, 4}));
  BOOST_TEST(drawn_runs(20, 0, 4) == std::vector<size_t>({0, 17, 18, 19}));
  BOOST_TEST(drawn_runs(20, -1, 3) == std::vector<size_t>({17, 18, 19}));
  BOOST_TEST(drawn_runs(20, 19, 3) == std::vector<size_t>({17, 18, 19}));
  BOOST_TEST(drawn_runs(20, 0, 0).size() == 20u);
  BOOST_TEST(drawn_runs(3, 0, 1) == std::vector<size_t>({0, 2}));  // the baseline and tonight's run, never none
  BOOST_TEST(drawn_runs(3, -1, 1) == std::vector<size_t>({2}));
  std::vector<RunData> runs(20);
  std::vector<std::map<std::string, MetricValue>> metrics;
  for (size_t i = 0; i < runs.size(); ++i) {
    std::string text;
    for (int s = 1; s <= 30; ++s) text += train_line(s, 5.0 - 0.01 * s - 0.001 * static_cast<double>(i), 1000 + i);
    text += "{\"kind\":\"val\",\"step\":30,\"tokens\":30000,\"val_loss\":" + std::to_string(4.0 + 0.01 * i) + "}\n";
    parse_metrics_jsonl(text, "r/train/metrics.jsonl", runs[i]);
    runs[i].name = "night" + std::to_string(i);
    runs[i].present = {"train", "data"};
    // Runs 0-14 trained on one dataset, 15-19 on another.
    runs[i].data_stats =
        json{{"doc_length_histogram", json{{"edges", {1, 2, 4, 8}}, {"counts", {3, 5, i < 15 ? 7 : 8}}}}};
    metrics.push_back(compute_metrics(runs[i], MetricSettings{}));
  }
  runs[0].is_baseline = true;
  ChartSettings st;
  std::vector<ChartOut> charts = build_charts(runs, 0, metrics, st);
  auto find = [&](const std::string& id) -> const ChartOut* {
    for (const auto& c : charts)
      if (c.id == id) return &c;
    return nullptr;
  };
  const ChartOut* loss = find("train-loss-step");
  BOOST_REQUIRE(loss);
  std::vector<std::string> legend;
  for (const auto& s : loss->series)
    if (s.find(" val") == std::string::npos && s.find(" raw") == std::string::npos) legend.push_back(s);
  BOOST_TEST(legend.size() == 12u);
  BOOST_TEST(legend.front() == "night0 (baseline)");
  BOOST_TEST(legend[1] == "night9");
  BOOST_TEST(legend.back() == "night19");
  BOOST_TEST(loss->svg.find("baseline + last 11 of 20 runs") != std::string::npos);
  // The across-runs chart: one point per run, all twenty, and the baseline's value as a reference line.
  const ChartOut* trend = find("runs-val-loss");
  BOOST_REQUIRE(trend);
  BOOST_TEST(trend->section == "train");
  BOOST_TEST(trend->points == 20u);
  BOOST_TEST(trend->svg.find("baseline 4") != std::string::npos);
  BOOST_TEST(find("runs-tokens-per-s") != nullptr);
  // Drawn runs 0 and 9-14 share a histogram, 15-19 share the other: two charts.
  size_t histograms = 0;
  for (const auto& c : charts) histograms += c.id.rfind("data-doc-length-", 0) == 0;
  BOOST_TEST(histograms == 2u);
  BOOST_TEST(find("data-doc-length-night0")->svg.find("the same in 6 other runs drawn") != std::string::npos);
  // Colours: the palette goes to the drawn runs in order; a run left out has none.
  BOOST_TEST(run_color(runs, 0, 0, 12) == "#333333");
  BOOST_TEST(run_color(runs, 0, 9, 12) == cairn::plot::palette_color(0));
  BOOST_TEST(run_color(runs, 0, 3, 12).empty());
  // summary.md's comparison table has the same runs as columns (a CI log cannot show 200), and says so.
  ReportModel model;
  model.runs = runs;
  model.baseline = 0;
  model.metrics = metrics;
  model.table_metrics = {*resolve_metric("val_loss")};
  const std::string md = render_markdown(model);
  BOOST_TEST(md.find("Columns: the baseline and the last 11 of 20 runs") != std::string::npos);
  BOOST_TEST(md.find("| night0 (baseline) | night9 |") != std::string::npos);
  BOOST_TEST(md.find("| night8 |") == std::string::npos);
  BOOST_TEST(md.find("night19 |") != std::string::npos);
  // Fewer runs than kAcrossRunsMin: no across-runs chart, every run overlaid.
  runs.resize(5);
  metrics.resize(5);
  charts = build_charts(runs, 0, metrics, st);
  BOOST_TEST(find("runs-val-loss") == nullptr);
  BOOST_TEST(find("train-loss-step")->svg.find(" of 5 runs") == std::string::npos);
}

// A run the charts do not draw drops its per-step columns once read (build_report), keeping what the tables, gates
// and summary.json show of it: the same summary.json runs, comparison and gates as with every run drawn.
BOOST_AUTO_TEST_CASE(undrawn_runs_drop_their_columns_but_not_their_numbers) {
  TempDir tmp;
  std::vector<std::string> dirs;
  for (int r = 0; r < 3; ++r) {
    std::string text;
    for (int s = 1; s <= 40; ++s) {
      std::string line = train_line(s, 4.0 - 0.01 * s - 0.1 * r, 1000 + 10 * r + s % 3);
      if (r == 1) line.replace(line.find("\"mfu\":0.4"), 9, "\"mfu\":40.0");  // logged in percent
      if (r == 0) {  // pipelined; its last loss is not finite (the run diverged)
        line.insert(line.rfind('}'),
                    ",\"stages\":[{\"stage\":0,\"rank\":0,\"time_s\":{\"forward\":0.1,\"backward\":0.2,"
                    "\"pp_wait\":0.05}},{\"stage\":1,\"rank\":1,\"time_s\":{\"forward\":0.14,\"backward\":" +
                        std::to_string(0.3 + 0.001 * s) + ",\"pp_wait\":0.02}}]");
        if (s == 40) line.replace(line.find("\"loss\":"), 15, "\"loss\":null");  // "loss":3.600000
      }
      text += line;
      if (s % 10 == 0) text += "{\"kind\":\"val\",\"step\":" + std::to_string(s) + ",\"val_loss\":3.5}\n";
    }
    fs::path d = tmp.path / ("r" + std::to_string(r));
    fs::create_directories(d / "train");
    std::ofstream(d / "train" / "metrics.jsonl") << text;
    dirs.push_back(d.string());
  }
  ReportInputs in;
  in.runs = dirs;
  in.gates = parse_gates(json{{"loss", {{"max", 10}}}, {"pipeline_wait_s", {{"max", 1}}}});
  in.chart_settings.chart_runs = 1;  // the last run only
  const ReportModel dropped = build_report(in);
  in.chart_settings.chart_runs = 0;
  const ReportModel kept = build_report(in);
  for (size_t i : {0u, 1u}) {
    BOOST_TEST(dropped.runs[i].dropped.has_value());
    BOOST_TEST(dropped.runs[i].train.step.capacity() == 0u);
    BOOST_TEST(dropped.runs[i].val.step.capacity() == 0u);
    BOOST_TEST(dropped.runs[i].train_records() == 40u);
    BOOST_TEST(dropped.runs[i].val_records() == 4u);
    BOOST_TEST(!kept.runs[i].dropped.has_value());
  }
  BOOST_TEST(!dropped.runs[2].dropped.has_value());
  BOOST_TEST(dropped.runs[2].train.size() == 40u);
  BOOST_TEST(dropped.runs[1].dropped->mfu_max == 40.0);
  BOOST_CHECK_THROW(compute_metrics(dropped.runs[0], in.metric_settings), std::logic_error);
  const json a = render_json(dropped), b = render_json(kept);
  BOOST_TEST(a["runs"].dump() == b["runs"].dump());  // dumped: NaN (no best) is not equal to itself
  BOOST_TEST(a["comparison"].dump() == b["comparison"].dump());
  BOOST_TEST(a["gates"].dump() == b["gates"].dump());
  BOOST_TEST(a["runs"][0]["pipeline_stages"].size() == 2u);
  BOOST_TEST(a["runs"][0]["metrics"].contains("pipeline_wait_s"));
  BOOST_TEST(a["gates"].dump().find("loss is not finite at its last step 40 (last finite value 3.61 at step 39): the "
                                    "run diverged") != std::string::npos);
}

// metrics.jsonl is read in 8 MiB blocks: lines that straddle a block boundary, a bad line past it and a torn last
// line read as they do from the whole text.
BOOST_AUTO_TEST_CASE(metrics_jsonl_read_in_blocks_like_whole) {
  TempDir tmp;
  fs::create_directories(tmp.path / "r" / "train");
  std::string text;
  int step = 0;
  while (text.size() < (size_t{9} << 20)) {  // past one block
    ++step;
    text += train_line(step, 5.0 - 1e-5 * step, 1000 + step % 7);
    if (step == 35000) text += "{broken\r\n";
  }
  text += "{\"kind\":\"train\",\"step\":";  // torn
  std::ofstream(tmp.path / "r" / "train" / "metrics.jsonl", std::ios::binary) << text;
  RunData from_file = read_run((tmp.path / "r").string());
  RunData from_text;
  parse_metrics_jsonl(text, (tmp.path / "r" / "train" / "metrics.jsonl").string(), from_text);
  BOOST_TEST(from_file.train.size() == static_cast<size_t>(step));
  BOOST_TEST(from_file.train.step == from_text.train.step);
  BOOST_TEST(from_file.train.loss == from_text.train.loss);
  BOOST_TEST(from_file.train.tokens_per_s == from_text.train.tokens_per_s);
  BOOST_TEST(from_file.problems == from_text.problems);
  BOOST_REQUIRE(from_file.problems.size() == 2u);
  BOOST_TEST(from_file.problems[0].find(":35001: ") != std::string::npos);
  BOOST_TEST(from_file.problems[1].find("torn last line") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(run_directory_reading_is_tolerant) {
  TempDir tmp;
  BOOST_CHECK_EXCEPTION(read_run((tmp.path / "nope").string()), cairn::UsageError, [](const cairn::UsageError& e) {
    return std::string(e.what()).find("nope") != std::string::npos;
  });
  fs::create_directories(tmp.path / "r" / "train");
  fs::create_directories(tmp.path / "r" / "sweep");
  {
    std::ofstream(tmp.path / "r" / "layout_predict.json") << "{\"rows\": [1, 2";  // truncated
    std::ofstream(tmp.path / "r" / "config.toml") << "[run]\nname = \"nightly\"\n";
  }
  RunData run = read_run((tmp.path / "r").string());
  BOOST_TEST(run.name == "nightly");
  BOOST_TEST(run.has("train"));
  BOOST_TEST(run.has("sweep"));
  BOOST_TEST(!run.has("eval"));
  bool names_metrics = false, names_fabric = false;
  for (const auto& m : run.missing) {
    names_metrics |= m.find("train/metrics.jsonl") != std::string::npos;
    names_fabric |= m.find("sweep/fabric.toml") != std::string::npos;
  }
  BOOST_TEST(names_metrics);
  BOOST_TEST(names_fabric);
  BOOST_TEST(run.problem_count == 1u);
  BOOST_TEST(run.problems[0].find("layout_predict.json: invalid JSON") != std::string::npos);
  // Charts of a run with nothing in it: none, and no crash.
  std::vector<RunData> runs{run};
  BOOST_TEST(build_charts(runs, -1, {}, ChartSettings{}).empty());
}

BOOST_AUTO_TEST_CASE(sweep_json_both_layouts) {
  // Version 3 (cairn-sweep now): nccl-tests' keys at the top, cairn's under "cairn".
  json v3 = json::parse(R"({"version": 3,
    "results": [{"size": 1024, "count": 256, "type": "float", "redop": "sum", "root": "    -1",
                 "out_of_place": {"time": 2, "alg_bw": 0.5, "bus_bw": 0.75, "nwrong": 0},
                 "in_place": {"time": 2, "alg_bw": 0.5, "bus_bw": 0.7, "nwrong": 0},
                 "cairn": {"collective": "allreduce", "tier": "intra",
                           "oop": {"time_us": 2, "algbw": 0.5, "busbw": 0.8, "wrong": 1},
                           "ip": {"time_us": 2, "algbw": 0.5, "busbw": 0.7, "wrong": 0}}},
                {"size": 8, "type": "float"}],
    "out_of_bounds": {"count": 9, "okay": "false"}, "average_bus_bandwidth": {"bandwidth": 9, "okay": "unchecked"},
    "cairn": {"fits": [{"collective": "allreduce", "alpha_us": 3}], "avg_busbw": 0.75, "wrong": 1}})");
  auto rows = sweep_rows(v3);
  BOOST_REQUIRE(rows.size() == 1u);  // the entry without a collective is skipped
  BOOST_TEST(rows[0].collective == "allreduce");
  BOOST_TEST(rows[0].tier == "intra");
  BOOST_TEST(rows[0].root == "-1");
  BOOST_TEST(rows[0].redop == "sum");
  BOOST_TEST(rows[0].size == 1024.0);
  BOOST_TEST(rows[0].busbw[0] == 0.8);  // cairn's measure, not nccl-tests' bus_bw
  BOOST_TEST(rows[0].wrong[0] == 1.0);
  BOOST_TEST(sweep_avg_busbw(v3) == 0.75);
  BOOST_TEST(sweep_wrong(v3) == 1.0);
  BOOST_REQUIRE(sweep_fits(v3) != nullptr);
  BOOST_TEST(sweep_fits(v3)->size() == 1u);
  // A result with cairn's collective but no cairn measures: nccl-tests' own columns.
  json bare = v3;
  bare["results"][0]["cairn"].erase("oop");
  BOOST_TEST(sweep_rows(bare)[0].busbw[0] == 0.75);
  // Without cairn's summary numbers: nccl-tests' average_bus_bandwidth and out_of_bounds.
  bare.erase("cairn");
  BOOST_TEST(sweep_avg_busbw(bare) == 9.0);
  BOOST_TEST(sweep_wrong(bare) == 9.0);
  BOOST_TEST(sweep_fits(bare) == nullptr);
  // The flat layout written before version 3: cairn's fields beside nccl-tests'.
  json flat = json::parse(R"({"results": [{"collective": "allgather", "size": 64, "type": "float", "redop": "none",
                 "root": -1, "oop": {"busbw": 2.5, "algbw": 2, "wrong": 0}, "ip": {"busbw": 2}}],
    "fits": [{"collective": "allgather"}, {"collective": "allgather"}], "avg_busbw": 2.25, "wrong": 0})");
  rows = sweep_rows(flat);
  BOOST_REQUIRE(rows.size() == 1u);
  BOOST_TEST(rows[0].tier == "world");
  BOOST_TEST(rows[0].root == "-1");
  BOOST_TEST(rows[0].busbw[0] == 2.5);
  BOOST_TEST(std::isnan(rows[0].wrong[1]));
  BOOST_TEST(sweep_avg_busbw(flat) == 2.25);
  BOOST_TEST(sweep_wrong(flat) == 0.0);
  BOOST_TEST(sweep_fits(flat)->size() == 2u);
  BOOST_TEST(sweep_rows(json("x")).empty());
  BOOST_TEST(std::isnan(sweep_wrong(json::array())));
}

// The metrics scanner's own tests (agreement with a full parser) are in tests/libcommon/records/.

BOOST_AUTO_TEST_CASE(sweep_and_plan_files_are_checked_key_by_key) {
  // A bad sweep.json or plans.json is a UsageError (exit 2) naming the file and the key, never a raw
  // library message; null stays "not measured" (cairn-sweep writes NaN as null).
  TempDir tmp;
  auto run_with = [&](const std::string& stage, const std::string& file, const std::string& text) {
    fs::path d = tmp.path / ("r" + std::to_string(std::rand()));
    fs::create_directories(d / stage);
    std::ofstream(d / stage / file) << text;
    return d.string();
  };
  auto expect = [&](const std::string& stage, const std::string& file, const std::string& text,
                    const std::string& want) {
    std::string dir = run_with(stage, file, text);
    std::string msg;
    try {
      read_run(dir);
    } catch (const cairn::UsageError& e) {
      msg = e.what();
    }
    BOOST_TEST_INFO(text << " -> " << msg);
    BOOST_TEST(msg.find(dir + "/" + stage + "/" + file) != std::string::npos);
    BOOST_TEST(msg.find(want) != std::string::npos);
    BOOST_TEST(msg.find("json.exception") == std::string::npos);
  };
  expect("sweep", "sweep.json", R"({"results": [{"size": 1e999999}]})", "invalid JSON: number overflow");
  expect("sweep", "sweep.json", R"({"results": [1, 2)", "invalid JSON");
  expect("sweep", "sweep.json", R"([1])", "expected a table/object");
  expect("sweep", "sweep.json", R"({"results": "x"})", "key \"results\": expected an array");
  expect("sweep", "sweep.json", R"({"results": [{"cairn": {"collective": 3}}]})",
         "key \"results[0].cairn.collective\": expected a string");
  expect("sweep", "sweep.json", R"({"results": [{"out_of_place": {"bus_bw": "fast"}}]})",
         "key \"results[0].out_of_place.bus_bw\": expected a finite number >= 0");
  expect("sweep", "sweep.json", R"({"cairn": {"fits": [{"collective": "allreduce", "alpha_us": true}]}})",
         "key \"cairn.fits[0].alpha_us\": expected a finite number");
  expect("sweep", "sweep.json", R"({"cairn": 5})", "key \"cairn\": expected a table/object");
  expect("sweep", "sweep.json", R"({"wrong": -1})", "key \"wrong\": expected a finite number >= 0");
  expect("plan", "plans.json", R"({"plans": null})", "key \"plans\": expected an array");
  expect("plan", "plans.json", R"({"plans": [{"dp": 1.5}]})",
         "key \"plans[0].dp\": expected an integer in [0, 2147483647]");
  expect("plan", "plans.json", R"({"plans": [{"dp": 2, "step_time_s": "1s"}]})", "key \"plans[0].step_time_s\"");
  expect("plan", "plans.json", R"({"plans": [{"sp": 1}]})", "key \"plans[0].sp\"");
  expect("plan", "plans.json", R"({"plans": [7]})", "key \"plans[0]\": expected a table/object");

  // Nulls (NaN as cairn-sweep writes it), nccl-tests' text in nwrong and both layouts read fine.
  RunData ok =
      read_run(run_with("sweep", "sweep.json",
                        R"({"version": 3, "results": [{"size": 8, "root": "   -1", "out_of_place": {"bus_bw": null,
                                 "nwrong": "N/A"}, "cairn": {"collective": "allreduce", "oop": {"busbw": null, "wrong": null}}}],
                                 "cairn": {"fits": [{"collective": "allreduce", "valid": false, "alpha_us": null}]}})"));
  BOOST_TEST(ok.sweep.is_object());
  BOOST_TEST(sweep_rows(ok.sweep).size() == 1u);
}
