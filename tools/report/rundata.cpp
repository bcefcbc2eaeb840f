// Reads a run directory for cairn-report, tolerating absent stages, torn files and corrupt lines.
#include "rundata.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <mutex>
#include <thread>

#include "cairn/config.h"
#include "cairn/error.h"
#include "cairn/files.h"
#include "cairn/log.h"
#include "cairn/records.h"

namespace cairn::report {
namespace fs = std::filesystem;

namespace {

constexpr size_t kMaxProblemsKept = 40;

bool is_file(const std::string& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}
bool is_dir(const std::string& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

// Reads a file into `out`; on failure records a problem and returns false.
bool slurp(const std::string& path, std::string& out, RunData& run) {
  try {
    out = read_file(path);
    return true;
  } catch (const std::exception& e) {
    run.problem(e.what());
    return false;
  }
}

// Parses a JSON file; null (and a recorded problem) when unreadable or invalid.
json read_json(const std::string& path, RunData& run) {
  std::string text;
  if (!slurp(path, text, run)) return nullptr;
  try {
    return json::parse(text);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for 1e999999
    run.problem(path + ": invalid JSON (" + json_error_text(e) + ")");
    return nullptr;
  }
}

// ---- sweep.json and plans.json: parsed and checked through the typed reader. The report's tables,
// charts and gates read these files key by key; a wrong type, a non-finite number or invalid JSON is a
// UsageError (exit 2) naming the file and key, instead of a silently empty chart or a raw message.

constexpr double kInf = std::numeric_limits<double>::infinity();

// An optional number: absent or null reads as "not measured" (cairn-sweep writes null for NaN).
void opt_number(const JsonFields& f, const char* key, double min = -kInf) { f.number_or(key, 0, min, kInf); }

// A string, or (nccl-tests' padded root column, or an older file's number) an integer.
void opt_string_or_int(const JsonFields& f, const char* key) {
  if (!f.has(key)) return;
  const json& v = f.raw().at(key);
  if (!v.is_string() && !v.is_number_integer()) f.fail(key, "a string or an integer");
}

// One measure: cairn's {busbw, algbw, wrong, time_us} or nccl-tests' {bus_bw, alg_bw, nwrong, time}.
void check_measure(const JsonFields& m, bool nccl) {
  // nccl-tests prints what it could not compute as printf's text ("nan", "-nan", "inf"): read as not measured (a
  // whole run was refused for one "nan"); other text is still an error.
  auto printf_text = [&](const char* k) {
    if (!m.has(k) || !m.raw().at(k).is_string()) return false;
    std::string v = m.raw().at(k).get<std::string>();
    for (char& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return v == "nan" || v == "-nan" || v == "inf" || v == "-inf" || v == "n/a";
  };
  if (nccl)
    for (const char* k : {"bus_bw", "alg_bw", "time", "cpu_time"}) {
      if (!printf_text(k)) opt_number(m, k, 0);
    }
  else
    for (const char* k : {"busbw", "algbw", "time_us"}) opt_number(m, k, 0);
  const char* wrong = nccl ? "nwrong" : "wrong";
  // nccl-tests may write text (N/A) where nothing was checked; a number must be a count.
  if (!(nccl && m.has(wrong) && m.raw().at(wrong).is_string())) opt_number(m, wrong, 0);
}

void check_sweep_extras(const JsonFields& x) {
  opt_number(x, "avg_busbw", 0);
  opt_number(x, "wrong", 0);
  if (!x.has("fits")) return;
  const json& fits = x.array("fits");
  for (size_t i = 0; i < fits.size(); ++i) {
    JsonFields f = x.nested(fits[i], "fits[" + std::to_string(i) + "]");
    f.str("collective");
    for (const char* k : {"tier", "type", "redop", "note"}) f.str_or(k, "");
    f.i64_or("root", -1, -1, INT32_MAX);
    f.boolean_or("valid", true);
    f.boolean_or("in_fabric", false);
    for (const char* k : {"alpha_us", "r2"}) opt_number(f, k);
    for (const char* k : {"busbw_gbps", "half_peak_bytes", "peak_busbw_gbps", "points", "ranks"}) opt_number(f, k, 0);
  }
}

void check_sweep_json(const json& doc, const std::string& path) {
  JsonFields top(doc, path, "sweep file");
  // Version 3 keeps cairn's fields under "cairn"; the flat layout (version 2) beside nccl-tests'.
  check_sweep_extras(top.has("cairn") ? top.object("cairn") : top);
  for (const char* k : {"average_bus_bandwidth", "out_of_bounds"}) {
    if (!top.has(k)) continue;
    JsonFields o = top.object(k);
    opt_number(o, std::string(k) == "out_of_bounds" ? "count" : "bandwidth", 0);
  }
  if (!top.has("results")) return;
  const json& results = top.array("results");
  for (size_t i = 0; i < results.size(); ++i) {
    JsonFields r = top.nested(results[i], "results[" + std::to_string(i) + "]");
    JsonFields x = r.has("cairn") ? r.object("cairn") : r;
    for (const char* k : {"collective", "tier"}) x.str_or(k, "");
    for (const char* k : {"oop", "ip"})
      if (x.has(k)) check_measure(x.object(k), false);
    for (const char* k : {"type", "redop"}) r.str_or(k, "");
    opt_string_or_int(r, "root");
    opt_number(r, "size", 0);
    opt_number(r, "count", 0);
    for (const char* k : {"out_of_place", "in_place"})
      if (r.has(k)) check_measure(r.object(k), true);
  }
}

void check_plans_json(const json& doc, const std::string& path) {
  JsonFields top(doc, path, "plan file");
  const json& plans = top.array("plans");
  for (size_t i = 0; i < plans.size(); ++i)
    records::PlanRow::from_json(top.nested(plans[i], "plans[" + std::to_string(i) + "]"));
}

// A stage file the report checks key by key: unreadable is a problem (as for any file), anything
// else wrong in it throws UsageError.
json read_checked_json(const std::string& path, const std::string& kind, void (*check)(const json&, const std::string&),
                       RunData& run) {
  std::string text;
  if (!slurp(path, text, run)) return nullptr;
  json doc = parse_json_text(text, path, kind);
  check(doc, path);
  return doc;
}

json read_toml(const std::string& path, RunData& run) {
  try {
    return read_toml_file_as_json(path);
  } catch (const std::exception& e) {
    run.problem(path + ": " + e.what());
    return nullptr;
  }
}

// Every per-record column of the training series but the per-stage ones (one list for reserving and truncating).
std::vector<std::vector<double>*> scalar_columns(TrainSeries& t) {
  return {&t.step,
          &t.tokens,
          &t.loss,
          &t.lr,
          &t.grad_norm,
          &t.tokens_per_s,
          &t.mfu,
          &t.tflops,
          &t.wall_time,
          &t.skipped,
          &t.skipped_total,
          &t.t_data,
          &t.t_forward,
          &t.t_backward,
          &t.t_comm,
          &t.t_optimizer,
          &t.t_total,
          &t.pipeline_wait,
          &t.stage_imbalance,
          &t.critical_stage};
}

void truncate_train_from(TrainSeries& t, size_t n) {
  for (auto* col : scalar_columns(t))
    if (col->size() > n) col->resize(n);
  for (auto* cols : {&t.stage_busy, &t.stage_wait})
    for (auto& col : *cols)
      if (col.size() > n) col.resize(n);
}

// Short description of a JSON parse failure: nlohmann's message without its "[json.exception...]" prefix.
std::string parse_error_text(std::string_view line) {
  try {
    json ignored = json::parse(line);
    (void)ignored;
  } catch (const json::exception& e) {
    // parse_error, and out_of_range for numbers such as 1e999999 that overflow a double.
    return json_error_text(e);
  }
  return "invalid JSON (a number that is not finite?)";
}

std::string basename_of(const std::string& dir) { return dir_basename(dir); }

void read_data_stage(RunData& run) {
  // [data] path of the run's config when it points elsewhere, else <run>/data (or <run>/reshard).
  std::vector<std::string> candidates;
  if (run.config.is_object() && run.config.contains("data") && run.config["data"].is_object()) {
    const json& d = run.config["data"];
    if (d.contains("path") && d["path"].is_string() && !d["path"].get<std::string>().empty()) {
      std::string p = d["path"].get<std::string>();
      candidates.push_back(p);
      if (!fs::path(p).is_absolute()) candidates.push_back(join_path(run.dir, p));
    }
  }
  candidates.push_back(join_path(run.dir, "data"));
  candidates.push_back(join_path(run.dir, "reshard"));
  for (const auto& c : candidates) {
    if (is_file(join_path(c, "index.json")) || is_file(join_path(c, "stats.json"))) {
      run.data_dir = c;
      break;
    }
  }
  if (run.data_dir.empty()) {
    if (is_dir(join_path(run.dir, "data"))) {
      run.present.emplace_back("data");
      run.missing.emplace_back("data/index.json and data/stats.json");
    }
    return;
  }
  run.present.emplace_back("data");
  std::string idx = join_path(run.data_dir, "index.json"), st = join_path(run.data_dir, "stats.json");
  if (is_file(idx)) run.data_index = read_json(idx, run);
  else run.missing.emplace_back(idx);
  if (is_file(st)) run.data_stats = read_json(st, run);
  else run.missing.emplace_back(st);
}

}  // namespace

bool RunData::has(const std::string& stage) const {
  return std::find(present.begin(), present.end(), stage) != present.end();
}

void RunData::problem(const std::string& text) {
  ++problem_count;
  if (problems.size() < kMaxProblemsKept) problems.push_back(text);
}

double num_or_nan(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end()) return kNaN;
  if (it->is_number()) return it->get<double>();
  if (it->is_boolean()) return it->get<bool>() ? 1.0 : 0.0;
  return kNaN;
}

const json* sweep_extras(const json& sweep) {
  if (!sweep.is_object()) return nullptr;
  auto it = sweep.find("cairn");
  return it != sweep.end() && it->is_object() ? &*it : &sweep;
}

const json* sweep_fits(const json& sweep) {
  const json* x = sweep_extras(sweep);
  if (!x) return nullptr;
  auto it = x->find("fits");
  return it != x->end() && it->is_array() ? &*it : nullptr;
}

namespace {
std::string string_at(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}
// Number at obj[outer][key], NaN when any part is absent.
double nested_num(const json& obj, const char* outer, const char* key) {
  auto it = obj.find(outer);
  return it != obj.end() && it->is_object() ? num_or_nan(*it, key) : kNaN;
}
}  // namespace

std::vector<SweepRow> sweep_rows(const json& sweep) {
  std::vector<SweepRow> rows;
  if (!sweep.is_object()) return rows;
  auto res = sweep.find("results");
  if (res == sweep.end() || !res->is_array()) return rows;
  rows.reserve(res->size());
  for (const auto& r : *res) {
    if (!r.is_object()) continue;
    auto c = r.find("cairn");
    const json& x = c != r.end() && c->is_object() ? *c : r;  // version 3, else the flat layout
    SweepRow row;
    row.collective = string_at(x, "collective");
    if (row.collective.empty()) continue;
    std::string tier = string_at(x, "tier");
    if (!tier.empty()) row.tier = tier;
    row.type = string_at(r, "type");
    row.redop = string_at(r, "redop");
    auto root = r.find("root");  // nccl-tests writes the padded column text; older files a number
    if (root != r.end() && root->is_string()) {
      row.root = root->get<std::string>();
      row.root.erase(0, row.root.find_first_not_of(' '));
    } else if (root != r.end() && root->is_number_integer()) {
      row.root = std::to_string(root->get<long long>());
    }
    row.size = num_or_nan(r, "size");
    const char* cairn_side[2] = {"oop", "ip"};
    const char* nccl_side[2] = {"out_of_place", "in_place"};
    for (int s = 0; s < 2; ++s) {
      auto m = x.find(cairn_side[s]);
      if (m != x.end() && m->is_object()) {
        row.busbw[s] = num_or_nan(*m, "busbw");
        row.algbw[s] = num_or_nan(*m, "algbw");
        row.wrong[s] = num_or_nan(*m, "wrong");
      } else {  // nccl-tests' own measure
        row.busbw[s] = nested_num(r, nccl_side[s], "bus_bw");
        row.algbw[s] = nested_num(r, nccl_side[s], "alg_bw");
        row.wrong[s] = nested_num(r, nccl_side[s], "nwrong");
      }
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

double sweep_avg_busbw(const json& sweep) {
  const json* x = sweep_extras(sweep);
  if (!x) return kNaN;
  double v = num_or_nan(*x, "avg_busbw");
  return std::isnan(v) ? nested_num(sweep, "average_bus_bandwidth", "bandwidth") : v;
}

double sweep_wrong(const json& sweep) {
  const json* x = sweep_extras(sweep);
  if (!x) return kNaN;
  double v = num_or_nan(*x, "wrong");
  return std::isnan(v) ? nested_num(sweep, "out_of_bounds", "count") : v;
}

namespace {

template <class T>
double value_or_nan(const std::optional<T>& v) {
  return v ? static_cast<double>(*v) : kNaN;
}

// One train line's figures into the report's columns (absent = NaN).
void append_train(TrainSeries& t, const records::MetricsLine& r) {
  t.step.push_back(value_or_nan(r.step));
  t.tokens.push_back(value_or_nan(r.tokens));
  t.loss.push_back(value_or_nan(r.loss));
  t.lr.push_back(value_or_nan(r.lr));
  t.grad_norm.push_back(value_or_nan(r.grad_norm));
  t.tokens_per_s.push_back(value_or_nan(r.tokens_per_s));
  t.mfu.push_back(value_or_nan(r.mfu));
  t.tflops.push_back(value_or_nan(r.tflops));
  t.wall_time.push_back(value_or_nan(r.wall_time));
  t.skipped.push_back(value_or_nan(r.skipped));
  t.skipped_total.push_back(value_or_nan(r.skipped_total));
  const records::StepTimes* tm = r.time_s ? &*r.time_s : nullptr;
  t.t_data.push_back(tm ? tm->data : kNaN);
  t.t_forward.push_back(tm ? tm->forward : kNaN);
  t.t_backward.push_back(tm ? tm->backward : kNaN);
  t.t_comm.push_back(tm ? tm->comm : kNaN);
  t.t_optimizer.push_back(tm ? tm->optimizer : kNaN);
  t.t_total.push_back(tm ? tm->total : kNaN);
  const int crit = records::critical_stage(r.stages);
  std::vector<double> busy;  // each entry's compute, in r.stages order
  double lo = kNaN, hi = kNaN;
  for (const records::StageTimes& st : r.stages) {
    const double b = busy.emplace_back(records::compute_seconds(st.time));
    if (!(b <= hi)) hi = b;  // the first, or a busier stage
    if (!(b >= lo)) lo = b;
  }
  t.pipeline_wait.push_back(crit >= 0 ? r.stages[size_t(crit)].time.pp_wait : kNaN);
  t.stage_imbalance.push_back(lo > 0 ? hi / lo - 1 : kNaN);
  t.critical_stage.push_back(crit >= 0 ? static_cast<double>(r.stages[size_t(crit)].stage) : kNaN);
  // Per-stage columns, one value per record (NaN for a stage this record lacks; a stage first seen now gets NaN for
  // the records before it).
  const size_t index = t.step.size() - 1;
  int64_t max_stage = -1;
  for (const records::StageTimes& st : r.stages) max_stage = std::max(max_stage, st.stage);
  if (max_stage >= 4096) max_stage = 4095;  // a corrupt stage number must not allocate without bound
  for (auto* cols : {&t.stage_busy, &t.stage_wait}) {
    if (static_cast<int64_t>(cols->size()) <= max_stage) cols->resize(static_cast<size_t>(max_stage + 1));
    for (auto& col : *cols) col.resize(index + 1, kNaN);
  }
  for (size_t i = 0; i < r.stages.size(); ++i) {
    const records::StageTimes& st = r.stages[i];
    if (st.stage < 0 || st.stage > max_stage) continue;
    t.stage_busy[static_cast<size_t>(st.stage)][index] = busy[i];
    t.stage_wait[static_cast<size_t>(st.stage)][index] = st.time.pp_wait;
  }
}

}  // namespace

namespace {

// One line of metrics.jsonl (its number, and whether it is an unterminated last line, for problems).
void parse_metrics_line(std::string_view line, size_t line_no, bool last_unterminated, const std::string& path,
                        RunData& run) {
  TrainSeries& t = run.train;
  ValSeries& v = run.val;
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.remove_suffix(1);
  if (line.empty()) return;
  records::MetricsLine rec;
  records::ScanResult sr = records::scan_metrics_line(line, rec);
  if (sr != records::ScanResult::Ok) {
    std::string why = sr == records::ScanResult::Invalid ? parse_error_text(line) : "not a JSON object";
    if (last_unterminated) why += " (torn last line: the writer was probably killed)";
    run.problem(path + ":" + std::to_string(line_no) + ": " + why);
    return;
  }
  // Lines without a kind (hand-made files) are told apart by their figures.
  std::string_view kind = rec.kind;
  if (kind.empty() && rec.val_loss) kind = "val";
  else if (kind.empty() && rec.loss) kind = "train";
  const double step = value_or_nan(rec.step);
  if (kind == "provenance" && rec.peak_tflops) run.mfu_peak_tflops = *rec.peak_tflops;
  if (kind == "provenance") {  // one line per start: read whole for the build (the fast scanner skips the object)
    const json p = json::parse(line, nullptr, false);
    if (p.is_object() && p.contains("provenance") && p["provenance"].is_object()) {
      const json& sha = p["provenance"].value("git_sha", json());
      if (sha.is_string() && (run.builds.empty() || run.builds.back() != sha.get<std::string>()))
        run.builds.push_back(sha.get<std::string>());
    }
  }
  if (kind == "train") {
    if (!rec.step) {
      run.problem(path + ":" + std::to_string(line_no) + ": train record without a numeric \"step\"");
      return;
    }
    if (!t.step.empty() && step <= t.step.back()) {
      // A requeued run resumed from a checkpoint: its lines supersede the earlier ones from `step` on.
      size_t keep = static_cast<size_t>(std::lower_bound(t.step.begin(), t.step.end(), step) - t.step.begin());
      truncate_train_from(t, keep);
      run.restarts.push_back(step);
    }
    append_train(t, rec);
  } else if (kind == "val") {
    if (!rec.step) {
      run.problem(path + ":" + std::to_string(line_no) + ": val record without a numeric \"step\"");
      return;
    }
    if (!v.step.empty() && step <= v.step.back()) {
      size_t keep = static_cast<size_t>(std::lower_bound(v.step.begin(), v.step.end(), step) - v.step.begin());
      v.step.resize(keep);
      v.tokens.resize(keep);
      v.val_loss.resize(keep);
      v.val_windows.resize(keep);
    }
    v.step.push_back(step);
    v.tokens.push_back(value_or_nan(rec.tokens));
    v.val_loss.push_back(value_or_nan(rec.val_loss));  // null: cairn-train's record of a non-finite loss
    v.val_windows.push_back(value_or_nan(rec.val_windows));
  }
  // Other kinds (events, notes) are not charted.
}

// Parses the complete lines of `text` (and, when `final`, an unterminated last one); returns the bytes consumed.
size_t parse_metrics_lines(std::string_view text, bool final, size_t& line_no, const std::string& path, RunData& run) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    const bool unterminated = end == std::string_view::npos;
    if (unterminated && !final) break;
    if (unterminated) end = text.size();
    parse_metrics_line(text.substr(pos, end - pos), ++line_no, unterminated, path, run);
    pos = unterminated ? end : end + 1;
  }
  return pos;
}

// Reads metrics.jsonl in blocks instead of whole: a long run's file (hundreds of MB) was held in memory beside its
// columns, about 440 of the 620 bytes the report took per line. A first pass counts the lines so that the columns
// are reserved once. False (and a problem recorded) when the file cannot be read.
// A run resumed with another [train] val_batches, or by a cairn-train that counts windows otherwise, has val_loss
// points that average different sums: its curve and best_val_loss mix them (cairn-train warned at the resume, on
// stderr only). Said as a problem of the run, with where the count changed.
void note_mixed_val_windows(const std::string& path, RunData& run) {
  const ValSeries& v = run.val;
  std::string changes;
  double last = kNaN, last_step = kNaN;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v.val_windows[i])) continue;
    if (std::isfinite(last) && v.val_windows[i] != last)
      changes += strprintf("%s%.0f windows to step %.0f, %.0f from step %.0f", changes.empty() ? "" : "; ", last,
                           last_step, v.val_windows[i], v.step[i]);
    last = v.val_windows[i];
    last_step = v.step[i];
  }
  if (!changes.empty())
    run.problem(path + ": val_loss averages " + changes +
                " ([train] val_batches or the cairn-train changed at a resume): the curve and best_val_loss mix "
                "different sums");
}

bool read_metrics_jsonl(const std::string& path, RunData& run, const std::function<void(uint64_t)>& bytes_read) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) {
    run.problem(errno_message("cannot read", path));
    return false;
  }
  constexpr size_t kBlock = size_t{8} << 20;
  std::string buf(kBlock, '\0');
  size_t lines = 1;
  for (size_t got; (got = std::fread(buf.data(), 1, kBlock, f)) > 0;)
    lines += static_cast<size_t>(std::count(buf.data(), buf.data() + got, '\n'));
  for (auto* col : scalar_columns(run.train)) col->reserve(lines);
  std::rewind(f);
  // The file may grow while it is read (a run still training): whatever is there is parsed.
  std::string pending;
  size_t line_no = 0;
  bool failed = false;
  for (;;) {
    const size_t got = std::fread(buf.data(), 1, kBlock, f);
    if (got == 0) {
      failed = std::ferror(f) != 0;
      break;
    }
    pending.append(buf.data(), got);
    pending.erase(0, parse_metrics_lines(pending, false, line_no, path, run));
    if (bytes_read) bytes_read(got);
  }
  std::fclose(f);
  if (failed) {
    run.problem(file_message("cannot read", path, "read error"));
    return false;
  }
  parse_metrics_lines(pending, true, line_no, path, run);
  return true;
}

}  // namespace

void parse_metrics_jsonl(const std::string& text, const std::string& path, RunData& run) {
  // Reserve by the line count so 10^5-line files do not reallocate much.
  size_t guess = static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) + 1;
  for (auto* col : scalar_columns(run.train)) col->reserve(guess);
  size_t line_no = 0;
  parse_metrics_lines(text, true, line_no, path, run);
}

void parse_eval_jsonl(const std::string& text, const std::string& path, RunData& run) {
  size_t line_no = 0, pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    bool last_unterminated = end == std::string::npos;
    if (last_unterminated) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
    if (line.empty()) continue;
    const std::string where = path + ":" + std::to_string(line_no);
    records::EvalRow row;
    try {
      row = records::EvalRow::parse(line, where);
    } catch (const UsageError& e) {
      // One bad line is a problem of this run, not the end of the report.
      std::string why = e.what();
      if (last_unterminated) why += " (torn last line)";
      run.problem(why);
      continue;
    }
    if (std::isnan(row.value)) {
      run.problem(where + ": eval record needs \"task\", \"metric\" and a numeric \"value\"");
      continue;
    }
    EvalRecord r;
    r.step = static_cast<double>(row.step);
    r.tokens = static_cast<double>(row.tokens);
    r.checkpoint = std::move(row.checkpoint);
    r.task = std::move(row.task);
    r.metric = std::move(row.metric);
    r.value = row.value;
    r.stderr_value = row.stderr_value;
    if (row.n > 0) r.n = static_cast<double>(row.n);
    run.eval.push_back(std::move(r));
  }
}

RunData read_run(const std::string& dir, const std::function<void(uint64_t)>& bytes_read) {
  if (!is_dir(dir)) {
    std::error_code ec;
    if (fs::exists(dir, ec)) throw UsageError(file_message("run directory", dir, "not a directory"));
    throw UsageError(file_message("cannot open run directory", dir, "No such file or directory"));
  }
  RunData run;
  run.dir = dir;
  // The run's own config.toml (a pipeline may put one there), else the effective config cairn-train wrote.
  std::string cfg = join_path(dir, "config.toml");
  if (!is_file(cfg)) cfg = join_path(dir, "train/config.toml");
  if (is_file(cfg)) run.config = read_toml(cfg, run);
  run.name = basename_of(dir);
  if (run.config.is_object() && run.config.contains("run") && run.config["run"].is_object()) {
    const json& r = run.config["run"];
    if (r.contains("name") && r["name"].is_string() && !r["name"].get<std::string>().empty())
      run.name = r["name"].get<std::string>();
  }

  // sweep/
  std::string sweep_dir = join_path(dir, "sweep");
  if (is_dir(sweep_dir)) {
    run.present.emplace_back("sweep");
    std::string sj = join_path(sweep_dir, "sweep.json"), ft = join_path(sweep_dir, "fabric.toml");
    if (is_file(sj)) run.sweep = read_checked_json(sj, "sweep file", check_sweep_json, run);
    else run.missing.emplace_back(sj);
    if (is_file(ft)) run.fabric = read_toml(ft, run);
    else run.missing.emplace_back(ft);
  }
  // plan/
  std::string plan_dir = join_path(dir, "plan");
  if (is_dir(plan_dir)) {
    run.present.emplace_back("plan");
    std::string pj = join_path(plan_dir, "plans.json");
    if (is_file(pj)) run.plans = read_checked_json(pj, "plan file", check_plans_json, run);
    else run.missing.emplace_back(pj);
  }
  // bench/layout_predict.sh's table of predicted vs measured step time and memory per layout.
  std::string lp = join_path(dir, "layout_predict.json");
  if (is_file(lp)) run.layout_predict = read_json(lp, run);
  read_data_stage(run);
  // train/
  std::string train_dir = join_path(dir, "train");
  if (is_dir(train_dir)) {
    run.present.emplace_back("train");
    std::string mj = join_path(train_dir, "metrics.jsonl");
    if (!is_file(mj)) run.missing.emplace_back(mj);
    else if (read_metrics_jsonl(mj, run, bytes_read)) {
      if (run.train.size() == 0 && run.val.size() == 0) run.missing.emplace_back(mj + " (no train or val records)");
      note_mixed_val_windows(mj, run);
    }
    run.train_finished = is_file(join_path(train_dir, "FINISHED"));
    std::string kp = join_path(train_dir, "kernel_profile.json");
    if (is_file(kp)) run.kernel_profile = read_json(kp, run);
  }
  // eval/
  std::string eval_dir = join_path(dir, "eval");
  if (is_dir(eval_dir)) {
    run.present.emplace_back("eval");
    std::string rj = join_path(eval_dir, "results.jsonl");
    std::string text;
    if (!is_file(rj)) run.missing.emplace_back(rj);
    else if (slurp(rj, text, run)) {
      parse_eval_jsonl(text, rj, run);
      if (bytes_read) bytes_read(text.size());
      if (run.eval.empty()) run.missing.emplace_back(rj + " (no records)");
    }
  }
  return run;
}

namespace {

// Bytes of the files read_run parses line by line (most of its time), for the progress of read_runs.
uint64_t jsonl_bytes(const std::string& dir) {
  uint64_t total = 0;
  for (const char* f : {"train/metrics.jsonl", "eval/results.jsonl"}) {
    std::error_code ec;
    const auto n = fs::file_size(join_path(dir, f), ec);
    if (!ec) total += n;
  }
  return total;
}

// read_runs' progress line: MB of JSONL parsed over all the readers, and runs done (60 runs of 600,000 steps took
// 44 s without a word on stderr). A plain line every 10 s off a TTY: a report takes seconds to a minute, and 30 s
// (Progress's default) would say nothing over most of one.
struct ReadProgress {
  std::mutex mutex;
  std::optional<Progress> progress;
  uint64_t bytes = 0;
  size_t runs_done = 0, runs = 0;

  void add(uint64_t n, size_t runs_finished) {
    std::lock_guard<std::mutex> lock(mutex);
    bytes += n;
    runs_done += runs_finished;
    progress->update(bytes / 1000000, strprintf("%zu of %zu runs", runs_done, runs));
  }
};

}  // namespace

std::vector<RunData> read_runs(const std::vector<std::string>& dirs, int threads,
                               const std::function<void(size_t, RunData&)>& after_read) {
  std::vector<RunData> runs(dirs.size());
  std::vector<std::exception_ptr> errors(dirs.size());
  size_t nthreads = threads > 0
                        ? static_cast<size_t>(threads)
                        : std::max<size_t>(1, std::min<size_t>(dirs.size(), std::thread::hardware_concurrency()));
  ReadProgress rp;
  rp.runs = dirs.size();
  uint64_t total = 0;
  for (const auto& d : dirs) total += jsonl_bytes(d);
  if (total >= kProgressBytes) rp.progress.emplace("reading runs", total / 1000000, "MB", 10.0);
  std::function<void(uint64_t)> bytes_read;
  if (rp.progress) bytes_read = [&rp](uint64_t n) { rp.add(n, 0); };
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < dirs.size(); i = next++) {
      try {
        runs[i] = read_run(dirs[i], bytes_read);
        if (after_read) after_read(i, runs[i]);
      } catch (...) {
        errors[i] = std::current_exception();
      }
      if (rp.progress) rp.add(0, 1);
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < nthreads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  if (rp.progress) rp.progress->finish(strprintf("%zu run%s", dirs.size(), dirs.size() == 1 ? "" : "s"));
  return runs;
}

}  // namespace cairn::report
