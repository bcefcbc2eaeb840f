// The results record of cairn-eval: results.jsonl (the record restarts resume from), results.h5,
// lm-evaluation-harness JSON per checkpoint, and the stdout summary table.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <ctime>
#include <fstream>
#include <set>

#include <openssl/evp.h>
#include <xxhash.h>

#include "cairn/error.h"
#include "cairn/files.h"
#include "cairn/h5.h"
#include "cairn/json_text.h"
#include "cairn/log.h"
#include "cairn/provenance.h"
#include "cairn/shards.h"
#include "eval.h"

namespace cairn::eval {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {
json number_or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

// Calls each(line, "path:lineno") for every non-empty line of a JSON-lines record; nothing when the file does not
// exist. A file that cannot be opened or read is an error: rewriting a record from part of it would lose the rest.
template <class Each>
void for_each_record_line(const std::string& path, Each each) {
  if (!path_exists(path)) return;
  std::ifstream in(path);
  if (!in) throw RuntimeError(errno_message("cannot open", path));
  std::string line;
  int64_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (!line.empty()) each(line, path + ":" + std::to_string(lineno));
  }
  if (in.bad()) throw RuntimeError(errno_message("cannot read", path));
}
}  // namespace

namespace {
// The rows at the end of `rows` that one write recorded together (same checkpoint, finish time and writer).
size_t last_write_size(const std::vector<ResultRow>& rows) {
  size_t n = 0;
  for (auto it = rows.rbegin(); it != rows.rend(); ++it, ++n) {
    const ResultRow& last = rows.back();
    if (it->step != last.step || it->checkpoint != last.checkpoint || it->wall_time != last.wall_time ||
        it->eval_run != last.eval_run)
      break;
  }
  return n;
}
}  // namespace

std::vector<ResultRow> read_results(const std::string& path, bool* cut) {
  std::vector<ResultRow> rows;
  if (cut) *cut = false;
  if (!path_exists(path)) return rows;
  const std::string text = read_file(path);
  int64_t lineno = 0;
  for (size_t b = 0; b < text.size();) {
    size_t e = text.find('\n', b);
    const bool last_unterminated = e == std::string::npos;
    if (last_unterminated) e = text.size();
    const std::string line = text.substr(b, e - b);
    b = e + 1;
    ++lineno;
    if (line.empty()) continue;
    const std::string where = path + ":" + std::to_string(lineno);
    try {
      rows.push_back(ResultRow::parse(line, where));
    } catch (const UsageError& e) {
      if (last_unterminated) {
        // One append writes a checkpoint's rows together, over several pages: a kill can keep the first ones and cut
        // the next. The whole rows before the cut that were written with it go too, so the checkpoint counts as
        // unscored and is scored again; kept, they marked it scored and the cut rows were lost for good. (If the cut
        // line began a new append, a whole checkpoint is scored again.)
        const size_t dropped = last_write_size(rows);
        rows.resize(rows.size() - dropped);
        if (cut) *cut = true;
        CAIRN_LOG_WARN("%s: the last line is cut short (a write interrupted); dropped%s, and its checkpoint is "
                       "scored again",
                       where.c_str(), dropped ? strprintf(" with the %zu rows written with it", dropped).c_str() : "");
        return rows;
      }
      throw UsageError(std::string(e.what()) + "; move the file away to start over");
    }
  }
  // The same cut at a line's end leaves no torn line: the last write's rows are then fewer than it recorded. They go
  // as above (kept, the rows after the cut were lost without a word: an audit's record lacked a task's last 4).
  const size_t last_write = last_write_size(rows);
  if (last_write > 0 && rows.back().rows_in_write > static_cast<int64_t>(last_write)) {
    const ResultRow last = rows.back();
    rows.resize(rows.size() - last_write);
    if (cut) *cut = true;
    CAIRN_LOG_WARN(
        "%s: the record ends after %zu of the %lld rows written together for step %lld (a write interrupted at a "
        "line's end); they are dropped, and the checkpoint is scored again",
        path.c_str(), last_write, static_cast<long long>(last.rows_in_write), static_cast<long long>(last.step));
  }
  return rows;
}

namespace {
std::string record_text(const std::vector<ResultRow>& rows) {
  std::string text;
  for (const auto& r : rows) text += json_text(r.to_json()) + "\n";
  return text;
}
}  // namespace

void write_results_jsonl(const std::string& path, const std::vector<ResultRow>& rows) {
  atomic_write(path, record_text(rows));
}

bool append_results_jsonl(const std::string& path, const std::vector<ResultRow>& rows) {
  const int fd = ::open(path.c_str(), O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) throw RuntimeError(errno_message("cannot write", path));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  const off_t size = ::lseek(fd, 0, SEEK_END);
  char last = '\n';
  if (size > 0 && ::pread(fd, &last, 1, size - 1) != 1) throw RuntimeError(errno_message("cannot read", path));
  if (last != '\n') return false;
  const std::string text = record_text(rows);
  // A failed write (a full disk) is undone: the record never keeps part of a line (if even that fails, the next read
  // drops the cut line and its checkpoint is scored again).
  try {
    write_all(fd, text.data(), text.size(), path);
    if (::fsync(fd) != 0) throw RuntimeError(errno_message("cannot sync", path));
  } catch (...) {
    [[maybe_unused]] const int undone = ::ftruncate(fd, size);
    throw;
  }
  return true;
}

FileStamp file_stamp(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  return {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino), static_cast<int64_t>(st.st_size),
          static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}

std::string this_eval_run() {
  const std::string text = json_text(provenance().to_json());
  return shards::hex64(XXH64(text.data(), text.size(), 0));
}

void update_provenance_jsonl(const std::string& path, const std::set<std::string>& referenced) {
  std::vector<records::EvalProvenance> lines;
  std::set<std::string> have;
  for_each_record_line(path, [&](const std::string& line, const std::string& where) {
    records::EvalProvenance p;
    try {
      p = records::EvalProvenance::parse(line, where);
    } catch (const UsageError& e) {
      // Provenance is a record of the past: a damaged line is reported and dropped, never a reason to lose results.
      CAIRN_LOG_WARN("%s; the line is dropped", e.what());
      return;
    }
    if (referenced.count(p.eval_run) && have.insert(p.eval_run).second) lines.push_back(std::move(p));
  });
  const std::string mine = this_eval_run();
  if (referenced.count(mine) && have.insert(mine).second) lines.push_back({mine, provenance().to_json()});
  std::string text;
  for (const auto& p : lines) text += json_text(p.to_json()) + "\n";
  // Unchanged (the usual case once this process's line is there): not rewritten, twice per checkpoint.
  if (path_exists(path) && read_file(path) == text) return;
  atomic_write(path, text);
}

void write_results_h5(const std::string& path, const std::vector<ResultRow>& rows) {
  AtomicFile af(path);
  {
    h5::File f = h5::File::create(af.temp_path());
    std::vector<int64_t> step, tokens, n;
    std::vector<double> value, err, wall;
    std::vector<std::string> ckpt, task, metric, eval_run;
    for (const auto& r : rows) {
      eval_run.push_back(r.eval_run);
      step.push_back(r.step);
      tokens.push_back(r.tokens);
      n.push_back(r.n);
      value.push_back(r.value);
      err.push_back(r.stderr_value);
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
    g.write_strings("eval_run", eval_run);  // the key of the writer's line in provenance.jsonl
    g.set_attr("rows", static_cast<int64_t>(rows.size()));
    f.set_attr("format", "cairn-eval-results");
    f.set_attr("format_version", int64_t{1});
    h5::write_provenance(f);
    f.close();
  }
  af.commit();
}

// ---------------------------------------------------------------- lm-evaluation-harness conventions

std::string sha256_hex(std::string_view text) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(text.data(), text.size(), digest, &len, EVP_sha256(), nullptr) != 1)
    throw RuntimeError("OpenSSL's SHA-256 failed");
  std::string out;
  for (unsigned int i = 0; i < len; ++i) out += strprintf("%02x", digest[i]);
  return out;
}

std::string harness_date_id(double unix_seconds) {
  // datetime.now().isoformat(): local time, "YYYY-MM-DDTHH:MM:SS[.ffffff]" (no fraction when it is 0).
  double whole = std::floor(unix_seconds);
  auto micro = static_cast<long>(std::llround((unix_seconds - whole) * 1e6));
  auto t = static_cast<time_t>(whole);
  if (micro >= 1000000) {
    micro -= 1000000;
    ++t;
  }
  struct tm tm {};
  localtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H-%M-%S", &tm);
  std::string s = buf;
  if (micro != 0) s += strprintf(".%06ld", micro);
  return s;
}

std::string sanitize_model_name(const std::string& name) {
  // re.sub(r"[\"<>:/|\\?*\[\]]+", "__", name)
  static const std::string bad = "\"<>:/|\\?*[]";
  std::string out;
  for (size_t i = 0; i < name.size();) {
    if (bad.find(name[i]) == std::string::npos) {
      out += name[i++];
      continue;
    }
    while (i < name.size() && bad.find(name[i]) != std::string::npos) ++i;
    out += "__";
  }
  return out;
}

std::string python_json_dumps_indent2(const nlohmann::ordered_json& doc) {
  // nlohmann's dump(2) matches json.dumps(indent=2, ensure_ascii=False) for the values JSON parsing gives:
  // ", " / ": " separators, one element per line, [] and {} for empty containers, \uXXXX (lowercase) for
  // other control characters, shortest round-trip floats.
  return doc.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

// The harness's "config" object: how the model was run (simple_evaluate's arguments).
static ordered_json harness_config(const RunInfo& info, const EvalSection& eval, const gpt::GptConfig& model) {
  const std::string model_args =
      strprintf("pretrained=%s,checkpoint=%s,layers=%d,hidden=%d,heads=%d,seq_len=%d,vocab=%d", info.model_name.c_str(),
                info.checkpoint.c_str(), model.layers, model.hidden, model.heads, model.seq_len, model.vocab_real);
  return {{"model", "cairn-gpt"},
          {"model_args", model_args},
          {"model_num_parameters", info.num_params},
          {"batch_size", info.batch_size},
          {"batch_sizes", ordered_json::array()},
          {"device", eval.backend},
          {"use_cache", nullptr},
          {"limit", eval.limit > 0 ? ordered_json(eval.limit) : ordered_json(nullptr)},
          // The harness's default: with it, its mean metrics (acc, acc_norm) take the closed-form stderr and the
          // weighted perplexities and bits_per_byte none ("N/A"), as here; 0 would mean no stderr at all.
          {"bootstrap_iters", 100000},
          {"gen_kwargs", nullptr},
          {"random_seed", nullptr},
          {"numpy_seed", nullptr},
          {"torch_seed", nullptr},
          {"fewshot_seed", nullptr},
          {"step", info.step},
          {"tokens", info.tokens}};
}

ordered_json lm_eval_json(const RunInfo& info, const std::vector<TaskResult>& results, const EvalSection& eval,
                          const gpt::GptConfig& model) {
  ordered_json res = ordered_json::object(), configs = ordered_json::object(), versions = ordered_json::object(),
               nshot = ordered_json::object(), hib = ordered_json::object(), nsamples = ordered_json::object(),
               groups = ordered_json::object(), perf = ordered_json::object(), hashes = ordered_json::object();
  const TaskResult* tok_source = nullptr;
  for (const auto& r : results) {
    // _collect_results: name, alias, sample_len, then "<metric>,<filter>" and "<metric>_stderr,<filter>".
    ordered_json t = {{"name", r.task}, {"alias", r.task}, {"sample_len", r.samples}};
    ordered_json h = ordered_json::object(), metric_list = ordered_json::array();
    for (const auto& m : r.metrics) {
      t[m.name + ",none"] = number_or_null(m.value);
      // The harness writes "N/A" where a metric has no standard error.
      t[m.name + "_stderr,none"] = std::isfinite(m.stderr_) ? ordered_json(m.stderr_) : ordered_json("N/A");
      h[m.name] = m.higher_is_better;
      metric_list.push_back(
          {{"metric", m.name}, {"aggregation", m.aggregation}, {"higher_is_better", m.higher_is_better}});
    }
    res[r.task] = t;
    // task.dump_config(): the task's settings plus the fields every harness task config has.
    ordered_json c = ordered_json::object();
    c["task"] = r.task;
    for (auto it = r.config.begin(); it != r.config.end(); ++it) c[it.key()] = it.value();
    c["num_fewshot"] = 0;
    c["metric_list"] = metric_list;
    c["repeats"] = 1;
    c["should_decontaminate"] = false;
    ordered_json version = r.config.contains("version") ? ordered_json(r.config["version"]) : ordered_json(1.0);
    c["metadata"] = {{"version", version}};
    configs[r.task] = c;
    versions[r.task] = version;
    nshot[r.task] = 0;
    hib[r.task] = h;
    nsamples[r.task] = {{"original", r.samples_original >= 0 ? r.samples_original : r.samples + r.skipped_bad},
                        {"effective", r.samples}};
    if (r.has_samples) {
      // EvaluationTracker.save_results_aggregated: sha256 of the concatenated doc/prompt/target hashes.
      std::string cat;
      for (const auto& s : r.sample_lines)
        cat += s["doc_hash"].get<std::string>() + s["prompt_hash"].get<std::string>() +
               s["target_hash"].get<std::string>();
      hashes[r.task] = sha256_hex(cat);
    }
    if (!tok_source && r.eot_id >= 0) tok_source = &r;
    perf[r.task] = {{"seconds", r.seconds},
                    {"tokens_scored", r.tokens_scored},
                    {"tokens_processed", r.tokens_processed},
                    {"tokens_per_s", r.seconds > 0 ? r.tokens_processed / r.seconds : 0.0},
                    {"examples_per_s", r.seconds > 0 ? r.samples / r.seconds : 0.0},
                    {"skipped_bad", r.skipped_bad}};
  }
  auto sorted = [](const ordered_json& o) {  // the harness sorts these by task name
    ordered_json out = ordered_json::object();
    std::vector<std::string> keys;
    for (auto it = o.begin(); it != o.end(); ++it) keys.push_back(it.key());
    std::sort(keys.begin(), keys.end());
    for (const auto& k : keys) out[k] = o[k];
    return out;
  };
  const std::string version = cairn_version(), sha = cairn_git_sha();
  ordered_json out;
  // simple_evaluate(): evaluate()'s dict ...
  out["results"] = res;
  out["group_subtasks"] = groups;
  out["configs"] = sorted(configs);
  out["versions"] = sorted(versions);
  out["n-shot"] = sorted(nshot);
  out["higher_is_better"] = sorted(hib);
  out["n-samples"] = nsamples;
  // ... then config, git_hash, date (time.time() at the start), add_env_info, add_tokenizer_info ...
  out["config"] = harness_config(info, eval, model);
  out["git_hash"] = sha;
  out["date"] = info.start_time;
  out["pretty_env_info"] = strprintf("cairn-eval %s (git %s) on %s, backend %s, %d rank(s)", version.c_str(),
                                     sha.c_str(), hostname_string().c_str(), eval.backend.c_str(), info.ranks);
  out["transformers_version"] = "N/A";
  out["lm_eval_version"] = "cairn-eval " + version;
  out["cairn_version"] = version;
  out["upper_git_hash"] = nullptr;
  if (tok_source) {
    const std::string id = std::to_string(tok_source->eot_id);
    out["tokenizer_pad_token"] = {nullptr, "None"};
    out["tokenizer_eos_token"] = {tok_source->eot_text, id};
    out["tokenizer_bos_token"] = {tok_source->eot_text, id};
    out["eot_token_id"] = tok_source->eot_id;
    out["max_length"] = tok_source->max_length;
  }
  // ... and EvaluationTracker.save_results_aggregated(): task_hashes and the GeneralConfigTracker fields.
  out["task_hashes"] = hashes;
  out["model_source"] = "cairn";
  out["model_name"] = info.model_name;
  out["model_name_sanitized"] = sanitize_model_name(info.model_name);
  out["system_instruction"] = nullptr;
  out["system_instruction_sha"] = nullptr;
  out["fewshot_as_multiturn"] = false;
  out["chat_template"] = nullptr;
  out["chat_template_sha"] = nullptr;
  out["start_time"] = info.start_time;
  out["end_time"] = info.end_time;
  out["total_evaluation_time_seconds"] = strprintf("%.6f", info.end_time - info.start_time);
  out["cairn"] = {{"step", info.step},
                  {"tokens", info.tokens},
                  {"checkpoint", info.checkpoint},
                  {"checkpoint_id", info.checkpoint_id},
                  {"performance", perf},
                  {"provenance", provenance().to_json()}};
  return out;
}

std::string summary_table(int64_t step, int64_t tokens, const std::string& checkpoint,
                          const std::vector<TaskResult>& results) {
  std::string s = strprintf("checkpoint %s (step %lld, %lld tokens)\n", checkpoint.c_str(),
                            static_cast<long long>(step), static_cast<long long>(tokens));
  s += "|      Task       |     Metric      |    Value    |   Stderr   |   n    | tokens/s | examples/s |\n";
  s += "|-----------------|-----------------|-------------|------------|--------|----------|------------|\n";
  for (const auto& r : results) {
    double tps = r.seconds > 0 ? r.tokens_processed / r.seconds : 0, eps = r.seconds > 0 ? r.samples / r.seconds : 0;
    bool first = true;
    for (const auto& m : r.metrics) {
      std::string err = std::isfinite(m.stderr_) ? strprintf("%10.4f", m.stderr_) : std::string("       N/A");
      std::string val = std::abs(m.value) < 1e6 ? strprintf("%11.5f", m.value) : strprintf("%11.5g", m.value);
      s += strprintf("| %-15s | %-15s | %s | %s | %6lld | %8s | %10s |\n", first ? r.task.c_str() : "", m.name.c_str(),
                     val.c_str(), err.c_str(), static_cast<long long>(r.samples),
                     first ? strprintf("%.0f", tps).c_str() : "", first ? strprintf("%.1f", eps).c_str() : "");
      first = false;
    }
  }
  return s;
}

}  // namespace cairn::eval
