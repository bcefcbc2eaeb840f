// cairn-plan calibrate --from-runs (calibrate_runs.h): learns a site's efficiency terms from its own cairn-train
// runs, validates them leave-one-out and writes the refitted cluster file.
#include "calibrate_runs.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>

#include <toml++/toml.h>

#include "cairn/cli.h"
#include "cairn/costmodel.h"
#include "cairn/error.h"
#include "cairn/files.h"
#include "cairn/json_text.h"
#include "cairn/log.h"
#include "cairn/provenance.h"
#include "cairn/records.h"
#include "cairn/sections.h"

namespace fs = std::filesystem;

namespace cairn::plan {

namespace {

// A fitted factor outside this range says the model misses a mechanism, not that an efficiency is off.
constexpr double kFactorMin = 0.2, kFactorMax = 5.0;

// Median per-phase seconds of one run's steady steps: rank 0's split as cairn-train logs it, or with pipeline stages
// the critical stage's (the busiest rank of the stage with the most compute), whose compute the model's slowest stage
// prices and whose waits are the bubble and transfers rather than another stage's imbalance. dp_comm is every
// data-parallel wait: the exposed one after the last backward (time_s.comm) and ZeRO-2/3's per-layer gathers and
// reduce-scatters inside forward and backward (time_s.zero_comm), as the model's exposed DP term counts both.
struct Measured {
  double total = 0, compute = 0, tp_comm = 0, cp_comm = 0, dp_comm = 0, zero_comm = 0, pp_wait = 0, optimizer = 0;
  int stage = -1;  // the pipeline stage whose split these are (the one most often critical); -1: rank 0's, no stages
  // Each pipeline stage's busy time (forward + backward, with the TP and CP collectives inside as the model's stage
  // times hold them, without ZeRO's waits), median over the steps; empty without stages.
  std::vector<double> stage_busy;
  // With a kernel profile (cairn-train --profile-kernels): compute split by kernel class in the proportions of the
  // profile's rank-0 kernel time (GEMMs, the attention kernel, the memory-bound rest).
  bool profiled = false;
  double gemm = 0, attention = 0, memory = 0;
};

// Rank 0's matmul calls of one shape in a kernel profile (out[n, oc] = inp[n, c] @ W; backward: dweight, and dinp
// when grad_input).
struct ProfiledGemm {
  bool backward = false, grad_input = true;
  double n = 0, c = 0, oc = 0, calls = 0, seconds = 0;
};

// One start of cairn-train in a metrics.jsonl (a provenance line begins each start and each resume).
struct Segment {
  std::string config_toml;                  // the provenance line's effective config ("" when absent)
  json writer;                              // the provenance line's host, start time and command line (null: none)
  std::vector<records::MetricsLine> steps;  // finished train lines, in order
  int rejected = 0;                         // train lines that skipped their update or hold a non-finite figure
};

struct Run {
  std::string dir, label;
  Config cfg;  // the invocation's [cluster] and [plan] with the run's [model], [parallel] and batch
  int world = 0;
  std::string world_from;  // where the rank count came from
  int64_t first_step = 0, last_step = 0;
  int used = 0, left_out = 0;  // steps in the medians; warm-up, skipped and non-finite steps
  Measured m;
  std::vector<ProfiledGemm> gemms;  // none: no kernel profile, or one written before matmul shapes were recorded
};

double median(std::vector<double> v) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double number_or(const json& j, const char* key, double dflt) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : dflt;
}

std::string string_or(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

// A step that trained: not skipped, finite loss, no phase time negative, a positive total.
bool finished_step(const records::MetricsLine& m) {
  if (m.skipped.value_or(false) || !m.loss || !m.time_s) return false;
  const records::StepTimes& t = *m.time_s;
#define CAIRN_CALIBRATE_NEGATIVE(name) \
  if (records::phase_seconds(t.name) < 0) return false;
  CAIRN_STEP_TIME_FIELDS(CAIRN_CALIBRATE_NEGATIVE)
#undef CAIRN_CALIBRATE_NEGATIVE
  return t.total > 0;
}

std::vector<Segment> read_segments(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw UsageError(errno_message("cannot read", path));
  std::vector<Segment> segs(1);  // lines before any provenance line (none in files cairn-train writes)
  std::string line;
  int64_t torn = 0;  // the line that did not parse, when it may still be the torn last line of a killed run
  for (int64_t line_no = 1; std::getline(f, line); ++line_no) {
    // Only the last line can be torn: cairn-train drops a torn line when it resumes. One with lines after it is
    // damage, and skipping it would fit the run on steps it never logged that way.
    if (torn)
      throw UsageError(file_message("malformed metrics line", path + ":" + std::to_string(torn),
                                    "not a JSON object, and not the last line (only a killed run's last line may be "
                                    "torn)"));
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      torn = line_no;
      continue;
    }
    // A complete line is read through the record: a wrong type is an error naming the file, line and key.
    records::MetricsLine m =
        records::MetricsLine::from_json(JsonFields(j, path + ":" + std::to_string(line_no), "metrics line"));
    if (m.kind == "provenance") {
      segs.emplace_back();
      if (m.provenance.is_object()) {
        segs.back().config_toml = string_or(m.provenance, "config");
        segs.back().writer = {{"host", string_or(m.provenance, "host")},
                              {"time_utc", string_or(m.provenance, "time_utc")},
                              {"command_line", string_or(m.provenance, "command_line")}};
      }
    } else if (m.kind == "train") {
      if (finished_step(m)) segs.back().steps.push_back(std::move(m));
      else ++segs.back().rejected;
    }
  }
  return segs;
}

// Medians over the steps after the warm-up (at least one step is kept, so a short run still counts).
Measured measure(const std::vector<records::MetricsLine>& steps, size_t skip) {
  std::vector<double> total, compute, tp, cp, dp, zero, pp, opt;
  std::map<int64_t, int> critical;              // stage -> steps it was critical
  std::vector<std::vector<double>> stage_busy;  // stage -> its busy time per step
  for (size_t i = skip; i < steps.size(); ++i) {
    for (const records::StageTimes& st : steps[i].stages) {
      if (st.stage < 0 || st.stage >= 4096) continue;
      if (stage_busy.size() <= size_t(st.stage)) stage_busy.resize(size_t(st.stage) + 1);
      stage_busy[size_t(st.stage)].push_back(records::stage_busy_seconds(st.time));
    }
    const int c = records::critical_stage(steps[i].stages);
    if (c >= 0) ++critical[steps[i].stages[size_t(c)].stage];
    const records::StepTimes& t = c >= 0 ? steps[i].stages[size_t(c)].time : *steps[i].time_s;  // finished_step
    const double tpc = records::phase_seconds(t.tp_comm), cpc = records::phase_seconds(t.cp_comm),
                 zc = records::phase_seconds(t.zero_comm);
    total.push_back(steps[i].time_s->total);
    // forward and backward include the TP, CP and ZeRO-2/3 collectives inside them (records.h), not the pipeline
    // waits.
    compute.push_back(std::max(0.0, records::compute_seconds(t)));
    tp.push_back(tpc);
    cp.push_back(cpc);
    dp.push_back(records::phase_seconds(t.comm) + zc);
    zero.push_back(zc);
    pp.push_back(records::phase_seconds(t.pp_wait));
    opt.push_back(records::phase_seconds(t.optimizer));
  }
  Measured m;
  m.total = median(total);
  m.compute = median(compute);
  m.tp_comm = median(tp);
  m.cp_comm = median(cp);
  m.dp_comm = median(dp);
  m.zero_comm = median(zero);
  m.pp_wait = median(pp);
  m.optimizer = median(opt);
  for (const auto& [stage, count] : critical)
    if (m.stage < 0 || count > critical[m.stage]) m.stage = static_cast<int>(stage);
  for (const std::vector<double>& busy : stage_busy) m.stage_busy.push_back(median(busy));
  return m;
}

// Kernel classes of the backend's ops, as the cost model prices them: matmuls at the GEMM efficiencies, the attention
// kernel at attention_efficiency, the rest (norms, GELU, residual adds, the loss, the embedding, context parallelism's
// output merges) at the memory bandwidth. The optimizer's ops (its own phase) and evaluation's argmax count in none.
enum KernelClass { kClassGemm = 0, kClassAttention, kClassMemory, kClassNone };
KernelClass kernel_class(const std::string& op) {
  if (op.starts_with("matmul_")) return kClassGemm;
  if (op.starts_with("attention_") && op != "attention_merge") return kClassAttention;
  if (op == "adamw_update" || op == "squared_norm" || op == "scale" || op == "argmax_rows") return kClassNone;
  return kClassMemory;
}

// Rank 0's kernel seconds per class and its matmul calls by shape from <run>/train/kernel_profile.json (the rank
// whose phases the fit reads), or nothing when the run was not profiled. The profile covers the whole process (warm-up
// steps, validation passes), so only its proportions are used. A profile written by another start of the run (a resume
// without
// --profile-kernels leaves the earlier one, perhaps of another layout) is not evidence for the measured steps.
struct KernelProfile {
  std::array<double, 3> seconds{0, 0, 0};  // per KernelClass
  std::vector<ProfiledGemm> gemms;
};
std::optional<KernelProfile> read_kernel_profile(const std::string& dir, const Segment& seg) {
  const std::string path = join_path(dir, "train/kernel_profile.json");
  if (!path_exists(path)) return std::nullopt;
  const json doc = json::parse(read_file(path), nullptr, false);
  if (doc.is_object() && doc.contains("provenance") && doc["provenance"].is_object() && seg.writer.is_object()) {
    const json& p = doc["provenance"];
    for (const char* key : {"host", "time_utc", "command_line"})
      if (string_or(p, key) != seg.writer[key].get<std::string>()) {
        CAIRN_LOG_WARN("%s: written by another start of the run (%s %s, the measured steps' start %s %s); its "
                       "kernel times are not used",
                       path.c_str(), string_or(p, "host").c_str(), string_or(p, "time_utc").c_str(),
                       seg.writer["host"].get<std::string>().c_str(),
                       seg.writer["time_utc"].get<std::string>().c_str());
        return std::nullopt;
      }
  }
  const json* ops = nullptr;
  const json* shapes = nullptr;
  if (doc.is_object() && doc.contains("ranks") && doc["ranks"].is_array())
    for (const json& r : doc["ranks"])
      if (r.is_object() && r.value("rank", -1) == 0 && r.contains("ops") && r["ops"].is_array()) {
        ops = &r["ops"];
        if (r.contains("gemm_shapes")) shapes = &r["gemm_shapes"];
      }
  if (!ops)
    throw UsageError(
        file_message("not a kernel profile", path, "expected {\"ranks\": [{\"rank\": 0, \"ops\": [...]}]}"));
  KernelProfile prof;
  if (shapes) {
    if (!shapes->is_array())
      throw UsageError(file_message("gemm_shapes is not a list in kernel profile", path, "rank 0"));
    for (const json& g : *shapes) {
      auto positive = [&](const char* key) {
        return g.is_object() && g.contains(key) && g[key].is_number() && g[key].get<double>() > 0;
      };
      const bool ok = positive("n") && positive("c") && positive("oc") && positive("calls") && g.contains("seconds") &&
                      g["seconds"].is_number() && g["seconds"].get<double>() >= 0 && g.contains("op") &&
                      (g["op"] == "matmul_forward" || g["op"] == "matmul_backward") &&
                      (!g.contains("grad_input") || g["grad_input"].is_boolean());
      if (!ok) throw UsageError(file_message("bad gemm_shapes entry in kernel profile", path, g.dump()));
      prof.gemms.push_back({g["op"] == "matmul_backward", g.value("grad_input", true), g["n"].get<double>(),
                            g["c"].get<double>(), g["oc"].get<double>(), g["calls"].get<double>(),
                            g["seconds"].get<double>()});
    }
  }
  std::array<double, 3>& sec = prof.seconds;
  for (const json& o : *ops) {
    if (!o.is_object() || !o.contains("op") || !o["op"].is_string() || !o.contains("seconds") ||
        !o["seconds"].is_number() || !(o["seconds"].get<double>() >= 0))
      throw UsageError(file_message("bad op entry in kernel profile", path, o.dump()));
    const KernelClass k = kernel_class(o["op"].get<std::string>());
    if (k != kClassNone) sec[size_t(k)] += o["seconds"].get<double>();
  }
  if (!(sec[0] + sec[1] + sec[2] > 0))
    throw UsageError(file_message("no kernel time in kernel profile", path, "rank 0"));
  // On a GPU the profiled backend waits for the device after every op: the run's own step times lose their CPU/GPU
  // overlap, and the fit learns them as they are.
  const std::string backend = string_or(doc, "backend");
  if (!backend.empty() && !backend.starts_with("cpu"))
    CAIRN_LOG_WARN("%s: profiled on %s, where every kernel waited for the device: this run's step times include those "
                   "waits and the fit learns them as compute (on a GPU, fit runs trained without --profile-kernels)",
                   path.c_str(), backend.c_str());
  return prof;
}

json toml_node_to_json(const toml::node& node) {
  if (auto t = node.as_table()) {
    json obj = json::object();
    for (auto&& [k, v] : *t) obj[std::string(k.str())] = toml_node_to_json(v);
    return obj;
  }
  if (auto a = node.as_array()) {
    json arr = json::array();
    for (auto& e : *a) arr.push_back(toml_node_to_json(e));
    return arr;
  }
  if (auto s = node.as_string()) return s->get();
  if (auto i = node.as_integer()) return i->get();
  if (auto f = node.as_floating_point()) return f->get();
  if (auto b = node.as_boolean()) return b->get();
  return nullptr;  // dates: no config key of [model], [parallel] or [train] is one
}

// The run's effective config as tables: the chosen start's provenance line, else train/config.toml (which
// cairn-train rewrites at every start).
json run_tables(const Segment& seg, const std::string& dir, std::string& where) {
  const std::string metrics = join_path(dir, "train/metrics.jsonl");
  if (!seg.config_toml.empty()) {
    try {
      where = metrics + " (provenance config)";
      return toml_node_to_json(toml::parse(seg.config_toml, metrics));
    } catch (const toml::parse_error& e) {
      CAIRN_LOG_WARN("%s: the provenance config does not parse (%s); reading train/config.toml", metrics.c_str(),
                     std::string(e.description()).c_str());
    }
  }
  where = join_path(dir, "train/config.toml");
  if (!path_exists(where))
    throw UsageError(
        file_message("not a usable cairn-train run", dir,
                     "no config: train/metrics.jsonl has no provenance config and train/config.toml is missing"));
  return read_toml_file_as_json(where);
}

// The vocabulary cairn-train used when [model] vocab = 0: the dataset's, padded to a multiple of 64 (trainer.cpp).
int64_t dataset_vocab(const json& tables, const std::string& dir) {
  std::string data;
  if (tables.contains("data") && tables["data"].is_object()) data = string_or(tables["data"], "path");
  if (data.empty()) data = join_path(dir, "data");
  const std::string index = join_path(data, "index.json");
  json j = path_exists(index) ? json::parse(read_file(index), nullptr, false) : json();
  const double v = j.is_object() ? number_or(j, "vocab_size", 0) : 0;
  if (!(v >= 1))
    throw UsageError(file_message("cannot tell the vocabulary of run", dir,
                                  "[model] vocab = 0 (the dataset's) and the dataset index \"" + index +
                                      "\" is missing or has no vocab_size"));
  return (int64_t(v) + 63) / 64 * 64;
}

// The config a run is evaluated with: the site's cluster and modelling assumptions ([cluster], [plan]) from the
// invocation, the model, layout and batch from the run, resolved the way cairn-train resolves them (settings.cpp).
Config run_config(const Config& site, const json& tables, const std::string& where, const std::string& dir) {
  Config c = site;
  const Origin from{Origin::File, where};
  // A key the run's config lacks (written by an older cairn-train) takes its default, not the invocation's value.
  for (const KeySpec& spec : c.schema().keys())
    if ((spec.section == "model" || spec.section == "parallel") && !spec.default_value.is_null())
      c.set(spec.section + "." + spec.key, spec.default_value, Origin{});
  for (const char* section : {"model", "parallel"}) {
    auto sec = tables.find(section);
    if (sec == tables.end() || !sec->is_object()) continue;
    for (const auto& [k, v] : sec->items()) {
      if (v.is_null()) continue;
      if (!c.schema().find(section, k)) {
        CAIRN_LOG_WARN("%s: [%s] %s is not a key of this cairn-plan; ignored", where.c_str(), section, k.c_str());
        continue;
      }
      c.set(std::string(section) + "." + k, v, from);
    }
  }
  const json train = tables.contains("train") && tables["train"].is_object() ? tables["train"] : json::object();
  if (train.contains("global_batch")) c.set("train.global_batch", train["global_batch"], from);
  c.set("plan.global_batch", 0, from);  // the run's batch, whatever the invocation's [plan] says
  const int64_t micro = int64_t(number_or(train, "micro_batch", 0));
  if (micro > 0) c.set("parallel.mb", micro, from);
  const std::string rc = string_or(train, "recompute");
  if (!rc.empty() && rc != "none") c.set("parallel.recompute", rc, from);
  if (read_section<ModelSection>(c).vocab == 0) c.set("model.vocab", dataset_vocab(tables, dir), from);
  // How cairn-train computes, whatever the invocation's [plan] says of other stacks: its attention keeps only the
  // row log-sum-exp and recomputes the probabilities in backward (flash attention, which context parallelism
  // needs), its GPT has no dropout, its TP collectives are synchronous and its loss is one fused kernel.
  const Origin impl{Origin::Program, "cairn-train's implementation"};
  c.set("plan.flash_attention", true, impl);
  c.set("plan.dropout", false, impl);
  c.set("plan.tp_async_backward", false, impl);
  c.set("plan.cross_entropy", "fused", impl);
  return c;
}

// A final checkpoint's DONE (records::read_checkpoint_done: step, world_size) written during the steps [first, last].
int checkpoint_world(const std::string& dir, int64_t first, int64_t last) {
  const fs::path ckpt = fs::path(dir) / "train" / "ckpt";
  std::error_code ec;
  int64_t best_step = -1;
  int world = 0;
  for (fs::directory_iterator it(ckpt, ec), end; !ec && it != end; it.increment(ec)) {
    // A marker that does not read belongs to a checkpoint that is no evidence: skip it.
    std::optional<records::CheckpointDone> marker;
    try {
      marker = records::read_checkpoint_done(it->path().string());
    } catch (const Error&) {
      continue;
    }
    if (!marker) continue;
    const int64_t step = marker->step;
    if (step >= first && step <= last && step > best_step && marker->world_size) {
      best_step = step;
      world = int(*marker->world_size);
    }
  }
  return world;
}

// How many ranks ran the steps: [parallel] dp x cp x tp x pp when dp is fixed; else a checkpoint of that start;
// else the train lines themselves (tflops = model FLOPs per token x tokens/s / ranks, step_report.cpp).
int run_world(const Config& c, const Segment& seg, const std::string& dir, int64_t first, int64_t last,
              std::string& from) {
  const auto parallel = read_section<ParallelSection>(c);
  const int64_t tp = parallel.tp, pp = parallel.pp, dp = parallel.dp, cp = parallel.cp;
  if (dp > 0) {
    from = "[parallel] dp x cp x tp x pp";
    return int(dp * cp * tp * pp);
  }
  if (int w = checkpoint_world(dir, first, last); w > 0) {
    from = "checkpoint DONE world_size";
    return w;
  }
  costmodel::ModelSpec spec = costmodel::model_from_section(read_section<ModelSection>(c));
  spec.kv_heads = spec.heads;  // cairn-train's MFU counts a GPT block (step_report.cpp: flop_counts)
  spec.ffn_hidden = 4 * spec.hidden;
  const double per_token = costmodel::model_flops_per_token(spec);
  std::vector<double> ws;
  for (const records::MetricsLine& s : seg.steps) {
    const double tf = s.tflops.value_or(0), tps = s.tokens_per_s.value_or(0);
    if (tf > 0 && tps > 0) ws.push_back(per_token * tps / (tf * 1e12));
  }
  const double w = median(ws);
  const double r = std::round(w);
  if (!(r >= 1) || std::fabs(w - r) > 0.01 * r || int64_t(r) % (cp * tp * pp) != 0)
    throw UsageError(file_message("cannot tell how many ranks ran", dir,
                                  "[parallel] dp = 0, no checkpoint of the last start, and tflops / tokens_per_s in "
                                  "train/metrics.jsonl do not give a whole multiple of cp x tp x pp"));
  from = "tflops and tokens_per_s of the train lines";
  return int(r);
}

std::string run_label(const std::string& dir) {
  std::string d = dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  const std::string base = fs::path(d).filename().string();
  return base.empty() ? d : base;
}

// Reads one run directory; UsageError (exit 2) naming it and what is missing when it cannot be used.
Run load_run(const Config& site, const std::string& dir, int warmup) {
  if (!fs::is_directory(dir)) throw UsageError(file_message("not a run directory", dir, "no such directory"));
  const std::string metrics = join_path(dir, "train/metrics.jsonl");
  if (!path_exists(metrics)) throw UsageError(file_message("not a cairn-train run", dir, "no train/metrics.jsonl"));
  std::vector<Segment> segs = read_segments(metrics);
  // The last start that finished steps: a resume that died at once leaves the earlier start's steps usable.
  const Segment* seg = nullptr;
  int rejected = 0;
  for (const Segment& s : segs) rejected += s.rejected;
  for (auto it = segs.rbegin(); it != segs.rend() && !seg; ++it)
    if (!it->steps.empty()) seg = &*it;
  if (!seg)
    throw UsageError(file_message("no finished training steps in", dir,
                                  rejected ? strprintf("train/metrics.jsonl has %d train lines, every one skipped or "
                                                       "non-finite",
                                                       rejected)
                                           : std::string("train/metrics.jsonl has no train lines")));
  Run r;
  r.dir = dir;
  r.label = run_label(dir);
  std::string where;
  const json tables = run_tables(*seg, dir, where);
  r.cfg = run_config(site, tables, where, dir);
  const size_t n = seg->steps.size();
  const size_t skip = std::min(n - 1, size_t(std::max(0, warmup)));
  if (skip < size_t(std::max(0, warmup)))
    CAIRN_LOG_WARN("%s: only %zu finished steps; %zu warm-up steps left out instead of %d", dir.c_str(), n, skip,
                   warmup);
  r.first_step = seg->steps.front().step.value_or(0);
  r.last_step = seg->steps.back().step.value_or(0);
  r.world = run_world(r.cfg, *seg, dir, r.first_step, r.last_step, r.world_from);
  r.used = int(n - skip);
  r.left_out = int(skip) + seg->rejected;
  r.m = measure(seg->steps, skip);
  if (const auto prof = read_kernel_profile(dir, *seg)) {
    const std::array<double, 3>& sec = prof->seconds;
    const double all = sec[0] + sec[1] + sec[2];
    r.m.profiled = true;
    r.m.gemm = r.m.compute * sec[kClassGemm] / all;
    r.m.attention = r.m.compute * sec[kClassAttention] / all;
    r.m.memory = r.m.compute * sec[kClassMemory] / all;
    r.gemms = prof->gemms;
  }
  return r;
}

// ------------------------------------------------------------------ fitting

// compute: the device's achievable fractions (all of them; with kernel profiles the GEMM ones only, attention and
// memory then taking the attention kernel's and the memory bandwidth's); intra / inter: a link tier's.
enum Knob { kCompute = 0, kAttention, kMemory, kIntra, kInter, kKnobs };
constexpr const char* kKnobName[kKnobs] = {"compute", "attention", "memory", "intra", "inter"};

struct Factors {
  std::array<double, kKnobs> k{1.0, 1.0, 1.0, 1.0, 1.0};
  bool by_kernel_class = false;  // every run has a kernel profile: compute split into GEMM, attention and memory
};

// The kernel knob of a device efficiency key: GEMM keys (table, large-GEMM, FP8), the attention kernel's, and the
// memory-bound rest (hbm_efficiency, any kernel class the schema adds).
int device_knob(const std::string& key) {
  if (key.find("gemm") != std::string::npos) return kCompute;
  return key == "attention_efficiency" ? kAttention : kMemory;
}

// The [cluster] keys a device knob scales: every achievable fraction of the device for compute (never a link tier's),
// or, fitted by kernel class, those of its class.
std::vector<std::string> compute_keys(const json& cluster, int knob = kCompute, bool by_class = false) {
  std::vector<std::string> keys;
  for (const auto& [k, v] : cluster.items()) {
    if (!k.ends_with("efficiency") || k.starts_with("intra_") || k.starts_with("inter_")) continue;
    if (by_class ? device_knob(k) != knob : knob != kCompute) continue;
    if (v.is_number() || (v.is_array() && !v.empty())) keys.push_back(k);
  }
  return keys;
}
bool device_knob_of(int knob) { return knob == kCompute || knob == kAttention || knob == kMemory; }

// The [cluster] key a tier's knob scales: the fraction of nominal bandwidth, or with a sweep's fabric the fraction of
// the fabric's fitted speed that training's collectives get.
std::string tier_key(const json& base, int knob) {
  const bool fabric =
      base.contains("fabric") && base["fabric"].is_string() && !base["fabric"].get<std::string>().empty();
  return std::string(kKnobName[knob]) + (fabric ? "_fabric_efficiency" : "_efficiency");
}

// Multiplies an efficiency within its schema range (a fraction of nominal cannot pass 1; table entries (0, 1]).
double scale_within(const std::string& key, double v, double k) {
  const KeySpec* spec = registry().find("cluster", key);
  const double lo = spec && spec->min ? *spec->min : 1e-4, hi = spec && spec->max ? *spec->max : 1.0;
  return std::clamp(v * k, lo, hi);
}

// The [cluster] values the factors change (only those keys), from the invocation's cluster section `base`.
// The factors between which knob `knob` still changes some value: beyond them every efficiency it scales sits at
// its schema limit, so a larger factor would be a number in the file that changes nothing.
std::pair<double, double> moving_range(const json& base, int knob, bool by_class) {
  double lo = 1e300, hi = 0;
  auto widen = [&](const std::string& key, const json& v) {
    if (!v.is_number() || !(v.get<double>() > 0)) return;
    const double x = v.get<double>();
    lo = std::min(lo, scale_within(key, x, 0.0) / x);
    hi = std::max(hi, scale_within(key, x, 1e300) / x);
  };
  if (device_knob_of(knob)) {
    for (const std::string& key : compute_keys(base, knob, by_class)) {
      if (base[key].is_array())
        for (const json& e : base[key]) widen(key, e);
      else widen(key, base[key]);
    }
  } else {
    const std::string key = tier_key(base, knob);
    if (base.contains(key)) widen(key, base[key]);
  }
  return hi > 0 ? std::make_pair(lo, hi) : std::make_pair(1.0, 1.0);
}

json scaled_cluster(const json& base, const Factors& f) {
  json out = json::object();
  // The GEMM table's shapes: the refit may have added entries at the runs' shapes (learn_gemm_shapes).
  for (const char* key : {"gemm_table_m", "gemm_table_n", "gemm_table_k"})
    if (base.contains(key) && base[key].is_array() && !base[key].empty()) out[key] = base[key];
  for (const std::string& key : compute_keys(base)) {
    const double k = f.k[size_t(f.by_kernel_class ? device_knob(key) : kCompute)];
    const json& v = base[key];
    if (v.is_array()) {
      json a = json::array();
      for (const json& e : v) a.push_back(e.is_number() ? json(scale_within(key, e.get<double>(), k)) : e);
      out[key] = a;
    } else {
      out[key] = scale_within(key, v.get<double>(), k);
    }
  }
  for (int t : {kIntra, kInter}) {
    const std::string key = tier_key(base, t);
    if (base.contains(key) && base[key].is_number()) out[key] = scale_within(key, base[key].get<double>(), f.k[t]);
  }
  return out;
}

// The run's config with `cluster`'s [cluster] values in place.
Config with_cluster(const Run& r, const json& cluster) {
  Config c = r.cfg;
  const Origin o{Origin::Program, "cairn-plan calibrate --from-runs"};
  for (const auto& [k, v] : cluster.items()) c.set("cluster." + k, v, o);
  return c;
}

costmodel::Evaluation evaluate(const Run& r, const json& cluster) {
  return costmodel::evaluate_config(with_cluster(r, cluster), r.world);
}

struct Obs {
  double pred = 0, meas = 0;
  bool dp = false;  // an exposed DP wait (else compute, or TP or CP collectives)
};

// (predicted, measured) pairs of the terms a knob governs, over `runs`, under factors `f`: compute time for the
// compute knob; a tier's TP and CP collectives and exposed DP communication for that tier's knob.
std::vector<Obs> observe(const std::vector<const Run*>& runs, const json& base, const Factors& f, int knob) {
  const json cluster = scaled_cluster(base, f);
  std::vector<Obs> obs;
  for (const Run* r : runs) {
    const costmodel::Evaluation e = evaluate(*r, cluster);
    const costmodel::Breakdown& b = e.b;
    if (device_knob_of(knob)) {  // all compute, or by kernel class the profile's share of it
      double pred = b.gemm + b.memory_bound, meas = r->m.compute;
      if (f.by_kernel_class) {
        pred = knob == kCompute ? b.gemm - b.attention : knob == kAttention ? b.attention : b.memory_bound;
        meas = knob == kCompute ? r->m.gemm : knob == kAttention ? r->m.attention : r->m.memory;
      } else if (knob != kCompute) {
        continue;  // attention and memory are part of compute
      }
      if (pred > 0 && meas > 0) obs.push_back({pred, meas});
      continue;
    }
    const std::string tier = kKnobName[knob];
    if (e.plan.tp > 1 && b.tp_tier == tier && b.tp_comm > 0 && r->m.tp_comm > 0)
      obs.push_back({b.tp_comm, r->m.tp_comm, false});
    if (e.plan.cp > 1 && b.cp_tier == tier && b.cp_comm > 0 && r->m.cp_comm > 0)
      obs.push_back({b.cp_comm, r->m.cp_comm, false});
    // The data-parallel group spans dp x cp ranks (cp ranks hold the same parameters; dp_tier is "-" without one).
    // A fully hidden measured wait (0) still says the link is faster than modelled: floored, not dropped.
    if (b.dp_tier == tier && b.dp_exposed > 0) obs.push_back({b.dp_exposed, std::max(r->m.dp_comm, 1e-6), true});
  }
  return obs;
}

// Median predicted / measured; `only` 0: every term, 1: TP/CP collectives and compute, 2: exposed DP waits.
double median_ratio(const std::vector<Obs>& obs, int only = 0) {
  std::vector<double> r;
  for (const Obs& o : obs)
    if (only == 0 || (only == 2) == o.dp) r.push_back(o.pred / o.meas);
  return median(r);
}

double sum_pred(const std::vector<Obs>& obs) {
  double s = 0;
  for (const Obs& o : obs) s += o.pred;
  return s;
}

// ------------------------------------------------------------------ GEMM shapes

// One GEMM shape the runs' kernel profiles timed (m x k times k x n, as the cost model names GEMMs).
struct ShapeFit {
  double m = 0, n = 0, k = 0;
  double predicted = 0, measured = 0;    // seconds over every profiled call, priced by the table before
  double eff_before = 0, eff_after = 0;  // the model's achieved fraction of peak at this shape, before and after
  double level = 1;                      // measured / predicted over every shape
  int runs = 0;
  bool replaced = false;  // the table had an entry at this shape (else one was added)
  bool capped = false;    // the table could not give it the target (held at the schema's 1.0)
  // The efficiency the shape's entry should give: its speed relative to the other shapes, at the table's level.
  double target() const { return eff_before * predicted / measured * level; }
};

costmodel::Cluster cluster_of(const Run& r, const json& cluster) {
  return costmodel::cluster_from_config(with_cluster(r, cluster));
}

// The GEMMs of one profiled matmul call: forward out = inp @ W is (n, oc, c); backward dinp = dout @ W^T is (n, c, oc)
// and dweight = inp^T @ dout is (c, oc, n) (the cost model's own backward GEMMs, e.g. the classifier's).
std::vector<std::array<double, 3>> gemms_of(const ProfiledGemm& g) {
  if (!g.backward) return {{g.n, g.oc, g.c}};
  std::vector<std::array<double, 3>> out;
  if (g.grad_input) out.push_back({g.n, g.c, g.oc});
  out.push_back({g.c, g.oc, g.n});
  return out;
}

double gemm_seconds(const costmodel::Cluster& c, const std::array<double, 3>& s) {
  const double eff = costmodel::gemm_efficiency_shape(c, s[0], s[1], s[2]);
  return eff > 0 ? 2 * s[0] * s[1] * s[2] / (c.peak_tflops * 1e12 * eff) : 0;
}

// GEMM by shape: each shape the runs' profiles timed gets a gemm_table entry at the efficiency its calls ran at
// relative to the other shapes (a backward call's time split between its two GEMMs as the table prices them),
// replacing the table's entry at that shape or added beside calibrate's (between entries the table interpolates).
// Returns the cluster with that table; the fit's GEMM factor then scales it as a whole to the runs' step times.
json learn_gemm_shapes(const std::vector<const Run*>& runs, const json& base, std::vector<ShapeFit>& fits) {
  fits.clear();
  const Run* first = nullptr;
  for (const Run* r : runs)
    if (!r->gemms.empty() && !first) first = r;
  if (!first) return base;
  const costmodel::Cluster before = cluster_of(*first, base);
  std::map<std::array<long long, 3>, ShapeFit> by_shape;
  for (const Run* r : runs) {
    std::set<std::array<long long, 3>> seen;  // this run's shapes (a shape counts each run once)
    for (const ProfiledGemm& g : r->gemms) {
      const std::vector<std::array<double, 3>> parts = gemms_of(g);
      std::vector<double> pred;  // one call's seconds per GEMM, as the table prices it
      for (const auto& s : parts) pred.push_back(gemm_seconds(before, s));
      const double pred_call = std::accumulate(pred.begin(), pred.end(), 0.0);
      if (!(pred_call > 0)) continue;
      for (size_t i = 0; i < parts.size(); ++i) {
        const auto& s = parts[i];
        const std::array<long long, 3> key{std::llround(s[0]), std::llround(s[1]), std::llround(s[2])};
        ShapeFit& f = by_shape[key];
        f.m = s[0], f.n = s[1], f.k = s[2];
        f.predicted += pred[i] * g.calls;
        f.measured += g.seconds * pred[i] / pred_call;
        if (seen.insert(key).second) ++f.runs;
      }
    }
  }
  json out = base;
  auto list = [&](const char* key) {
    return out.contains(key) && out[key].is_array() ? out[key].get<std::vector<double>>() : std::vector<double>{};
  };
  std::vector<double> tm = list("gemm_table_m"), tn = list("gemm_table_n"), tk = list("gemm_table_k");
  std::vector<double> te = list("gemm_table_efficiency"), tf = list("gemm_table_fp8_efficiency");
  const bool fp8 = !tf.empty() && tf.size() == tm.size();
  // The profile times every call of the process, cold first steps included, while the fit reads steady steps: the
  // shapes' times say how fast each runs relative to the others, the step times (the compute factor) how fast all are.
  // The level is the compute factor's to set: lowered where the fastest shape would pass 1.0 of peak_tflops, so that
  // no entry is cut at the schema's limit and every shape keeps its speed relative to the others.
  double all_meas = 0, all_pred = 0, fastest = 0;
  for (auto& [key, f] : by_shape) {
    if (!(f.measured > 0) || !(f.predicted > 0)) continue;
    f.eff_before = costmodel::gemm_efficiency_shape(before, f.m, f.n, f.k);
    all_meas += f.measured, all_pred += f.predicted;
    fastest = std::max(fastest, f.eff_before * f.predicted / f.measured);
  }
  if (!(all_meas > 0)) return base;
  const double level = std::min(all_meas / all_pred, 1 / fastest);
  std::vector<std::vector<size_t>> slots;  // each fit's entries in the table
  for (auto& [key, f] : by_shape) {
    if (!(f.measured > 0) || !(f.predicted > 0)) continue;
    f.level = level;
    // Calibrate may have measured a shape twice (its grid and the model's shapes): every such entry is replaced.
    std::vector<size_t> entries;
    const double target = f.target();
    for (size_t i = 0; i < tm.size(); ++i)
      if (std::llround(tm[i]) == key[0] && std::llround(tn[i]) == key[1] && std::llround(tk[i]) == key[2]) {
        entries.push_back(i);
        te[i] = std::clamp(target, 1e-4, 1.0);
      }
    f.replaced = !entries.empty();
    if (!f.replaced) {
      entries.push_back(tm.size());
      tm.push_back(f.m), tn.push_back(f.n), tk.push_back(f.k), te.push_back(std::clamp(target, 1e-4, 1.0));
      // An FP8 table keeps its length: the new entry takes the FP8/bf16 ratio of the nearest entry (log space).
      if (fp8) {
        size_t near = 0;
        double best = 1e300;
        for (size_t i = 0; i < tf.size(); ++i) {
          const double dm = std::log(f.m / tm[i]), dn = std::log(f.n / tn[i]), dk = std::log(f.k / tk[i]);
          if (dm * dm + dn * dn + dk * dk < best) best = dm * dm + dn * dn + dk * dk, near = i;
        }
        tf.push_back(std::clamp(target * tf[near] / te[near], 1e-4, 1.0));
      }
    }
    slots.push_back(entries);
    fits.push_back(f);
  }
  auto table = [&] {
    out["gemm_table_m"] = tm, out["gemm_table_n"] = tn, out["gemm_table_k"] = tk, out["gemm_table_efficiency"] = te;
    if (fp8) out["gemm_table_fp8_efficiency"] = tf;
    return cluster_of(*first, out);
  };
  // A shape the table holds takes its own entry, in proportion: one correction gives each learned shape its target
  // (an entry is a fraction of the nominal peak; the model may run the device at another clock).
  const costmodel::Cluster now = table();
  for (size_t i = 0; i < fits.size(); ++i) {
    const double got = costmodel::gemm_efficiency_shape(now, fits[i].m, fits[i].n, fits[i].k);
    if (got > 0)
      for (size_t at : slots[i]) te[at] = std::clamp(te[at] * fits[i].target() / got, 1e-4, 1.0);  // schema (0, 1]
  }
  const costmodel::Cluster after = table();
  for (ShapeFit& f : fits) {
    f.eff_after = costmodel::gemm_efficiency_shape(after, f.m, f.n, f.k);
    f.capped = f.eff_after < f.target() * (1 - 1e-3);
  }
  return out;
}

struct KnobFit {
  bool exercised = false, adjustable = true;
  bool clamped = false;   // the runs ask for a factor outside [kFactorMin, kFactorMax]
  bool at_limit = false;  // or beyond the point where every efficiency it scales is at its schema limit (1.0)
  int terms = 0, dp_terms = 0;
  double ratio_tp = std::nan(""), ratio_dp = std::nan("");         // a tier's TP/CP and DP terms apart, before the fit
  double wanted = 1;                                               // the factor the runs asked for, before the clamp
  double ratio_before = std::nan(""), ratio_after = std::nan("");  // median predicted / measured of its terms
};

// Bounds the factor the runs ask for (`wanted`) to [kFactorMin, kFactorMax] and to where it still moves a value,
// recording which bound held it.
double bound(KnobFit& kf, const json& base, int knob, bool by_class, double wanted) {
  const auto [lo_move, hi_move] = moving_range(base, knob, by_class);
  const double lo = std::max(kFactorMin, lo_move), hi = std::min(kFactorMax, hi_move);
  kf.wanted = wanted;
  kf.clamped = wanted < kFactorMin * (1 - 1e-9) || wanted > kFactorMax * (1 + 1e-9);
  kf.at_limit = !kf.clamped && (wanted < lo * (1 - 1e-9) || wanted > hi * (1 + 1e-9));
  return std::clamp(wanted, lo, hi);
}

struct Fit {
  json base;  // the invocation's cluster, with the GEMM table learned from the runs' shapes
  Factors f;
  std::array<KnobFit, kKnobs> knob;
  int runs = 0, profiled = 0, shaped = 0;  // runs fitted, of which with a kernel profile, of which with GEMM shapes
  std::vector<ShapeFit> shapes;
};

// Median-of-ratios fit of each knob in turn (compute first: the exposed DP wait depends on backward time), repeated
// until stable, because the fixed per-kernel time and the roofline do not scale with an efficiency.
Fit fit_runs(const std::vector<const Run*>& runs, const json& invocation) {
  Fit fit;
  fit.runs = int(runs.size());
  fit.profiled = int(std::count_if(runs.begin(), runs.end(), [](const Run* r) { return r->m.profiled; }));
  fit.shaped = int(std::count_if(runs.begin(), runs.end(), [](const Run* r) { return !r->gemms.empty(); }));
  fit.base = learn_gemm_shapes(runs, invocation, fit.shapes);
  const json& base = fit.base;
  fit.f.by_kernel_class = fit.runs > 0 && fit.profiled == fit.runs;
  for (int k = 0; k < kKnobs; ++k) {
    KnobFit& kf = fit.knob[size_t(k)];
    const std::vector<Obs> obs = observe(runs, base, fit.f, k);
    if (obs.empty()) continue;
    kf.exercised = true;
    kf.terms = int(obs.size());
    kf.ratio_before = median_ratio(obs);
    kf.ratio_tp = median_ratio(obs, 1);
    kf.ratio_dp = median_ratio(obs, 2);
    kf.dp_terms = int(std::count_if(obs.begin(), obs.end(), [](const Obs& o) { return o.dp; }));
    // Fabric fits replace a tier's nominal efficiency; a term that does not move with its knob cannot be fitted.
    Factors probe = fit.f;
    probe.k[size_t(k)] = 0.5;
    kf.adjustable = std::fabs(sum_pred(observe(runs, base, probe, k)) / sum_pred(obs) - 1) > 1e-3;
  }
  for (int round = 0; round < 30; ++round) {
    double worst = 0;
    for (int k = 0; k < kKnobs; ++k) {
      KnobFit& kf = fit.knob[size_t(k)];
      if (!kf.exercised || !kf.adjustable) continue;
      const double ratio = median_ratio(observe(runs, base, fit.f, k));
      double& factor = fit.f.k[size_t(k)];
      factor = bound(kf, base, k, fit.f.by_kernel_class, factor * ratio);
      if (!kf.clamped && !kf.at_limit) worst = std::max(worst, std::fabs(std::log(ratio)));
    }
    if (worst < 1e-4) break;
  }
  for (int k = 0; k < kKnobs; ++k) {
    KnobFit& kf = fit.knob[size_t(k)];
    if (!kf.exercised) continue;
    kf.ratio_after = median_ratio(observe(runs, base, fit.f, k));
    // What the runs ask for at the final factors (the last round may have stopped at a bound one step short).
    if (kf.adjustable) bound(kf, base, k, fit.f.by_kernel_class, fit.f.k[size_t(k)] * kf.ratio_after);
  }
  return fit;
}

// ------------------------------------------------------------------ validation and output

struct Row {
  const Run* run = nullptr;
  std::string layout;
  double before = 0, after = 0;            // predicted step seconds: the invocation's cluster, the fit without this run
  costmodel::Breakdown b_before, b_after;  // the predicted phases behind `before` and `after`
  double err(double pred) const { return 100.0 * (pred - run->m.total) / run->m.total; }
};

std::vector<Row> validate(const std::vector<Run>& runs, const json& base, const Fit& all) {
  std::vector<Row> rows;
  for (size_t i = 0; i < runs.size(); ++i) {
    Row row;
    row.run = &runs[i];
    const costmodel::Evaluation e = evaluate(runs[i], json::object());
    row.layout = costmodel::plan_string(e.plan);
    row.before = e.step_time_s;
    row.b_before = e.b;
    std::vector<const Run*> others;
    for (size_t j = 0; j < runs.size(); ++j)
      if (j != i) others.push_back(&runs[j]);
    const Fit f = runs.size() > 1 ? fit_runs(others, base) : all;  // one run: in-sample
    const costmodel::Evaluation a = evaluate(runs[i], scaled_cluster(f.base, f.f));
    row.after = a.step_time_s;
    row.b_after = a.b;
    rows.push_back(row);
  }
  return rows;
}

struct Summary {
  double mean_before = 0, mean_after = 0, max_before = 0, max_after = 0;
};

Summary summarize(const std::vector<Row>& rows) {
  Summary s;
  for (const Row& r : rows) {
    const double b = std::fabs(r.err(r.before)), a = std::fabs(r.err(r.after));
    s.mean_before += b / double(rows.size());
    s.mean_after += a / double(rows.size());
    s.max_before = std::max(s.max_before, b);
    s.max_after = std::max(s.max_after, a);
  }
  return s;
}

// One line per knob: what it changed, on how many terms, the median predicted/measured before and after.
std::vector<std::string> describe_factors(const json& base, const Fit& fit) {
  std::vector<std::string> lines;
  const json after = scaled_cluster(base, fit.f);
  const bool by_class = fit.f.by_kernel_class;
  if (by_class)
    lines.push_back(
        "kernel classes: every run has a kernel profile, so compute scales the GEMM efficiencies, attention "
        "the attention kernel's and memory the memory bandwidth's, each fitted to its class's share of the "
        "measured compute");
  else if (fit.profiled > 0)
    lines.push_back(strprintf("kernel classes: %d of %d runs have a kernel profile; compute is fitted as one (run "
                              "cairn-train --profile-kernels on every run to fit GEMM, attention and memory apart)",
                              fit.profiled, fit.runs));
  if (!fit.shapes.empty()) {
    std::vector<double> ratios;
    double meas = 0, pred = 0;
    int added = 0, capped = 0;
    for (const ShapeFit& f : fit.shapes) {
      ratios.push_back(f.measured / f.predicted);
      meas += f.measured, pred += f.predicted;
      added += f.replaced ? 0 : 1;
      capped += f.capped ? 1 : 0;
    }
    lines.push_back(strprintf(
        "gemm shapes: %zu GEMM shapes in %d runs' kernel profiles, measured/predicted per shape %.3f to %.3f (median "
        "%.3f, by time %.3f); gemm_table: %d entries added and %zu replaced at those shapes, each at its speed "
        "relative to the others (the compute factor then scales the table to the step times)",
        fit.shapes.size(), fit.shaped, *std::min_element(ratios.begin(), ratios.end()),
        *std::max_element(ratios.begin(), ratios.end()), median(ratios), meas / pred, added,
        fit.shapes.size() - size_t(added)));
    if (capped)
      lines.push_back(strprintf("gemm shapes: %d did not reach their target; their entries are held at 1.0", capped));
  } else if (fit.profiled > 0) {
    lines.push_back("gemm shapes: none (the kernel profiles predate cairn-train's matmul shapes): the GEMM table is "
                    "kept as calibrate measured it");
  }
  for (int k = 0; k < kKnobs; ++k) {
    const KnobFit& kf = fit.knob[size_t(k)];
    const std::string name = kKnobName[k];
    if ((k == kAttention || k == kMemory) && !by_class) continue;  // part of compute
    if (!kf.exercised) {
      lines.push_back(name + ": not fitted (no run exercises it" +
                      (device_knob_of(k) ? std::string(")") : ": no TP, CP or DP group on the " + name + " tier)"));
      continue;
    }
    if (!kf.adjustable) {
      lines.push_back(strprintf("%s: not fitted (%d terms, predicted/measured %.3f): the prediction does not depend on "
                                "its efficiencies",
                                name.c_str(), kf.terms, kf.ratio_before));
      continue;
    }
    std::string keys;
    const std::vector<std::string> own = compute_keys(base, k, by_class);
    for (const auto& [key, v] : after.items()) {
      const bool mine =
          device_knob_of(k) ? std::find(own.begin(), own.end(), key) != own.end() : key.starts_with(name + "_");
      if (!mine) continue;
      if (!keys.empty()) keys += ", ";
      const double f = fit.f.k[size_t(k)];
      if (v.is_array()) {
        size_t capped = 0;
        for (size_t i = 0; i < v.size(); ++i)
          capped += std::fabs(v[i].get<double>() - base[key][i].get<double>() * f) > 1e-12;
        keys += strprintf("%s x%.4g (%zu sizes", key.c_str(), f, v.size()) +
                (capped ? strprintf(", %zu held at 1.0)", capped) : std::string(")"));
      } else {
        keys += strprintf("%s %.4g -> %.4g", key.c_str(), base[key].get<double>(), v.get<double>());
        if (std::fabs(v.get<double>() - base[key].get<double>() * f) > 1e-12) keys += " (held at the schema's limit)";
      }
    }
    std::string split;  // a tier's TP/CP and DP terms can disagree: the pooled median hides it
    if (!device_knob_of(k) && kf.dp_terms > 0 && kf.dp_terms < kf.terms)
      split = strprintf(" (TP/CP collectives %.3f, exposed DP %.3f)", kf.ratio_tp, kf.ratio_dp);
    lines.push_back(strprintf("%s: x%.4g from %d run terms, predicted/measured %.3f%s -> %.3f; %s", name.c_str(),
                              fit.f.k[size_t(k)], kf.terms, kf.ratio_before, split.c_str(), kf.ratio_after,
                              keys.c_str()));
    if (kf.clamped)
      lines.push_back(strprintf("%s: clamped to [%g, %g]: the runs ask for x%.3g, beyond what an efficiency error "
                                "explains (a mechanism the model lacks)",
                                name.c_str(), kFactorMin, kFactorMax, kf.wanted));
    else if (kf.at_limit)
      lines.push_back(strprintf("%s: held at x%.4g, where its efficiencies reach their schema limits: the runs ask for "
                                "x%.3g (check peak_tflops, hbm_gbps, the link bandwidth or kernel_overhead_us)",
                                name.c_str(), fit.f.k[size_t(k)], kf.wanted));
  }
  return lines;
}

}  // namespace

std::string provenance_comment_lines(const Config& cfg) {
  const Provenance& p = provenance();
  std::string files;
  for (const std::string& f : cfg.files_read()) files += (files.empty() ? "" : ", ") + f;
  return strprintf("# tool: %s %s (git %s) on %s at %s\n", p.tool.c_str(), p.version.c_str(), p.git_sha.c_str(),
                   p.host.c_str(), p.time_utc.c_str()) +
         "# command line: " + printable_text(p.command_line) + "\n" +
         "# input config files: " + (files.empty() ? std::string("(none)") : printable_text(files)) + "\n";
}

namespace {

void write_cluster(const std::string& path, const Config& cfg, const std::vector<Run>& runs, const Fit& fit,
                   const std::vector<std::string>& factor_lines, const Summary& s, bool held_out) {
  json cluster = cfg.section(ClusterSection::kSection);
  const json scaled = scaled_cluster(fit.base, fit.f);
  for (const auto& [k, v] : scaled.items()) cluster[k] = v;
  // Learned by kernel class, attention's rate is this site's own: cairn-plan stops flagging attention-bound plans.
  if (fit.f.by_kernel_class) cluster["attention_measured"] = true;
  for (auto it = cluster.begin(); it != cluster.end();) {
    if (it.value().is_null() || (it.value().is_string() && it.value().get<std::string>().empty()))
      it = cluster.erase(it);
    else ++it;
  }
  // [cluster] is a closed schema section: the record of the refit is comments, so the file loads as any cluster file.
  std::string text =
      "# Cluster file written by cairn-plan calibrate --from-runs: the [cluster] of the invocation with\n"
      "# its efficiency terms refitted to the per-phase step times of cairn-train runs.\n" +
      provenance_comment_lines(cfg);
  for (const Run& r : runs)
    text += strprintf("# run: %s | %d rank%s (%s) | steps %lld..%lld, %d used, %d left out | %.6g s/step measured\n",
                      printable_text(r.dir).c_str(), r.world, r.world == 1 ? "" : "s", r.world_from.c_str(),
                      (long long)r.first_step, (long long)r.last_step, r.used, r.left_out, r.m.total);
  for (const std::string& l : factor_lines) text += "# factor " + l + "\n";
  text += strprintf("# %s: mean |error| %.1f %% -> %.1f %%, max %.1f %% -> %.1f %%\n",
                    held_out ? "leave-one-out step time" : "in-sample step time (one run: no held-out run)",
                    s.mean_before, s.mean_after, s.max_before, s.max_after);
  text += json_to_toml(json{{"cluster", cluster}});
  atomic_write(path, text);
}

void print_report(std::ostream& os, const std::vector<Row>& rows, const Fit& fit,
                  const std::vector<std::string>& factor_lines, const Summary& s, bool held_out) {
  size_t wl = 3, wa = 6;
  for (const Row& r : rows) {
    wl = std::max(wl, r.run->label.size());
    wa = std::max(wa, r.layout.size());
  }
  const char* after = held_out ? "after (held out)" : "after (in-sample)";
  os << strprintf("%-*s  %-*s %5s %10s %10s %17s %9s %9s\n", int(wl), "run", int(wa), "layout", "ranks", "measured s",
                  "before s", after, "err bef", "err aft");
  for (const Row& r : rows)
    os << strprintf("%-*s  %-*s %5d %10.4f %10.4f %17.4f %+8.1f%% %+8.1f%%\n", int(wl), r.run->label.c_str(), int(wa),
                    r.layout.c_str(), r.run->world, r.run->m.total, r.before, r.after, r.err(r.before), r.err(r.after));
  os << strprintf("mean |error| %.1f %% before, %.1f %% after; max %.1f %% before, %.1f %% after%s\n", s.mean_before,
                  s.mean_after, s.max_before, s.max_after,
                  held_out ? " (each run predicted by the fit on the others)"
                           : " (one run: no held-out run, the after column is in-sample)");
  for (const Row& r : rows)
    if (r.run->m.pp_wait > 0 || r.b_before.bubble + r.b_before.pp_p2p > 0)
      os << strprintf("pipeline %s (report only): measured pp_wait %.4f s (%s), predicted bubble + p2p %.4f s\n",
                      r.run->label.c_str(), r.run->m.pp_wait,
                      r.run->m.stage >= 0 ? strprintf("critical stage %d", r.run->m.stage).c_str()
                                          : "rank 0: the run logged no stages",
                      r.b_before.bubble + r.b_before.pp_p2p);
  // Each stage's busy time against the model's (its layers, the embedding on the first stage, the head and loss on
  // the last): whether the model splits the work between the stages as the run did.
  for (const Row& r : rows) {
    const std::vector<double>&meas = r.run->m.stage_busy, &pred = r.b_before.stage_busy;
    if (meas.empty() || meas.size() != pred.size()) continue;
    std::string list;
    for (size_t k = 0; k < meas.size(); ++k)
      list +=
          strprintf("%s%zu %.4f / %.4f (%+.1f%%)", k ? ", " : "", k, meas[k], pred[k], 100 * (pred[k] / meas[k] - 1));
    os << strprintf("stages %s: busy s measured / predicted: %s\n", r.run->label.c_str(), list.c_str());
  }
  if (!fit.shapes.empty()) {
    os << strprintf("GEMM shapes (m x n x k, fp32 of rank 0's profiled matmuls): %4s %12s %12s %9s %17s\n", "runs",
                    "measured s", "predicted s", "meas/pred", "efficiency");
    for (const ShapeFit& f : fit.shapes)
      os << strprintf("  %6.0f x %6.0f x %6.0f %-27s %4d %12.4g %12.4g %9.3f %7.3f -> %-7.3f\n", f.m, f.n, f.k,
                      f.capped     ? "(entry held at 1.0)"
                      : f.replaced ? "(table entry replaced)"
                                   : "(table entry added)",
                      f.runs, f.measured, f.predicted, f.measured / f.predicted, f.eff_before, f.eff_after);
  }
  os << "fit on all runs:\n";
  for (const std::string& l : factor_lines) os << "  " << l << "\n";
}

// The predicted counterparts of the measured phases (compute also by kernel class).
json predicted_phases(const costmodel::Breakdown& b) {
  return {{"compute", b.gemm + b.memory_bound},
          {"gemm", b.gemm - b.attention},
          {"attention", b.attention},
          {"memory_bound", b.memory_bound},
          {"tp_comm", b.tp_comm},
          {"cp_comm", b.cp_comm},
          {"dp_comm", b.dp_exposed},
          {"pp_wait", b.bubble + b.pp_p2p},
          {"optimizer", b.optimizer}};
}

json report_json(const std::vector<Row>& rows, const Fit& fit, const std::vector<std::string>& factor_lines,
                 const Summary& s, bool held_out, const std::string& path) {
  json jr = json::array();
  for (const Row& r : rows) {
    const Measured& m = r.run->m;
    json measured = {{"compute", m.compute},    {"tp_comm", m.tp_comm},     {"cp_comm", m.cp_comm},
                     {"dp_comm", m.dp_comm},    {"zero_comm", m.zero_comm}, {"pp_wait", m.pp_wait},
                     {"optimizer", m.optimizer}};
    if (m.stage >= 0) measured["stage"] = m.stage;  // whose split: the critical pipeline stage's (else rank 0's)
    if (m.profiled) {                               // the kernel profile's shares of compute
      measured["gemm"] = m.gemm;
      measured["attention"] = m.attention;
      measured["memory_bound"] = m.memory;
    }
    jr.push_back({{"run", r.run->dir},
                  {"layout", r.layout},
                  {"ranks", r.run->world},
                  {"ranks_from", r.run->world_from},
                  {"steps_used", r.run->used},
                  {"measured_step_s", m.total},
                  {"kernel_profile", m.profiled},
                  {"measured_time_s", measured},
                  {"predicted_before_s", r.before},
                  {"predicted_after_s", r.after},
                  {"predicted_before_time_s", predicted_phases(r.b_before)},
                  {"predicted_after_time_s", predicted_phases(r.b_after)},
                  {"measured_stage_busy_s", m.stage_busy},
                  {"predicted_stage_busy_s", r.b_before.stage_busy},
                  {"error_before_pct", r.err(r.before)},
                  {"error_after_pct", r.err(r.after)}});
  }
  json factors = json::object();
  for (int k = 0; k < kKnobs; ++k) {
    const KnobFit& kf = fit.knob[size_t(k)];
    factors[kKnobName[k]] = {{"factor", fit.f.k[size_t(k)]},
                             {"exercised", kf.exercised},
                             {"adjustable", kf.adjustable},
                             {"clamped", kf.clamped},
                             {"at_limit", kf.at_limit},
                             {"wanted", kf.wanted},
                             {"terms", kf.terms}};
  }
  json shapes = json::array();
  for (const ShapeFit& f : fit.shapes)
    shapes.push_back({{"m", f.m},
                      {"n", f.n},
                      {"k", f.k},
                      {"runs", f.runs},
                      {"measured_s", f.measured},
                      {"predicted_s", f.predicted},
                      {"efficiency_before", f.eff_before},
                      {"efficiency_target", f.target()},
                      {"efficiency_after", f.eff_after},
                      {"table_entry", f.replaced ? "replaced" : "added"},
                      {"held_at_limit", f.capped}});
  return {{"kind", "cluster_refit"},
          {"output", path},
          {"held_out", held_out},
          {"by_kernel_class", fit.f.by_kernel_class},
          {"gemm_shapes", shapes},
          {"rows", jr},
          {"factors", factors},
          {"notes", factor_lines},
          {"summary",
           {{"mean_abs_error_before_pct", s.mean_before},
            {"mean_abs_error_after_pct", s.mean_after},
            {"max_abs_error_before_pct", s.max_before},
            {"max_abs_error_after_pct", s.max_after}}},
          {"provenance", provenance().to_json()}};
}

}  // namespace

int run_calibrate_from_runs(const Config& cfg, const RefitOptions& opts) {
  if (opts.runs.empty()) throw UsageError("calibrate --from-runs: give at least one run directory");
  std::string path = opts.output;
  if (path.empty()) path = join_path(run_subdir(run_dir(cfg), "plan"), "cluster-refit.toml");
  check_writable_file(path);
  std::vector<Run> runs;
  for (const std::string& dir : opts.runs) runs.push_back(load_run(cfg, dir, opts.warmup_steps));
  for (Run& r : runs) {
    const costmodel::Evaluation e = evaluate(r, json::object());
    if (!e.feasible() && e.reject != costmodel::Reject::kMemory)
      throw UsageError(file_message("the cost model cannot evaluate the layout of run", r.dir, e.reason));
    if (!(e.step_time_s > 0) || !std::isfinite(e.step_time_s))
      throw UsageError(file_message("the cost model predicts no step time for run", r.dir, "check its [model]"));
    if (!e.feasible())
      CAIRN_LOG_WARN("%s: %s (it ran, so the step time is still compared)", r.dir.c_str(), e.reason.c_str());
    CAIRN_LOG_INFO("%s: %s on %d ranks (%s), %d steps, %.4f s/step measured", r.dir.c_str(),
                   costmodel::plan_string(e.plan).c_str(), r.world, r.world_from.c_str(), r.used, r.m.total);
  }
  const json base = cfg.section(ClusterSection::kSection);
  std::vector<const Run*> all;
  all.reserve(runs.size());
  for (const Run& r : runs) all.push_back(&r);
  const Fit fit = fit_runs(all, base);
  const bool held_out = runs.size() > 1;
  const std::vector<Row> rows = validate(runs, base, fit);
  const Summary s = summarize(rows);
  const std::vector<std::string> lines = describe_factors(fit.base, fit);
  for (const std::string& l : lines)
    if (l.find(": clamped") != std::string::npos || l.find(": held at") != std::string::npos)
      CAIRN_LOG_WARN("%s", l.c_str());
  write_cluster(path, cfg, runs, fit, lines, s, held_out);
  const bool json_stdout = opts.json_path == "-";
  print_report(json_stdout ? std::cerr : std::cout, rows, fit, lines, s, held_out);
  if (!opts.json_path.empty())
    write_json_output(opts.json_path, json_text(report_json(rows, fit, lines, s, held_out, path), 1) + "\n");
  std::cout << (json_stdout ? "" : path + "\n");  // the path last on stdout, as plain calibrate prints it
  return 0;
}

}  // namespace cairn::plan
