// The records other than metrics lines (records.h): eval result rows, plan rows, fabric fits, checkpoint DONE
// markers, train_state.
#include <sys/stat.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string>

#include "cairn/error.h"
#include "cairn/files.h"
#include "cairn/records.h"
#include "fields.h"

using nlohmann::json;

namespace cairn::records {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// "on"/"off" as plans.json and best.toml write a switch; true/false as a hand-written file may.
bool on_off(const JsonFields& f, const char* key, bool dflt) {
  if (!f.has(key)) return dflt;
  const json& v = f.raw().at(key);
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_string() && (v == "on" || v == "off")) return v == "on";
  f.fail(key, "\"on\", \"off\" or true/false");
}

// A figure cairn-plan predicts: >= 0 when given.
void figure(const JsonFields& f, const char* key, std::optional<double>& out) {
  if (f.has(key)) out = f.number(key, 0, kInf);
}

std::vector<double> finite_numbers(const JsonFields& f, const char* key) {
  std::vector<double> out;
  const json& a = f.array(key);
  out.reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].is_number() || !std::isfinite(a[i].get<double>()))
      f.fail_value(std::string(key) + "[" + std::to_string(i) + "]", a[i], "a finite number");
    out.push_back(a[i].get<double>());
  }
  return out;
}

}  // namespace

// ---- EvalRow

json EvalRow::to_json() const {
  json j = {{"step", step},
            {"tokens", tokens},
            {"checkpoint", checkpoint},
            {"task", task},
            {"metric", metric},
            {"value", detail::number_or_null(value)},
            {"stderr", detail::number_or_null(stderr_value)},
            {"n", n},
            {"wall_time", wall_time}};
  if (!checkpoint_id.empty()) j["checkpoint_id"] = checkpoint_id;
  if (!task_config.empty()) j["task_config"] = task_config;
  if (!eval_run.empty()) j["eval_run"] = eval_run;
  if (rows_in_write > 0) j["rows_in_write"] = rows_in_write;
  if (unknown_keys.is_object())
    for (const auto& [k, v] : unknown_keys.items()) j.emplace(k, v);
  return j;
}

EvalRow EvalRow::from_json(const JsonFields& f) {
  EvalRow r;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  r.step = f.i64("step", 0, INT64_MAX);
  r.tokens = f.i64_or("tokens", 0, 0, INT64_MAX);
  r.checkpoint = f.str_or("checkpoint", "");
  r.task = f.str("task");
  r.metric = f.str("metric");
  r.value = f.number_or("value", nan, -DBL_MAX, DBL_MAX);
  r.stderr_value = f.number_or("stderr", nan, 0, DBL_MAX);
  r.n = f.i64_or("n", 0, 0, INT64_MAX);
  r.wall_time = f.number_or("wall_time", 0, -DBL_MAX, DBL_MAX);
  r.checkpoint_id = f.str_or("checkpoint_id", "");
  r.task_config = f.str_or("task_config", "");
  r.eval_run = f.str_or("eval_run", "");
  r.rows_in_write = f.i64_or("rows_in_write", 0, 0, INT64_MAX);
  static const std::set<std::string> known = {"step",         "tokens",        "checkpoint",  "task",
                                              "metric",       "value",         "stderr",      "n",
                                              "wall_time",    "checkpoint_id", "task_config", "eval_run",
                                              "rows_in_write"};
  for (const auto& [k, v] : f.raw().items())
    if (!known.count(k)) r.unknown_keys[k] = v;
  return r;
}

EvalRow EvalRow::parse(std::string_view line, const std::string& where) {
  const json j = parse_json_text(std::string(line), where, "eval result");
  return from_json(JsonFields(j, where, "eval result"));
}

// ---- EvalProvenance

json EvalProvenance::to_json() const { return {{"eval_run", eval_run}, {"provenance", provenance}}; }

EvalProvenance EvalProvenance::parse(std::string_view line, const std::string& where) {
  const json j = parse_json_text(std::string(line), where, "eval provenance");
  JsonFields f(j, where, "eval provenance");
  EvalProvenance p;
  p.eval_run = f.str("eval_run");
  if (!j.contains("provenance") || !j["provenance"].is_object())
    f.fail("provenance", "an object (tool, version, git_sha, host, time_utc, command_line, config)");
  p.provenance = j["provenance"];
  return p;
}

// ---- PlanRow

json PlanRow::to_json() const {
  json j = {{"dp", dp},
            {"tp", tp},
            {"pp", pp},
            {"v", v},
            {"mb", mb},
            {"zero", zero},
            {"recompute", recompute},
            {"sp", sp ? "on" : "off"},
            {"cp", cp},
            {"tp_overlap", tp_overlap ? "on" : "off"},
            {"cp_comm", cp_comm},
            {"feasible", feasible}};
  for (auto [key, value] : {std::pair{"step_time_s", &step_time_s},
                            {"tokens_per_s", &tokens_per_s},
                            {"tflops_per_gpu", &tflops_per_gpu},
                            {"hw_tflops_per_gpu", &hw_tflops_per_gpu},
                            {"mfu", &mfu},
                            {"hfu", &hfu},
                            {"memory_gib", &memory_gib}})
    detail::put(j, key, *value);
  if (!feasible) j["reason"] = reason;
  if (!breakdown.is_null()) j["breakdown"] = breakdown;
  return j;
}

PlanRow PlanRow::from_json(const JsonFields& f) {
  PlanRow p;
  for (auto [key, value] :
       {std::pair{"dp", &p.dp}, {"tp", &p.tp}, {"pp", &p.pp}, {"v", &p.v}, {"mb", &p.mb}, {"cp", &p.cp}})
    *value = static_cast<int64_t>(f.u64_or(key, 1, INT32_MAX));
  p.zero = static_cast<int64_t>(f.u64_or("zero", 0, 3));
  p.recompute = f.str_or("recompute", "");
  p.sp = on_off(f, "sp", false);
  p.tp_overlap = on_off(f, "tp_overlap", false);
  p.cp_comm = f.str_or("cp_comm", "p2p");
  p.feasible = f.boolean_or("feasible", true);
  p.reason = f.str_or("reason", "");
  figure(f, "step_time_s", p.step_time_s);
  figure(f, "tokens_per_s", p.tokens_per_s);
  figure(f, "tflops_per_gpu", p.tflops_per_gpu);
  figure(f, "hw_tflops_per_gpu", p.hw_tflops_per_gpu);
  figure(f, "mfu", p.mfu);
  figure(f, "hfu", p.hfu);
  figure(f, "memory_gib", p.memory_gib);
  if (f.has("breakdown")) p.breakdown = f.object("breakdown").raw();
  return p;
}

// ---- FabricTier

json FabricTier::to_json() const {
  json j = {{"alpha_us", alpha_us}, {"busbw_gbps", busbw_gbps}, {"ranks", ranks}};
  if (r2) j["r2"] = *r2;
  if (half_peak_bytes) j["half_peak_bytes"] = *half_peak_bytes;
  if (peak_busbw_gbps) j["peak_busbw_gbps"] = *peak_busbw_gbps;
  detail::put(j, "type", type);
  detail::put(j, "redop", redop);
  return j;
}

FabricTier FabricTier::from_json(const JsonFields& f) {
  FabricTier t;
  t.alpha_us = f.number("alpha_us", 0, DBL_MAX);
  t.busbw_gbps = f.number("busbw_gbps", 0, DBL_MAX);
  if (!(t.busbw_gbps > 0)) f.fail("busbw_gbps", "a positive number");
  t.ranks = f.i64_or("ranks", 2, 1, 1 << 24);
  // r2 of a degenerate fit may be nan (TOML writes it): not needed to plan, so read only when finite.
  if (f.has("r2")) {
    const json& r2 = f.raw().at("r2");
    if (!r2.is_number()) f.fail("r2", "a number");
    if (std::isfinite(r2.get<double>())) t.r2 = r2.get<double>();
  }
  if (f.has("half_peak_bytes")) t.half_peak_bytes = f.u64("half_peak_bytes");
  if (f.has("peak_busbw_gbps")) t.peak_busbw_gbps = f.number("peak_busbw_gbps", 0, DBL_MAX);
  detail::get(f, "type", t.type);
  detail::get(f, "redop", t.redop);
  return t;
}

// ---- FabricHeader

json FabricHeader::to_json() const {
  json j = {{"backend", backend}};
  detail::put(j, "backend_version", backend_version);
  j["world_size"] = world_size;
  j["nodes"] = nodes;
  j["ranks_per_node"] = ranks_per_node;
  detail::put(j, "simulated_nodes", simulated_nodes);
  detail::put(j, "type", type);
  detail::put(j, "tool", tool);
  detail::put(j, "version", version);
  detail::put(j, "git_sha", git_sha);
  detail::put(j, "host", host);
  detail::put(j, "time_utc", time_utc);
  detail::put(j, "command_line", command_line);
  if (sweep.is_object()) j["sweep"] = sweep;
  if (!skipped.empty()) j["skipped"] = skipped;
  if (!notes.empty()) j["notes"] = notes;
  return j;
}

FabricHeader FabricHeader::from_json(const JsonFields& f) {
  FabricHeader h;
  h.backend = f.str_or("backend", "");
  detail::get(f, "backend_version", h.backend_version);
  h.world_size = f.i64_or("world_size", 1, 1, 1 << 24);
  h.nodes = f.i64_or("nodes", 1, 1, 1 << 24);
  h.ranks_per_node = f.i64_or("ranks_per_node", 0, 0, 1 << 20);
  detail::get(f, "simulated_nodes", h.simulated_nodes);
  detail::get(f, "type", h.type);
  detail::get(f, "tool", h.tool);
  detail::get(f, "version", h.version);
  detail::get(f, "git_sha", h.git_sha);
  detail::get(f, "host", h.host);
  detail::get(f, "time_utc", h.time_utc);
  detail::get(f, "command_line", h.command_line);
  if (f.has("sweep")) {
    if (!f.raw().at("sweep").is_object()) f.fail("sweep", "a table (the [sweep] settings of the measurement)");
    h.sweep = f.raw().at("sweep");
  }
  for (auto [key, list_out] : {std::pair{"skipped", &h.skipped}, std::pair{"notes", &h.notes}}) {
    if (!f.has(key)) continue;
    const json& list = f.array(key);
    for (size_t i = 0; i < list.size(); ++i) {
      if (!list[i].is_string()) f.fail_value(std::string(key) + "[" + std::to_string(i) + "]", list[i], "a string");
      list_out->push_back(list[i].get<std::string>());
    }
  }
  return h;
}

// ---- CheckpointDone

json CheckpointDone::to_json() const {
  json files_json = json::object();
  for (const File& file : files) files_json[file.name] = {{"bytes", file.bytes}, {"xxh64", file.xxh64}};
  json j = {{"step", step}};
  detail::put(j, "world_size", world_size);
  j["files"] = files_json;
  return j;
}

CheckpointDone CheckpointDone::from_json(const JsonFields& f) {
  CheckpointDone d;
  d.step = f.i64("step", 0, INT64_MAX);
  if (f.has("world_size")) d.world_size = f.i64("world_size", 1, 1 << 24);
  JsonFields files = f.object("files");
  for (const auto& [name, info] : files.raw().items()) {
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
      files.fail(name, "a file name inside the checkpoint directory");
    JsonFields fi = files.nested(info, name);
    File file{name, fi.u64("bytes"), fi.str("xxh64")};
    const bool hex = file.xxh64.size() == 16 && file.xxh64.find_first_not_of("0123456789abcdef") == std::string::npos;
    if (!hex) fi.fail("xxh64", "16 lowercase hex digits");
    d.files.push_back(std::move(file));
  }
  if (d.files.empty()) f.fail("files", "at least one file");
  return d;
}

std::optional<CheckpointDone> read_checkpoint_done(const std::string& dir) {
  const std::string path = join_path(dir, kCheckpointDoneFile);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  // A FIFO would block the read forever, a directory reads as nothing.
  if (!S_ISREG(st.st_mode)) throw UsageError(file_message("malformed DONE marker", path, "not a regular file"));
  const json j = parse_json_text(read_file(path), path, "DONE marker");
  return CheckpointDone::from_json(JsonFields(j, path, "DONE marker"));
}

// ---- TrainState

json TrainState::to_json() const {
  json j = json::object();
#define CAIRN_RECORDS_PUT_STATE(type, name) detail::put(j, #name, name);
  CAIRN_TRAIN_STATE_FIELDS(CAIRN_RECORDS_PUT_STATE)
#undef CAIRN_RECORDS_PUT_STATE
  detail::put(j, "layout", layout);
  detail::put(j, "data_fingerprint", data_fingerprint);
  detail::put(j, "tokenizer_id", tokenizer_id);
  if (spikes) j["spikes"] = {{"loss", spikes->loss}, {"norm", spikes->norm}};
  if (lr_schedule)
    j["lr_schedule"] = {{"lr", lr_schedule->lr},
                        {"min_lr", lr_schedule->min_lr},
                        {"warmup", lr_schedule->warmup},
                        {"decay_steps", lr_schedule->decay_steps},
                        {"schedule", lr_schedule->schedule}};
  return j;
}

TrainState TrainState::from_json(const JsonFields& f) {
  TrainState s;
#define CAIRN_RECORDS_GET_STATE(type, name) detail::get(f, #name, s.name);
  CAIRN_TRAIN_STATE_FIELDS(CAIRN_RECORDS_GET_STATE)
#undef CAIRN_RECORDS_GET_STATE
  detail::get(f, "layout", s.layout);
  detail::get(f, "data_fingerprint", s.data_fingerprint);
  detail::get(f, "tokenizer_id", s.tokenizer_id);
  if (f.has("spikes")) {
    JsonFields w = f.object("spikes");
    s.spikes = Spikes{finite_numbers(w, "loss"), finite_numbers(w, "norm")};
  }
  if (f.has("lr_schedule")) {
    JsonFields w = f.object("lr_schedule");
    s.lr_schedule = LrSchedule{w.number("lr", 0, 1e3), w.number("min_lr", 0, 1e3), w.i64("warmup", 0, INT64_MAX),
                               w.i64("decay_steps", 0, INT64_MAX), w.str("schedule")};
  }
  return s;
}

KernelProfileTotals kernel_profile_totals(const nlohmann::json& doc) {
  KernelProfileTotals t;
  if (!doc.is_object() || !doc.contains("ranks") || !doc["ranks"].is_array()) return t;
  std::map<std::string, KernelOpTotal> by_op;
  for (const auto& rank : doc["ranks"]) {
    if (!rank.is_object() || !rank.contains("ops") || !rank["ops"].is_array()) continue;
    t.ranks += 1;
    for (const auto& o : rank["ops"]) {
      if (!o.is_object() || !o.contains("op") || !o["op"].is_string()) continue;
      const std::string name = o["op"].get<std::string>();
      KernelOpTotal& op = by_op[name];
      op.op = name;
      if (o.contains("calls") && o["calls"].is_number()) op.calls += o["calls"].get<double>();
      if (o.contains("seconds") && o["seconds"].is_number()) {
        op.seconds += o["seconds"].get<double>();
        t.seconds += o["seconds"].get<double>();
      }
    }
  }
  for (auto& [name, op] : by_op) t.ops.push_back(std::move(op));
  std::stable_sort(t.ops.begin(), t.ops.end(), [](const auto& a, const auto& b) { return a.seconds > b.seconds; });
  return t;
}

}  // namespace cairn::records
