// cairn-eval: scoring requests with a forward-only GPT over MPI ranks, tasks (perplexity, multiple
// choice), the results record (results.jsonl/h5, lm-evaluation-harness JSON) and the --watch driver.
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cairn/config.h"
#include "cairn/gpt.h"
#include "cairn/records.h"
#include "cairn/sections/eval.h"

namespace cairn::tokenizer {
class Tokenizer;
}

namespace cairn::eval {

// ---------------------------------------------------------------- scoring

// A set of scoring requests, materialised lazily (a rank only builds the rows it scores): request i is a
// sequence of lengths[i] input tokens and as many targets (-1 = position not scored).
struct RequestSet {
  std::string label;  // what the progress line on stderr names ("task mc")
  std::vector<int> lengths;
  std::function<void(size_t i, int32_t* inputs, int32_t* targets)> fill;
};

// The outcome of one request.
struct Score {
  double loglik = 0;    // sum of log p(target) over the scored positions (nats)
  int64_t tokens = 0;   // scored positions
  int64_t correct = 0;  // scored positions where the argmax token equals the target
};

struct ScoreStats {
  int64_t forwards = 0;          // forward passes on this rank
  int64_t tokens_scored = 0;     // scored positions over all ranks
  int64_t tokens_processed = 0;  // input positions (with padding) over all ranks
  double seconds = 0;
};

// Packs requests of similar length into batches of `batch_size` rows (longest first), deals whole
// batches to ranks round-robin, and gathers every Score to every rank in request order. A batch's
// contents do not depend on the rank count, so the per-request values (and sums taken in request
// order) are bitwise identical for any number of ranks.
std::vector<Score> score_requests(gpt::Model& model, const RequestSet& requests, int batch_size,
                                  ScoreStats* stats = nullptr);

// lm-evaluation-harness's get_rolling_token_windows + make_disjoint_window: windows over n tokens
// (prefix token before the first) such that every token is predicted once. Each window is
// (input_begin, input_len, pred_len): input tokens are doc[input_begin, input_begin+input_len), where
// input_begin == -1 means "prefix token, then doc[0, input_len-1)", and the last pred_len input
// positions are scored.
struct RollingWindow {
  int64_t input_begin = 0;
  int input_len = 0;
  int pred_len = 0;
};
std::vector<RollingWindow> rolling_windows(int64_t n, int max_seq_len, int context_len = 1);

// ---------------------------------------------------------------- tasks

struct Metric {
  std::string name;  // "acc", "acc_norm", "loss", "perplexity", "bits_per_byte", ...
  double value = 0;
  double stderr_ = std::numeric_limits<double>::quiet_NaN();  // NaN: not defined for this metric
  bool higher_is_better = true;
  // How the harness would aggregate per-example items into the value (configs[task].metric_list):
  // "mean", "weighted_perplexity", "bits_per_byte", "weighted_mean".
  std::string aggregation = "mean";
};

struct TaskResult {
  std::string task, kind;
  std::vector<Metric> metrics;
  int64_t samples = 0;            // examples (documents, windows, questions) scored
  int64_t samples_original = -1;  // the task's full size (before --limit, with malformed records); -1: = samples
  int64_t skipped_bad = 0;        // malformed records skipped with skip_bad
  int64_t tokens_scored = 0, tokens_processed = 0;
  double seconds = 0;
  nlohmann::json config = nlohmann::json::object();  // the task's settings (lm_eval "configs")
  // The tokenizer's end-of-text (harness tokenizer_eos_token / eot_token_id) and the context length.
  int64_t eot_id = -1;
  std::string eot_text;
  int max_length = 0;
  // With [eval] log_samples (rank 0): one line per example in the harness's sample schema (doc_id, doc,
  // target, arguments, resps, filtered_resps, filter, metrics, doc_hash, prompt_hash, target_hash, metrics).
  bool has_samples = false;
  std::vector<nlohmann::ordered_json> sample_lines;
};

// Everything a task needs besides the model.
struct TaskContext {
  std::vector<std::string> tasks;  // [eval] tasks, in order
  nlohmann::json tables;           // the [eval.task] tables
  bool log_samples = false;        // [eval] log_samples
  std::string default_data;        // dataset directory when a task names none
  double val_fraction = 0.02;      // of the training run that wrote the checkpoint
  int64_t train_val_rows = 0;      // windows in one validation pass of that run (0 = unknown)
  int context = 0;                 // maximum tokens per forward row
  int batch_size = 8;
  int64_t limit = 0;
  bool skip_bad = false;
  int threads = 1;  // CPU threads per rank for checking the shards the tasks read
  // What the checkpoint's run trained on (its train_state; "" for checkpoints that do not record them): a task's
  // dataset of another tokenizer is refused, and val / train_val on other data than the run's are warned about.
  std::string train_tokenizer_id, train_data_fingerprint;
};

// A prepared task: requests built once per model shape, scored per checkpoint.
struct Task {
  std::string name, kind;
  nlohmann::json settings;
  bool log_samples = false;  // fill TaskResult::sample_lines (rank 0)
  virtual ~Task() = default;
  virtual TaskResult evaluate(gpt::Model& model) = 0;
};

// The task list of [eval] tasks (with [eval.task.<name>] tables), validated: unknown names, bad kinds,
// missing files, malformed JSONL (with line numbers), empty tasks are UsageErrors. Tokenizers and
// datasets are loaded here; `model_cfg` is the checkpoint's model, checked against them. The dataset shards the tasks
// read are checked against index.json here, once (each rank its share, shards::verify_shards_across_ranks): a bad
// one throws on every rank (exit 3 naming it). Collective: every rank calls it with the same context.
std::vector<std::unique_ptr<Task>> prepare_tasks(const TaskContext& ctx, const gpt::GptConfig& model_cfg);

// Checks task tables that need no checkpoint (kinds, JSONL files) so a --watch job fails at once.
void check_task_tables(const nlohmann::json& tables, const EvalSection& eval);
// Every check of [eval] tasks and the [eval.task] tables that needs no checkpoint or file (empty, listed twice,
// unknown, a table's values), errors naming where a table was set; cairn-eval runs it before --print-config.
void check_task_config(const Config& cfg);

// One multiple-choice example and the harness's pair encoding (context/continuation split where the
// trailing whitespace of the context moves into the continuation; empty context -> end-of-text).
struct McExample {
  std::string context;
  std::vector<std::string> choices;
  int label = 0;
  std::string raw;   // the JSONL line (the harness's "doc" in samples)
  int64_t line = 0;  // its line number in the file, for messages
};
// Parses a JSONL file; errors "path:line: why" (UsageError), or counts skipped lines with skip_bad.
std::vector<McExample> read_mc_jsonl(const std::string& path, bool skip_bad, int64_t* skipped);
void encode_pair(const tokenizer::Tokenizer& tok, const std::string& context, const std::string& continuation,
                 std::vector<uint32_t>& context_enc, std::vector<uint32_t>& continuation_enc);
// Python's len(re.split(r"\s+", text)): words for word perplexity as lm-evaluation-harness counts them.
int64_t count_words(const std::string& text);
// Mean's standard error as the harness computes it: sample stddev (n-1) / sqrt(n); NaN for n < 2.
double mean_stderr(const std::vector<double>& x);

// ---------------------------------------------------------------- results

// One row of results.jsonl, results.h5 and --json: the record cairn-report reads too (cairn/records.h).
using ResultRow = records::EvalRow;

// results.jsonl is the record: reading it tells which (step, task) pairs are done. An unterminated last line that does
// not parse (an append cut short by a kill), or a last write with fewer rows than it recorded (rows_in_write: cut at a
// line's end), is dropped with the rows written with it and a warning: its checkpoint is scored again. *cut (when
// given) says whether rows were dropped: the file then holds them, and must be rewritten, not appended to.
std::vector<ResultRow> read_results(const std::string& jsonl_path, bool* cut = nullptr);
void write_results_jsonl(const std::string& path, const std::vector<ResultRow>& rows);
// Adds rows at the end in one write (a checkpoint's first rows: nothing to replace); the whole-file rewrite cost each
// checkpoint O(record) (20,000 checkpoints: 14 s each). False, writing nothing, when the file's last line is
// unterminated (a write cut short): the caller rewrites the record without it.
bool append_results_jsonl(const std::string& path, const std::vector<ResultRow>& rows);
// Identity of a file's current content as the file system reports it (device, inode, size, mtime): a record this
// process wrote and nobody has touched since need not be read back.
struct FileStamp {
  uint64_t dev = 0, ino = 0;
  int64_t size = -1, mtime_ns = 0;
  bool operator==(const FileStamp&) const = default;
};
FileStamp file_stamp(const std::string& path);
void write_results_h5(const std::string& path, const std::vector<ResultRow>& rows);
// eval/provenance.jsonl: one line per cairn-eval invocation whose rows results.jsonl holds. this_eval_run() is this
// process's key (what its rows carry); update_provenance_jsonl rewrites the file with this process's line added and
// only the lines whose key is in `referenced` kept: before results.jsonl is replaced, the writers of the rows on disk
// and of the new rows (a kill between the two rewrites leaves no row without its line); after it, those of its rows.
std::string this_eval_run();
void update_provenance_jsonl(const std::string& path, const std::set<std::string>& referenced);
// lm-evaluation-harness's file conventions (lm_eval/utils.py, lm_eval/loggers/evaluation_tracker.py).
// hash_string: sha256 hex digest of the UTF-8 text.
std::string sha256_hex(std::string_view text);
// datetime.now().isoformat().replace(":", "-") for a unix time (local time, microseconds dropped when 0):
// the <date_id> of results_<date_id>.json and samples_<task>_<date_id>.jsonl.
std::string harness_date_id(double unix_seconds);
// sanitize_model_name: runs of "<>:/|\?*[] become "__".
std::string sanitize_model_name(const std::string& name);
// json.dumps(doc, indent=2, ensure_ascii=False) of a doc, as the harness hashes it into doc_hash.
std::string python_json_dumps_indent2(const nlohmann::ordered_json& doc);

// What a results file records besides the task results.
struct RunInfo {
  int64_t step = 0, tokens = 0;
  std::string checkpoint;
  std::string checkpoint_id;            // checkpoint::checkpoint_id (the "cairn" object records it)
  std::string model_name;               // "<run>/step_%08d": config.model_args' pretrained=, model_name
  double start_time = 0, end_time = 0;  // unix seconds of this checkpoint's evaluation
  int batch_size = 0, ranks = 1;
  int64_t num_params = 0;
};
// lm-evaluation-harness results layout for one checkpoint: simple_evaluate's dict plus what
// EvaluationTracker.save_results_aggregated adds (task_hashes, model_name, times), and a "cairn" object.
nlohmann::ordered_json lm_eval_json(const RunInfo& info, const std::vector<TaskResult>& results,
                                    const EvalSection& eval, const gpt::GptConfig& model);
// The summary table printed on stdout.
std::string summary_table(int64_t step, int64_t tokens, const std::string& checkpoint,
                          const std::vector<TaskResult>& results);

// ---------------------------------------------------------------- driver

struct EvalOptions {
  std::vector<std::string> checkpoints;  // positional inputs (else [eval] checkpoint)
};

struct EvalSummary {
  int checkpoints_evaluated = 0;
  int checkpoints_skipped = 0;      // already in results
  std::vector<ResultRow> rows;      // rows written by this run
  std::vector<std::string> failed;  // damaged checkpoints, why each was not evaluated (the run then exits 1)
};

// Runs cairn-eval as configured (MPI initialised); called by main() and tests.
EvalSummary run_eval(const Config& cfg, const EvalOptions& opts = {});

}  // namespace cairn::eval
