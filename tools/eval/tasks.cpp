// Evaluation tasks: perplexity over a cairn dataset (training windows or rolling windows per document)
// and multiple choice from JSONL, with metrics defined as lm-evaluation-harness defines them.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "cairn/error.h"
#include "cairn/files.h"
#include "cairn/log.h"
#include "cairn/mpi.h"
#include "cairn/shards.h"
#include "cairn/shards_mpi.h"
#include "cairn/tokenizer.h"
#include "eval.h"

namespace cairn::eval {

using nlohmann::json;

// ---------------------------------------------------------------- helpers

namespace {

// The byte length of the Python whitespace character (str.isspace(), what re's \s and str.rstrip() take on str) that
// starts at text[i], 0 if none: ASCII whitespace, \x1c-\x1f, U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029,
// U+202F, U+205F and U+3000.
size_t python_space_len(const std::string& text, size_t i) {
  const unsigned char c = static_cast<unsigned char>(text[i]);
  if (c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f)) return 1;
  auto next = [&](size_t k) { return i + k < text.size() ? static_cast<unsigned char>(text[i + k]) : 0; };
  if (c == 0xc2 && (next(1) == 0x85 || next(1) == 0xa0)) return 2;
  if (c == 0xe1 && next(1) == 0x9a && next(2) == 0x80) return 3;  // U+1680
  if (c == 0xe2 && next(1) == 0x80 &&
      ((next(2) >= 0x80 && next(2) <= 0x8a) || next(2) == 0xa8 || next(2) == 0xa9 || next(2) == 0xaf))
    return 3;
  if (c == 0xe2 && next(1) == 0x81 && next(2) == 0x9f) return 3;  // U+205F
  if (c == 0xe3 && next(1) == 0x80 && next(2) == 0x80) return 3;  // U+3000
  return 0;
}

// The length of `text` without its trailing whitespace as Python's str.rstrip() removes it.
size_t python_rstrip_len(const std::string& text) {
  size_t end = text.size();
  for (;;) {
    if (end >= 1 && python_space_len(text, end - 1) == 1) end -= 1;
    else if (end >= 2 && python_space_len(text, end - 2) == 2) end -= 2;
    else if (end >= 3 && python_space_len(text, end - 3) == 3) end -= 3;
    else return end;
  }
}

}  // namespace

int64_t count_words(const std::string& text) {
  // re.split(r"\s+", s) yields one more piece than there are whitespace runs (leading/trailing runs
  // give empty pieces, which the harness counts too), \s being Python's whitespace (python_space_len).
  auto space_at = [&](size_t i, size_t* len) -> bool {
    *len = std::max<size_t>(1, python_space_len(text, i));
    return python_space_len(text, i) > 0;
  };
  int64_t runs = 0;
  bool in_run = false;
  for (size_t i = 0; i < text.size();) {
    size_t len = 1;
    bool sp = space_at(i, &len);
    if (sp && !in_run) ++runs;
    in_run = sp;
    i += len;
  }
  return runs + 1;
}

double mean_stderr(const std::vector<double>& x) {
  if (x.size() < 2) return std::nan("");
  double mu = 0;
  for (double v : x) mu += v;
  mu /= static_cast<double>(x.size());
  double ss = 0;
  for (double v : x) ss += (v - mu) * (v - mu);
  return std::sqrt(ss / static_cast<double>(x.size() - 1)) / std::sqrt(static_cast<double>(x.size()));
}

namespace {

int64_t utf8_chars(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s)
    if ((c & 0xc0) != 0x80) ++n;
  return n;
}

// "[eval.task.mc]", "[eval.task."wiki.test"]": the table as a config file names it.
std::string task_where(const std::string& name) { return "[" + dotted_name(kEvalTaskSection, name) + "]"; }

// The config refuses keys no task kind has; a key of the other kind (path in a perplexity task) would be
// ignored here, so it is refused too.
void check_kind_keys(const std::string& name, const std::string& kind, const json& t) {
  const std::vector<std::string>& keys = kind == "perplexity" ? perplexity_task_keys() : multiple_choice_task_keys();
  for (auto it = t.begin(); it != t.end(); ++it) {
    if (std::find(keys.begin(), keys.end(), it.key()) != keys.end()) continue;
    std::string list;
    for (const auto& k : keys) list += (list.empty() ? "" : ", ") + k;
    throw UsageError(task_where(name) + ": key '" + it.key() + "' is not a key of kind = \"" + kind +
                     "\" tasks (they have " + list + ")");
  }
}

// Python's str() of a float / bool, as the harness's sanitize_list writes resps.
std::string py_str(double v) { return nlohmann::json(v).dump(); }
std::string py_str(bool v) { return v ? "True" : "False"; }

// One line of the harness's samples_<task>_<date>.jsonl (lm_eval/evaluator.py evaluate(), then
// EvaluationTracker.save_results_samples): arguments become {"gen_args_i": {"arg_j": ...}}, resps and
// filtered_resps are stringified (sanitize_list), target is str(target), the hashes are sha256 hex digests of
// json.dumps(doc, indent=2, ensure_ascii=False), of the first request's first argument and of str(target);
// then the metric values (process_results) follow.
nlohmann::ordered_json harness_sample(int64_t doc_id, const nlohmann::ordered_json& doc, const std::string& target,
                                      const std::vector<std::vector<std::string>>& args,
                                      const std::vector<nlohmann::ordered_json>& filtered,
                                      const nlohmann::ordered_json& metrics) {
  using oj = nlohmann::ordered_json;
  oj arguments = oj::object(), resps = oj::array(), filtered_resps = oj::array(), names = oj::array();
  for (size_t i = 0; i < args.size(); ++i) {
    oj a = oj::object();
    for (size_t j = 0; j < args[i].size(); ++j) a["arg_" + std::to_string(j)] = args[i][j];
    arguments["gen_args_" + std::to_string(i)] = a;
  }
  for (const auto& f : filtered) {
    resps.push_back(oj::array({f}));  // one response per request (repeats = 1)
    filtered_resps.push_back(f);      // the "none" filter: take_first
  }
  for (auto it = metrics.begin(); it != metrics.end(); ++it) names.push_back(it.key());
  oj line = {{"doc_id", doc_id},
             {"doc", doc},
             {"target", target},
             {"arguments", arguments},
             {"resps", resps},
             {"filtered_resps", filtered_resps},
             {"filter", "none"},
             {"metrics", names},
             {"doc_hash", sha256_hex(python_json_dumps_indent2(doc))},
             {"prompt_hash", sha256_hex(args.empty() || args[0].empty() ? std::string() : args[0][0])},
             {"target_hash", sha256_hex(target)}};
  for (auto it = metrics.begin(); it != metrics.end(); ++it) line[it.key()] = it.value();
  return line;
}

std::string get_str(const json& t, const std::string& name, const char* key, const std::string& def) {
  if (!t.contains(key)) return def;
  if (!t[key].is_string()) throw UsageError(task_where(name) + " " + key + " must be a string");
  return t[key].get<std::string>();
}
int64_t get_int(const json& t, const std::string& name, const char* key, int64_t def) {
  if (!t.contains(key)) return def;
  if (!t[key].is_number_integer()) throw UsageError(task_where(name) + " " + key + " must be an integer");
  return t[key].get<int64_t>();
}

std::unique_ptr<tokenizer::Tokenizer> load_tokenizer(const std::string& dir, const std::string& task,
                                                     const gpt::GptConfig& model_cfg, const TaskContext& ctx) {
  std::unique_ptr<tokenizer::Tokenizer> tok;
  try {
    tok = tokenizer::load_for_dataset(dir);
  } catch (const Error& e) {
    throw UsageError("task " + task + ": cannot load the tokenizer of dataset \"" + dir + "\": " + e.what());
  }
  if (static_cast<int64_t>(tok->vocab_size()) != model_cfg.vocab_real) {
    throw UsageError(strprintf("task %s: the tokenizer of \"%s\" (%s) has %u ids but the checkpoint's model was "
                               "trained with vocab_real = %d: wrong dataset or checkpoint",
                               task.c_str(), dir.c_str(), tok->id().c_str(), tok->vocab_size(), model_cfg.vocab_real));
  }
  // The same number of ids is not the same tokenizer: one retrained to the same size, or a dataset rebuilt with
  // another, gave plausible losses for text the model never saw tokenized that way.
  // index.json's id against index.json's id, as the trainer recorded it (an index written before ids were recorded has
  // none, and is not checked).
  if (!ctx.train_tokenizer_id.empty())
    if (const std::string data_id = shards::Dataset::open(dir).tokenizer_id();
        !data_id.empty() && data_id != ctx.train_tokenizer_id)
      throw UsageError(strprintf("task %s: the tokenizer of \"%s\" (%s) is not the one the checkpoint's run trained "
                                 "with (%s): its token ids stand for other text (wrong dataset or checkpoint)",
                                 task.c_str(), dir.c_str(), data_id.c_str(), ctx.train_tokenizer_id.c_str()));
  return tok;
}

// ---------------------------------------------------------------- perplexity

// Perplexity over a dataset. mode "windows": cairn-train's T+1-token windows (stride T, each window
// predicts T tokens with context from its start; the split "val" is exactly the trainer's validation
// tail). mode "documents": each selected document (its end-of-text removed) scored alone with the
// harness's rolling windows, end-of-text as the prefix token; word perplexity needs the document text.
struct PerplexityTask : Task {
  std::unique_ptr<shards::Dataset> ds;
  std::vector<std::unique_ptr<shards::Shard>> shard_files;
  std::unique_ptr<tokenizer::Tokenizer> tok;
  bool documents = false;
  int T = 0;
  uint32_t eot = 0;
  // windows mode
  std::vector<std::pair<uint32_t, uint64_t>> windows;  // (shard, token offset); T+1 tokens each
  std::vector<uint8_t> token_bytes;                    // UTF-8 bytes each token stands for (EOT: 0)
  uint64_t window_bytes = 0;                           // bytes of all scored targets (computed once)
  // documents mode
  struct Doc {
    uint32_t shard;
    uint64_t begin, n;  // tokens [begin, begin+n) without the trailing end-of-text
    uint32_t bytes;
    int64_t words;
    uint64_t index;  // the document's number in its shard
  };
  std::vector<Doc> docs;
  struct Req {
    uint32_t doc;
    RollingWindow w;
  };
  std::vector<Req> reqs;
  int rolling_context = 1;
  int batch_size = 8;
  int64_t original = 0;  // windows / documents of the task before limit
  int max_length = 0;
  // The shards the windows or documents come from: checked against index.json before any of their tokens is read
  // (check_task_data, once per job for all tasks on the dataset).
  std::set<uint32_t> shards_read;

  // Documents mode, once their shards are checked: each document's tokens without its trailing end-of-text, its words
  // (from the decoded text) and its rolling windows.
  void read_documents() {
    if (!documents) return;
    std::vector<uint32_t> toks;
    for (uint32_t di = 0; di < docs.size(); ++di) {
      Doc& d = docs[di];
      toks.resize(d.n);
      shard_files[d.shard]->read_tokens(d.begin, d.n, toks.data());
      if (d.n > 0 && toks[d.n - 1] == eot) --d.n;
      d.words = count_words(tok->decode(toks.data(), static_cast<size_t>(d.n)));
      for (const RollingWindow& w : rolling_windows(static_cast<int64_t>(d.n), max_length, rolling_context))
        reqs.push_back({di, w});
    }
    if (reqs.empty()) throw UsageError("task " + name + ": every selected document is empty");
  }

  TaskResult evaluate(gpt::Model& model) override {
    std::vector<uint32_t> buf;  // the fill callbacks' read buffer
    RequestSet rs = documents ? document_requests(buf) : window_requests(buf);
    rs.label = "task " + name;
    ScoreStats st;
    std::vector<Score> scores = score_requests(model, rs, batch_size, &st);

    TaskResult res = result_header(st);
    Totals sum;
    if (!documents) add_window_scores(scores, sum, res);
    else add_document_scores(scores, sum, res);
    add_metrics(sum, res);
    return res;
  }

 private:
  // Sums over the scored windows or documents that the metrics are computed from.
  struct Totals {
    double nll = 0, bytes = 0, words = 0;
    int64_t tokens = 0, correct = 0;
  };

  // Windows: T inputs and the T tokens after them as targets.
  RequestSet window_requests(std::vector<uint32_t>& buf) {
    RequestSet rs;
    rs.lengths.assign(windows.size(), T);
    rs.fill = [this, &buf](size_t i, int32_t* in, int32_t* tg) {
      buf.resize(static_cast<size_t>(T) + 1);
      shard_files[windows[i].first]->read_tokens(windows[i].second, buf.size(), buf.data());
      for (int t = 0; t < T; ++t) {
        in[t] = static_cast<int32_t>(buf[t]);
        tg[t] = static_cast<int32_t>(buf[t + 1]);
      }
    };
    return rs;
  }

  // Documents: the rolling windows; the first one of a document starts with end-of-text as its
  // prefix, the others score only their last pred_len tokens (the rest is context).
  RequestSet document_requests(std::vector<uint32_t>& buf) {
    RequestSet rs;
    rs.lengths.resize(reqs.size());
    for (size_t i = 0; i < reqs.size(); ++i) rs.lengths[i] = reqs[i].w.input_len;
    rs.fill = [this, &buf](size_t i, int32_t* in, int32_t* tg) {
      const Req& r = reqs[i];
      const Doc& d = docs[r.doc];
      int L = r.w.input_len;
      if (r.w.input_begin < 0) {
        buf.resize(static_cast<size_t>(L));
        shard_files[d.shard]->read_tokens(d.begin, buf.size(), buf.data());
        in[0] = static_cast<int32_t>(eot);
        for (int t = 1; t < L; ++t) in[t] = static_cast<int32_t>(buf[t - 1]);
        for (int t = 0; t < L; ++t) tg[t] = static_cast<int32_t>(buf[t]);
      } else {
        buf.resize(static_cast<size_t>(L) + 1);
        shard_files[d.shard]->read_tokens(d.begin + static_cast<uint64_t>(r.w.input_begin), buf.size(), buf.data());
        for (int t = 0; t < L; ++t) {
          in[t] = static_cast<int32_t>(buf[t]);
          tg[t] = t >= L - r.w.pred_len ? static_cast<int32_t>(buf[t + 1]) : -1;
        }
      }
    };
    return rs;
  }

  TaskResult result_header(const ScoreStats& st) {
    TaskResult res;
    res.task = name;
    res.kind = kind;
    res.config = settings;
    res.samples_original = original;
    res.eot_id = eot;
    res.eot_text = tok->decode(&eot, 1);
    res.max_length = max_length;
    res.tokens_scored = st.tokens_scored;
    res.tokens_processed = st.tokens_processed;
    res.seconds = st.seconds;
    return res;
  }

  // Bytes the scored targets stand for (token byte lengths; end-of-text counts none): counted once
  // per task, windows split over ranks, an exact integer sum.
  uint64_t scored_window_bytes() {
    if (window_bytes == 0) {
      std::vector<uint32_t> row(static_cast<size_t>(T) + 1);
      uint64_t local = 0;
      for (size_t i = static_cast<size_t>(mpi::rank()); i < windows.size(); i += static_cast<size_t>(mpi::size())) {
        shard_files[windows[i].first]->read_tokens(windows[i].second, row.size(), row.data());
        for (int t = 1; t <= T; ++t) local += token_bytes[row[t]];
      }
      window_bytes = mpi::size() > 1 ? mpi::allreduce(local) : local;
    }
    return window_bytes;
  }

  void add_window_scores(const std::vector<Score>& scores, Totals& sum, TaskResult& res) {
    for (size_t i = 0; i < scores.size(); ++i) {
      sum.nll -= scores[i].loglik;
      sum.tokens += scores[i].tokens;
      sum.correct += scores[i].correct;
    }
    sum.bytes = static_cast<double>(scored_window_bytes());
    res.samples = static_cast<int64_t>(windows.size());
  }

  void add_document_scores(const std::vector<Score>& scores, Totals& sum, TaskResult& res) {
    std::vector<double> doc_ll(docs.size(), 0.0);
    for (size_t i = 0; i < scores.size(); ++i) {
      doc_ll[reqs[i].doc] += scores[i].loglik;
      sum.tokens += scores[i].tokens;
      sum.correct += scores[i].correct;
    }
    std::vector<Score> doc_score(docs.size());
    for (size_t i = 0; i < scores.size(); ++i) {
      doc_score[reqs[i].doc].tokens += scores[i].tokens;
      doc_score[reqs[i].doc].correct += scores[i].correct;
    }
    for (size_t d = 0; d < docs.size(); ++d) {
      sum.nll -= doc_ll[d];
      sum.bytes += docs[d].bytes;
      sum.words += static_cast<double>(docs[d].words);
    }
    res.samples = static_cast<int64_t>(docs.size());
    if (log_samples && mpi::rank() == 0) add_document_samples(doc_ll, doc_score, res);
  }

  // The harness's loglikelihood_rolling sample: arguments (text,), resps [[loglik]], and per-document
  // (value, weight) items of each metric (process_results' tuples).
  void add_document_samples(const std::vector<double>& doc_ll, const std::vector<Score>& doc_score, TaskResult& res) {
    res.has_samples = true;
    std::vector<uint32_t> toks;
    for (size_t d = 0; d < docs.size(); ++d) {
      const Doc& dc = docs[d];
      toks.resize(dc.n);
      shard_files[dc.shard]->read_tokens(dc.begin, dc.n, toks.data());
      std::string text = tok->decode(toks.data(), toks.size());
      const double ll = doc_ll[d], nt = static_cast<double>(doc_score[d].tokens);
      nlohmann::ordered_json doc = {{"text", text}, {"shard", dc.shard}, {"document", dc.index}};
      nlohmann::ordered_json items = {{"loss", {-ll, nt}},
                                      {"perplexity", {ll, nt}},
                                      {"accuracy", {static_cast<double>(doc_score[d].correct), nt}},
                                      {"bits_per_byte", {ll, dc.bytes}},
                                      {"byte_perplexity", {ll, dc.bytes}},
                                      {"word_perplexity", {ll, dc.words}}};
      res.sample_lines.push_back(
          harness_sample(static_cast<int64_t>(d), doc, text, {{text}}, {nlohmann::ordered_json(py_str(ll))}, items));
    }
  }

  // Aggregations as the harness names them, over per-example (value, weight) items: loss = weighted_mean of
  // (nll, tokens), perplexity = weighted_perplexity of (loglik, tokens), and so on. The scored-token count is
  // tokens_scored, not a metric.
  void add_metrics(const Totals& sum, TaskResult& res) const {
    const double nll = sum.nll, bytes = sum.bytes, words = sum.words;
    const int64_t tokens = sum.tokens, correct = sum.correct;
    double loss = tokens ? nll / static_cast<double>(tokens) : std::nan("");
    const double nan = std::nan("");
    res.metrics.push_back({"loss", loss, nan, false, "weighted_mean"});
    res.metrics.push_back({"perplexity", std::exp(loss), nan, false, "weighted_perplexity"});
    res.metrics.push_back({"accuracy", tokens ? static_cast<double>(correct) / static_cast<double>(tokens) : 0.0, nan,
                           true, "weighted_mean"});
    if (bytes > 0) {
      res.metrics.push_back({"bits_per_byte", nll / bytes / std::log(2.0), nan, false, "bits_per_byte"});
      res.metrics.push_back({"byte_perplexity", std::exp(nll / bytes), nan, false, "weighted_perplexity"});
    }
    if (documents && words > 0)
      res.metrics.push_back({"word_perplexity", std::exp(nll / words), nan, false, "weighted_perplexity"});
  }
};

// A perplexity task's split and mode, checked before any file is opened.
void check_split_and_mode(const std::string& name, const std::string& split, const std::string& mode) {
  if (split != "val" && split != "all" && split != "shards")
    throw UsageError(task_where(name) + " split = \"" + split + "\": expected \"val\", \"all\" or \"shards\"");
  if (mode != "windows" && mode != "documents")
    throw UsageError(task_where(name) + " mode = \"" + mode + "\": expected \"windows\" or \"documents\"");
}

// split = "shards": the shard indices the task lists, each one of the dataset's.
std::set<uint32_t> chosen_shards(const json& t, const std::string& name, const shards::Dataset& ds,
                                 const std::string& data) {
  std::set<uint32_t> chosen;
  if (!t.contains("shards") || !t["shards"].is_array() || t["shards"].empty())
    throw UsageError(task_where(name) + " split = \"shards\" needs shards = [index, ...]");
  for (const auto& s : t["shards"]) {
    if (!s.is_number_integer() || s.get<int64_t>() < 0 || s.get<uint64_t>() >= ds.num_shards())
      throw UsageError(strprintf("%s shards: %s is not a shard index of \"%s\" (0..%zu)", task_where(name).c_str(),
                                 s.dump().c_str(), data.c_str(), ds.num_shards() - 1));
    chosen.insert(s.get<uint32_t>());
  }
  return chosen;
}

// Bytes of text per token id (capped at 255; end-of-text counts 0), for bits per byte.
std::vector<uint8_t> token_byte_lengths(const tokenizer::Tokenizer& tok, uint32_t eot, int vocab) {
  std::vector<uint8_t> bytes(size_t(vocab), 0);
  for (uint32_t id = 0; id < tok.vocab_size(); ++id)
    bytes[id] = id == eot ? 0 : static_cast<uint8_t>(std::min<size_t>(255, tok.decode(&id, 1).size()));
  return bytes;
}

// The task's windows or documents, chosen from the index and the document tables: no token is read before
// check_task_data has checked their shards (read_documents reads them then).
std::unique_ptr<PerplexityTask> make_perplexity(const std::string& name, const json& t, const TaskContext& ctx,
                                                const gpt::GptConfig& mc) {
  auto task = std::make_unique<PerplexityTask>();
  task->name = name;
  task->kind = "perplexity";
  task->batch_size = ctx.batch_size;
  std::string data = get_str(t, name, "data", ctx.default_data);
  if (data.empty())
    throw UsageError("task " + name + ": no dataset (set [data] path or data in " + task_where(name) + ")");
  std::string split = get_str(t, name, "split", "val");
  std::string mode = get_str(t, name, "mode", "windows");
  check_split_and_mode(name, split, mode);
  task->documents = mode == "documents";
  try {
    task->ds = std::make_unique<shards::Dataset>(shards::Dataset::open(data));
  } catch (const Error& e) {
    throw UsageError("task " + name + ": " + e.what());
  }
  const shards::Dataset& ds = *task->ds;
  task->tok = load_tokenizer(data, name, mc, ctx);
  task->eot = ds.eot_id();
  for (size_t i = 0; i < ds.num_shards(); ++i) task->shard_files.push_back(ds.shard(i));

  const std::set<uint32_t> chosen = split == "shards" ? chosen_shards(t, name, ds, data) : std::set<uint32_t>{};
  // cairn-train's window numbering and validation tail (shards::WindowIndex, shared with the trainer).
  const int T = mc.seq_len;
  task->T = T;
  task->max_length = T;
  const shards::WindowIndex widx = shards::build_window_index(ds, T, ctx.val_fraction, 1);
  const uint64_t total = widx.total, val_windows = widx.val_windows;
  if (split == "val" && val_windows == 0)
    throw UsageError(strprintf("task %s: dataset \"%s\" has no validation split (val_fraction = %g, %llu windows of %d "
                               "tokens)",
                               name.c_str(), data.c_str(), ctx.val_fraction, static_cast<unsigned long long>(total),
                               T + 1));
  const bool like_train = t.contains("like_train") && t["like_train"].is_boolean() && t["like_train"].get<bool>();
  // Another copy of the data with other shards (resharded, rebuilt) has another validation tail: "val" is then not the
  // run's validation split and train_val no longer equals its val_loss, which gave plausible, wrong figures.
  if (split == "val" && !ctx.train_data_fingerprint.empty() && ds.content_fingerprint() != ctx.train_data_fingerprint &&
      mpi::rank() == 0)
    CAIRN_LOG_WARN("task %s: dataset \"%s\" is not the data the checkpoint's run trained on (fingerprint %s, the run's "
                   "%s): its validation split is not the run's%s",
                   name.c_str(), data.c_str(), ds.content_fingerprint().c_str(), ctx.train_data_fingerprint.c_str(),
                   like_train ? ", so this loss is not the run's val_loss" : "");
  const uint64_t val_first = widx.val_first();
  auto locate = [&](uint64_t w) {
    auto [s, off] = widx.locate(w);
    return std::make_pair(static_cast<uint32_t>(s), off);
  };
  int64_t limit = get_int(t, name, "limit", ctx.limit);
  json settings = {{"task", name},         {"output_type", "loglikelihood_rolling"},
                   {"dataset_path", data}, {"split", split},
                   {"mode", mode},         {"tokenizer", task->tok->id()}};

  if (!task->documents) {
    // max_windows defines the task (its full size); limit takes the first windows of it (n-samples original
    // vs effective).
    const int64_t task_windows = get_int(t, name, "max_windows", 0);
    int64_t max_windows = task_windows;
    if (limit > 0) max_windows = max_windows > 0 ? std::min(max_windows, limit) : limit;
    if (like_train) {
      // Exactly the rows of cairn-train's validation pass: row r is val window (r mod val_windows).
      if (split != "val") throw UsageError(task_where(name) + " like_train = true needs split = \"val\"");
      if (ctx.train_val_rows <= 0)
        throw UsageError("task " + name +
                         ": the checkpoint does not record the trainer's validation settings "
                         "(val_batches, micro batch, ranks); use max_windows instead");
      for (int64_t r = 0; r < ctx.train_val_rows; ++r)
        task->windows.push_back(locate(val_first + static_cast<uint64_t>(r) % val_windows));
      settings["like_train"] = true;
    }
    uint64_t lo = split == "val" ? val_first : 0, hi = like_train ? lo : total;
    for (uint64_t w = lo; w < hi; ++w) {
      auto loc = locate(w);
      if (split == "shards" && !chosen.count(loc.first)) continue;
      if (task_windows > 0 && task->original >= task_windows) break;
      ++task->original;
      if (max_windows > 0 && static_cast<int64_t>(task->windows.size()) >= max_windows) continue;
      task->windows.push_back(loc);
    }
    if (like_train) task->original = static_cast<int64_t>(task->windows.size());
    for (const auto& w : task->windows) task->shards_read.insert(w.first);
    if (task->windows.empty())
      throw UsageError(strprintf("task %s: no %d-token windows to score in \"%s\" (split %s)", name.c_str(), T + 1,
                                 data.c_str(), split.c_str()));
    task->token_bytes = token_byte_lengths(*task->tok, task->eot, mc.vocab);
    settings["windows"] = task->windows.size();
    settings["window_tokens"] = T + 1;
    if (split == "val") settings["val_fraction"] = ctx.val_fraction;
  } else {
    const int C = ctx.context > 0 ? std::min(ctx.context, mc.seq_len) : mc.seq_len;
    int rolling = static_cast<int>(get_int(t, name, "rolling_context", 1));
    // Documents that start at or after the held-out region's first token (val), or in chosen shards.
    auto [val_shard, val_off] =
        val_first < total ? locate(val_first) : std::make_pair(static_cast<uint32_t>(ds.num_shards()), uint64_t{0});
    for (uint32_t s = 0; s < ds.num_shards(); ++s) {
      if (split == "shards" && !chosen.count(s)) continue;
      if (split == "val" && s < val_shard) continue;
      task->shards_read.insert(s);  // every shard of the split, also past the limit's last document
      const shards::Shard& sh = *task->shard_files[s];
      for (uint64_t d = 0; d < sh.num_documents(); ++d) {
        uint64_t b = sh.doc_begin(d), e = sh.doc_end(d);
        if (split == "val" && s == val_shard && b < val_off) continue;
        ++task->original;  // every document of the split counts; limit keeps the first ones
        if (limit > 0 && static_cast<int64_t>(task->docs.size()) >= limit) continue;
        task->docs.push_back({s, b, e - b, sh.doc_bytes(d), 0, d});  // its end-of-text and words: read_documents
      }
    }
    if (task->docs.empty())
      throw UsageError(
          strprintf("task %s: no documents to score in \"%s\" (split %s)", name.c_str(), data.c_str(), split.c_str()));
    settings["documents"] = task->docs.size();
    settings["max_length"] = C;
    task->max_length = C;
    task->rolling_context = rolling;
    settings["rolling_context"] = rolling;
  }
  task->settings = settings;
  task->log_samples = ctx.log_samples && task->documents;
  return task;
}

// ---------------------------------------------------------------- multiple choice

struct McTask : Task {
  std::vector<McExample> examples;
  int64_t skipped = 0;
  std::vector<std::vector<int32_t>> seqs;                   // per choice: context + continuation tokens
  std::vector<int> cont_len;                                // per choice: scored trailing tokens
  std::vector<std::pair<size_t, size_t>> example_requests;  // first choice, count
  // Forward rows: a choice whose context + continuation fits the model is one row, as in the harness
  // (context truncated from the left); a continuation longer than the context is scored over several
  // rows, each token once with as much context as fits.
  struct Window {
    uint32_t choice;
    int start, len, pred;  // inputs seq[start, start+len), the last `pred` positions scored
  };
  std::vector<Window> windows;
  int batch_size = 8;
  std::string delimiter = " ";
  int64_t original = 0;  // valid examples in the file (before limit) + malformed ones skipped
  int64_t eot = -1;
  std::string eot_text;
  int max_length = 0;

  TaskResult evaluate(gpt::Model& model) override {
    RequestSet rs;
    rs.label = "task " + name;
    rs.lengths.resize(windows.size());
    for (size_t i = 0; i < windows.size(); ++i) rs.lengths[i] = windows[i].len;
    rs.fill = [&](size_t i, int32_t* in, int32_t* tg) {
      const Window& w = windows[i];
      const auto& s = seqs[w.choice];
      for (int t = 0; t < w.len; ++t) {
        in[t] = s[w.start + t];
        tg[t] = t >= w.len - w.pred ? s[w.start + t + 1] : -1;
      }
    };
    ScoreStats st;
    std::vector<Score> window_scores = score_requests(model, rs, batch_size, &st);
    std::vector<Score> scores(seqs.size());
    for (size_t i = 0; i < windows.size(); ++i) {
      Score& sc = scores[windows[i].choice];
      sc.loglik += window_scores[i].loglik;
      sc.tokens += window_scores[i].tokens;
      sc.correct += window_scores[i].correct;
    }
    TaskResult res;
    res.task = name;
    res.kind = kind;
    res.config = settings;
    res.samples = static_cast<int64_t>(examples.size());
    res.samples_original = original;
    res.eot_id = eot;
    res.eot_text = eot_text;
    res.max_length = max_length;
    res.skipped_bad = skipped;
    res.tokens_scored = st.tokens_scored;
    res.tokens_processed = st.tokens_processed;
    res.seconds = st.seconds;
    std::vector<double> acc(examples.size()), acc_norm(examples.size());
    const bool logging = log_samples && mpi::rank() == 0;
    res.has_samples = logging;
    for (size_t e = 0; e < examples.size(); ++e) {
      auto [first, count] = example_requests[e];
      size_t best = 0, best_norm = 0;
      double bv = -INFINITY, bn = -INFINITY;
      json lls = json::array();
      for (size_t c = 0; c < count; ++c) {
        double ll = scores[first + c].loglik;
        // The harness divides by len(choice) with numpy: an empty choice's normalised score is -inf, never chosen.
        const int64_t chars = utf8_chars(examples[e].choices[c]);
        double norm = chars > 0 ? ll / static_cast<double>(chars) : -INFINITY;
        if (ll > bv) {
          bv = ll;
          best = c;
        }
        if (norm > bn) {
          bn = norm;
          best_norm = c;
        }
        lls.push_back(ll);
      }
      acc[e] = best == static_cast<size_t>(examples[e].label) ? 1.0 : 0.0;
      acc_norm[e] = best_norm == static_cast<size_t>(examples[e].label) ? 1.0 : 0.0;
      if (logging) {
        // The harness's multiple_choice sample: one (context, delimiter + choice) request per choice, resps
        // (loglikelihood, is_greedy), target the label index; cairn adds the token ids it scored.
        const McExample& ex = examples[e];
        nlohmann::ordered_json doc;
        try {
          doc = nlohmann::ordered_json::parse(ex.raw);
        } catch (const nlohmann::json::exception&) {
          doc = {{"context", ex.context}, {"choices", ex.choices}, {"label", ex.label}};
        }
        std::vector<std::vector<std::string>> args;
        std::vector<nlohmann::ordered_json> filtered;
        nlohmann::ordered_json tokens = nlohmann::ordered_json::array();
        for (size_t c = 0; c < count; ++c) {
          const Score& sc = scores[first + c];
          args.push_back({ex.context, delimiter + ex.choices[c]});
          filtered.push_back(nlohmann::ordered_json::array({py_str(sc.loglik), py_str(sc.correct == sc.tokens)}));
          tokens.push_back({{"sequence", seqs[first + c]}, {"continuation_tokens", cont_len[first + c]}});
        }
        nlohmann::ordered_json line = harness_sample(static_cast<int64_t>(e), doc, std::to_string(ex.label), args,
                                                     filtered, {{"acc", acc[e]}, {"acc_norm", acc_norm[e]}});
        line["cairn"] = {{"lls", lls}, {"requests", tokens}};
        res.sample_lines.push_back(std::move(line));
      }
    }
    double a = 0, an = 0;
    for (size_t e = 0; e < examples.size(); ++e) {
      a += acc[e];
      an += acc_norm[e];
    }
    double n = static_cast<double>(examples.size());
    res.metrics.push_back({"acc", a / n, mean_stderr(acc), true, "mean"});
    res.metrics.push_back({"acc_norm", an / n, mean_stderr(acc_norm), true, "mean"});
    return res;
  }
};

std::unique_ptr<Task> make_mc(const std::string& name, const json& t, const TaskContext& ctx,
                              const gpt::GptConfig& mc) {
  auto task = std::make_unique<McTask>();
  task->name = name;
  task->kind = "multiple_choice";
  task->batch_size = ctx.batch_size;
  std::string path = get_str(t, name, "path", "");
  if (path.empty()) throw UsageError(task_where(name) + " needs path = \"file.jsonl\"");
  std::string data = get_str(t, name, "data", ctx.default_data);
  std::string delim = get_str(t, name, "delimiter", " ");
  int64_t limit = get_int(t, name, "limit", ctx.limit);
  task->examples = read_mc_jsonl(path, ctx.skip_bad, &task->skipped);
  task->original = static_cast<int64_t>(task->examples.size()) + task->skipped;
  task->delimiter = delim;
  if (limit > 0 && static_cast<int64_t>(task->examples.size()) > limit)
    task->examples.resize(static_cast<size_t>(limit));
  if (task->examples.empty())
    throw UsageError(
        file_message("task " + name + ": no examples in", path,
                     task->skipped ? strprintf("all %lld lines were malformed", static_cast<long long>(task->skipped))
                                   : "empty task"));
  if (data.empty())
    throw UsageError("task " + name + ": no tokenizer (set [data] path or data in " + task_where(name) + ")");
  auto tok = load_tokenizer(data, name, mc, ctx);
  const int C = ctx.context > 0 ? std::min(ctx.context, mc.seq_len) : mc.seq_len;
  const uint32_t eot = tok->eot_id();
  task->eot = eot;
  task->eot_text = tok->decode(&eot, 1);
  task->max_length = C;
  std::vector<uint32_t> ce, ke;
  for (size_t e = 0; e < task->examples.size(); ++e) {
    const McExample& ex = task->examples[e];
    task->example_requests.emplace_back(task->seqs.size(), ex.choices.size());
    for (const std::string& choice : ex.choices) {
      encode_pair(*tok, ex.context, delim + choice, ce, ke);
      if (ce.empty()) ce.push_back(tok->eot_id());
      if (ke.empty())
        throw UsageError(strprintf("%s:%lld: choice \"%s\" encodes to no tokens (with target_delimiter \"%s\")",
                                   path.c_str(), static_cast<long long>(ex.line), choice.c_str(), delim.c_str()));
      std::vector<int32_t> whole;
      whole.reserve(ce.size() + ke.size());
      for (uint32_t x : ce) whole.push_back(static_cast<int32_t>(x));
      for (uint32_t x : ke) whole.push_back(static_cast<int32_t>(x));
      const int m = static_cast<int>(whole.size()), k = static_cast<int>(ke.size());
      const uint32_t choice_id = static_cast<uint32_t>(task->seqs.size());
      // Predict tokens [m-k, m) in chunks of at most C, each from the C tokens before its end.
      for (int cur = m - k; cur < m;) {
        int end = std::min(m, cur + C);
        int len = std::min(C, end - 1);
        task->windows.push_back({choice_id, end - 1 - len, len, end - cur});
        cur = end;
      }
      task->seqs.push_back(std::move(whole));
      task->cont_len.push_back(k);
    }
  }
  task->settings = {{"task", name},
                    {"output_type", "multiple_choice"},
                    {"dataset_path", path},
                    {"target_delimiter", delim},
                    {"num_fewshot", 0},
                    {"tokenizer", tok->id()},
                    {"metric_list", json::array({{{"metric", "acc"}}, {{"metric", "acc_norm"}}})}};
  if (t.contains("version")) task->settings["version"] = t["version"];
  task->log_samples = ctx.log_samples;
  return task;
}

// The shards the tasks read, checked against index.json once per job before any task reads them: each dataset's
// shards split over the ranks, every rank told the verdict (exit 3 naming a bad shard, on every rank), and tasks over
// one dataset share its check. Every rank checking every shard its tasks read hashed a split = "all" task's whole
// dataset once per rank at each start.
void check_task_data(const std::vector<PerplexityTask*>& tasks, int threads) {
  struct DatasetCheck {
    const shards::Dataset* ds = nullptr;
    std::set<uint32_t> shards;
    std::vector<std::string> task_names;
  };
  std::vector<DatasetCheck> checks;  // in the order of the tasks, the same on every rank
  std::map<std::string, size_t> check_of_dir;
  for (const PerplexityTask* task : tasks) {
    // "data", "./data/" and its absolute path are one dataset (a path string alone, the same on every rank).
    std::string dir = std::filesystem::absolute(task->ds->dir()).lexically_normal().string();
    if (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    const auto [it, added] = check_of_dir.emplace(dir, checks.size());
    if (added) checks.push_back({task->ds.get(), {}, {}});
    DatasetCheck& check = checks[it->second];
    check.shards.insert(task->shards_read.begin(), task->shards_read.end());
    check.task_names.push_back(task->name);
  }
  for (const DatasetCheck& check : checks) {
    std::string names;
    for (const auto& n : check.task_names) names += (names.empty() ? "" : ", ") + n;
    const std::string what = strprintf("data \"%s\" (task%s %s)", check.ds->dir().c_str(),
                                       check.task_names.size() > 1 ? "s" : "", names.c_str());
    shards::verify_shards_across_ranks(*check.ds, {check.shards.begin(), check.shards.end()}, threads, what);
  }
}

}  // namespace

std::vector<McExample> read_mc_jsonl(const std::string& path, bool skip_bad, int64_t* skipped) {
  // A directory opens as an empty stream (it read as "empty task"), and a FIFO would block, or give its
  // lines to the check before the run and none to the run: a task file is read more than once.
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (!ec && st.type() == std::filesystem::file_type::directory)
    throw UsageError(
        file_message("cannot open", path, "Is a directory (a multiple-choice task's path is a JSONL file)"));
  if (!ec && st.type() != std::filesystem::file_type::regular && st.type() != std::filesystem::file_type::not_found)
    throw UsageError(file_message("cannot open", path,
                                  "not a regular file (a FIFO, socket or device; a task file is read more than once)"));
  std::ifstream in(path);
  if (!in) throw UsageError(errno_message("cannot open", path));
  std::vector<McExample> out;
  std::string line;
  int64_t lineno = 0, bad = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    std::string why;
    McExample ex;
    try {
      json j = json::parse(line);
      if (!j.is_object()) why = "not a JSON object";
      else if (!j.contains("context")) why = "missing string field \"context\"";
      else if (!j["context"].is_string()) why = "\"context\" must be a string, got " + config_value_text(j["context"]);
      else if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty())
        why = "\"choices\" must be a non-empty array of strings";
      else if (!j.contains("label")) why = "missing integer field \"label\"";
      else if (!j["label"].is_number_integer())
        why = "\"label\" must be an integer (the index of the right choice, from 0), got " +
              config_value_text(j["label"]);
      else {
        ex.context = j["context"].get<std::string>();
        for (const auto& c : j["choices"]) {
          if (!c.is_string()) {
            why = "\"choices\" must be a non-empty array of strings";
            break;
          }
          ex.choices.push_back(c.get<std::string>());
        }
        int64_t label = j["label"].get<int64_t>();
        // Named as written: a label above INT64_MAX reads as a negative int64_t (out of range all the same).
        if (why.empty() && (label < 0 || label >= static_cast<int64_t>(ex.choices.size())))
          why = strprintf("label %s is out of range for %zu choices", j["label"].dump().c_str(), ex.choices.size());
        ex.label = static_cast<int>(label);
        ex.raw = line;
        ex.line = lineno;
      }
    } catch (const json::exception& e) {
      why = std::string("invalid JSON: ") + e.what();
    }
    if (!why.empty()) {
      if (!skip_bad)
        throw UsageError(strprintf("%s:%lld: %s (use --skip-bad to skip malformed lines)", path.c_str(),
                                   static_cast<long long>(lineno), why.c_str()));
      if (bad < 5) CAIRN_LOG_WARN("%s:%lld: skipped: %s", path.c_str(), static_cast<long long>(lineno), why.c_str());
      ++bad;
      continue;
    }
    out.push_back(std::move(ex));
  }
  if (skipped) *skipped = bad;
  return out;
}

void encode_pair(const tokenizer::Tokenizer& tok, const std::string& context, const std::string& continuation,
                 std::vector<uint32_t>& context_enc, std::vector<uint32_t>& continuation_enc) {
  // lm-evaluation-harness _encode_pair: trailing whitespace of the context moves to the continuation,
  // the pair is encoded whole and the continuation is what follows the context's own encoding.
  // Python's rstrip(): Unicode whitespace (a no-break space, U+3000, ...) moves too, not only ASCII's.
  const size_t keep = python_rstrip_len(context);
  std::string ctx = context.substr(0, keep);
  std::string cont = context.substr(keep) + continuation;
  context_enc.clear();
  continuation_enc.clear();
  if (ctx.empty()) {
    // Empty context: the end-of-text token stands in; the continuation is encoded alone.
    tok.encode_into(cont, continuation_enc);
    return;
  }
  std::vector<uint32_t> whole = tok.encode(ctx + cont);
  tok.encode_into(ctx, context_enc);
  size_t n = std::min(context_enc.size(), whole.size());
  continuation_enc.assign(whole.begin() + static_cast<std::ptrdiff_t>(n), whole.end());
}

std::vector<std::unique_ptr<Task>> prepare_tasks(const TaskContext& ctx, const gpt::GptConfig& model_cfg) {
  const std::vector<std::string>& names = ctx.tasks;
  if (names.empty()) throw UsageError("[eval] tasks is empty: nothing to evaluate");
  const json& tables = ctx.tables;
  std::vector<std::unique_ptr<Task>> tasks;
  std::vector<PerplexityTask*> reading_data;  // the tasks that read dataset shards
  std::set<std::string> seen;
  for (const std::string& name : names) {
    if (!seen.insert(name).second) throw UsageError("[eval] tasks lists \"" + name + "\" twice");
    json t;
    if (tables.is_object() && tables.contains(name)) t = tables[name];
    else if (name == "val") t = {{"kind", "perplexity"}, {"split", "val"}, {"mode", "windows"}};
    else if (name == "train_val")
      t = {{"kind", "perplexity"}, {"split", "val"}, {"mode", "windows"}, {"like_train", true}};
    else {
      std::string known;
      if (tables.is_object())
        for (auto it = tables.begin(); it != tables.end(); ++it) known += (known.empty() ? "" : ", ") + it.key();
      throw UsageError("[eval] tasks: unknown task \"" + name + "\" (define " + task_where(name) +
                       "; defined: " + (known.empty() ? "none" : known) + "; built in: val, train_val)");
    }
    if (!t.is_object()) throw UsageError(task_where(name) + " must be a table");
    std::string kind = get_str(t, name, "kind", "");
    if (kind == "perplexity" || kind == "multiple_choice") check_kind_keys(name, kind, t);
    if (kind == "perplexity") {
      auto task = make_perplexity(name, t, ctx, model_cfg);
      reading_data.push_back(task.get());
      tasks.push_back(std::move(task));
    } else if (kind == "multiple_choice") {
      tasks.push_back(make_mc(name, t, ctx, model_cfg));
    } else {
      throw UsageError(task_where(name) + " kind = \"" + kind + "\": expected \"perplexity\" or \"multiple_choice\"");
    }
  }
  check_task_data(reading_data, ctx.threads);
  for (PerplexityTask* task : reading_data) task->read_documents();
  return tasks;
}

void check_task_tables(const json& tables, const EvalSection& eval) {
  for (const std::string& name : eval.tasks) {
    if (!tables.is_object() || !tables.contains(name)) continue;
    const json& t = tables[name];
    if (!t.is_object()) throw UsageError(task_where(name) + " must be a table");
    std::string kind = get_str(t, name, "kind", "");
    if (kind != "perplexity" && kind != "multiple_choice")
      throw UsageError(task_where(name) + " kind = \"" + kind + "\": expected \"perplexity\" or \"multiple_choice\"");
    check_kind_keys(name, kind, t);
    if (kind == "multiple_choice") {
      std::string path = get_str(t, name, "path", "");
      if (path.empty()) throw UsageError(task_where(name) + " needs path = \"file.jsonl\"");
      int64_t skipped = 0;
      if (read_mc_jsonl(path, eval.skip_bad, &skipped).empty())
        throw UsageError(file_message("task " + name + ": no examples in", path, "empty task"));
    }
  }
}

}  // namespace cairn::eval
