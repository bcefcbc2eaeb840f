// cairn-eval's driver: resolve checkpoints (one, a root, or --watch a training run), load each into a
// forward-only model, run the tasks, and append to the results record (restart-safe).

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include <toml++/toml.h>
#include <xxhash.h>

#include "cairn/checkpoint.h"
#include "cairn/cli.h"
#include "cairn/clock.h"
#include "cairn/config_origin.h"
#include "cairn/dir_lock.h"
#include "cairn/error.h"
#include "cairn/files.h"
#include "cairn/gpu.h"
#include "cairn/json_text.h"
#include "cairn/kernels/backend.h"
#include "cairn/log.h"
#include "cairn/mpi.h"
#include "cairn/sections/data.h"
#include "cairn/sections/model.h"
#include "cairn/sections/run.h"
#include "cairn/shards.h"
#include "cairn/stale_temps.h"
#include "eval.h"

namespace fs = std::filesystem;

namespace cairn::eval {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {

// A checkpoint to evaluate: its directory (or model.h5 path), step and identity. Results are keyed by step and
// checkpoint_id, so a step the trainer wrote again (a rollback with --resume DIR) is scored again. `problem` marks a
// checkpoint that is there but whose data is damaged (a sealed one failing its checksums, an unreadable model.h5):
// it is reported and counted as failed, never loaded.
struct Target {
  int64_t step = -1;
  std::string path;
  std::string id;        // checkpoint::checkpoint_id
  double sealed_at = 0;  // checkpoint::sealed_time (rank 0 only)
  std::string problem;
};

Target make_target(int64_t step, const std::string& path, std::string problem = "") {
  return {step, path, checkpoint::checkpoint_id(path), checkpoint::sealed_time(path), std::move(problem)};
}

// Settings of the training run that wrote a checkpoint (from model.h5's config_toml).
struct RunSettings {
  double val_fraction = -1;
  std::string data_path, run_dir;
  int64_t val_rows = 0;  // windows one validation pass of the trainer scores (0 = unknown)
};

RunSettings parse_run_settings(const std::string& config_toml, const records::TrainState& train_state) {
  RunSettings rs;
  if (config_toml.empty()) return rs;
  try {
    toml::table t = toml::parse(config_toml);
    if (auto v = t["data"]["val_fraction"].value<double>()) rs.val_fraction = *v;
    if (auto v = t["data"]["path"].value<std::string>()) rs.data_path = *v;
    if (auto v = t["run"]["dir"].value<std::string>()) rs.run_dir = *v;
    // cairn-train's validation pass: the windows it scored, as it recorded them (val_rows: val_batches x
    // data-parallel ranks x micro-batch, capped by the split)...
    if (train_state.val_rows) {
      rs.val_rows = static_cast<int64_t>(*train_state.val_rows);
      return rs;
    }
    // ... or, for checkpoints written before it recorded them, val_batches micro-batches per rank.
    int64_t world = train_state.world_size.value_or(0);
    int64_t vb = t["train"]["val_batches"].value<int64_t>().value_or(0);
    int64_t mb = train_state.micro_batch.value_or(t["train"]["micro_batch"].value<int64_t>().value_or(0));
    if (mb <= 0) mb = t["parallel"]["mb"].value<int64_t>().value_or(0);
    if (mb <= 0 && world > 0) mb = t["train"]["global_batch"].value<int64_t>().value_or(0) / world;
    if (world > 0 && vb > 0 && mb > 0) rs.val_rows = vb * world * mb;
  } catch (const std::exception& e) {
    CAIRN_LOG_WARN("cannot parse the training config stored in the checkpoint: %s", e.what());
  }
  return rs;
}

// Refuses a model.h5 too small for the float32 weights its header describes: a damaged header (layers = 1000000)
// would otherwise have the model built, at that size, before its tensors are found missing. The count is
// gpt::count_params in double, which a damaged header's sizes cannot overflow.
void check_weights_fit(const std::string& path, const gpt::GptConfig& c) {
  const std::string file = fs::is_directory(path) ? join_path(path, "model.h5") : path;
  std::error_code ec;
  const uintmax_t have = fs::file_size(file, ec);
  if (ec) return;  // loading the weights names the problem
  const double h = c.hidden;
  const double params = double(c.vocab) * h + double(c.seq_len) * h + double(c.layers) * (12 * h * h + 13 * h) + 2 * h;
  if (4 * params > static_cast<double>(have))
    throw RuntimeError(strprintf("model.h5 has %ju bytes, too few for the %.4g float32 parameters of the model its "
                                 "header describes (layers %d, hidden %d, seq_len %d, vocab %d)",
                                 have, params, c.layers, c.hidden, c.seq_len, c.vocab));
}

// Refuses a checkpoint whose model differs from a [model] key the user set explicitly.
void check_model_keys(const Config& cfg, const gpt::GptConfig& mc, const std::string& where) {
  const ModelSection m = read_section<ModelSection>(cfg);
  struct K {
    const char* key;
    int64_t want;
    int64_t actual;
    int64_t alt;
  } keys[] = {{"model.layers", m.layers, mc.layers, mc.layers},
              {"model.hidden", m.hidden, mc.hidden, mc.hidden},
              {"model.heads", m.heads, mc.heads, mc.heads},
              {"model.seq_len", m.seq_len, mc.seq_len, mc.seq_len},
              {"model.vocab", m.vocab, mc.vocab, mc.vocab_real}};
  for (const auto& k : keys) {
    if (cfg.origin(k.key).kind == Origin::Default) continue;  // only keys the user set explicitly
    const int64_t want = k.want;
    if (std::string(k.key) == "model.vocab" && want == 0) continue;
    if (want != k.actual && want != k.alt) {
      throw UsageError(strprintf("checkpoint \"%s\" has %s = %lld but the config sets %s = %lld (%s): a checkpoint of "
                                 "another model shape",
                                 where.c_str(), k.key, static_cast<long long>(k.actual), k.key,
                                 static_cast<long long>(want), cfg.origin(k.key).describe().c_str()));
    }
  }
}

bool same_shape(const gpt::GptConfig& a, const gpt::GptConfig& b) {
  return a.layers == b.layers && a.hidden == b.hidden && a.heads == b.heads && a.seq_len == b.seq_len &&
         a.vocab == b.vocab && a.vocab_real == b.vocab_real;
}

// Resolves a positional input / [eval] checkpoint into checkpoints: a model.h5, a step_* directory,
// a checkpoint root, or a train directory holding ckpt/. A path that is not there, or a step directory without DONE
// (its write was interrupted), is the user's to fix (UsageError); a checkpoint that is there but damaged becomes a
// Target with its problem, reported while the others are scored.
std::vector<Target> resolve_input(const std::string& input, bool verify) {
  if (!path_exists(input)) throw UsageError(file_message("cannot open checkpoint", input, "No such file or directory"));
  if (fs::is_regular_file(input)) {
    int64_t step = -1;
    std::string problem;
    try {
      step = checkpoint::read_model_meta(input).step;
    } catch (const std::exception& e) {
      problem = e.what();
    }
    return {make_target(step, input, problem)};
  }
  if (path_exists(join_path(input, "model.h5")) || checkpoint::is_sealed(input)) {
    if (!checkpoint::is_sealed(input))
      throw UsageError(file_message("incomplete checkpoint", input, checkpoint::check_dir(input, false)));
    std::string problem = checkpoint::check_dir(input, verify);
    int64_t step = checkpoint::parse_step_dir(fs::path(input).lexically_normal().filename().string());
    if (step < 0 && problem.empty()) try {
        step = checkpoint::read_model_meta(input).step;
      } catch (const std::exception& e) {
        problem = e.what();
      }
    return {make_target(step, input, problem)};
  }
  std::string root = fs::is_directory(join_path(input, "ckpt")) ? join_path(input, "ckpt") : input;
  std::vector<Target> out;
  for (const auto& e : checkpoint::list(root, verify)) {
    if (e.complete) out.push_back(make_target(e.step, e.dir));
    else if (e.sealed) out.push_back(make_target(e.step, e.dir, e.problem));
    else CAIRN_LOG_WARN("skipping incomplete checkpoint \"%s\": %s", e.dir.c_str(), e.problem.c_str());
  }
  if (out.empty()) throw UsageError(file_message("no complete checkpoint in", root, "nothing to evaluate"));
  return out;
}

class Evaluator {
 public:
  Evaluator(const Config& cfg, const EvalSection& es) : cfg_(cfg), eval_(es), data_(read_section<DataSection>(cfg)) {
    run_dir_ = read_section<RunSection>(cfg).dir;
    out_dir_ = join_path(run_dir_, "eval");
    const std::string& bname = eval_.backend;
    if (bname == "cuda") {
      // Unavailable (no driver, no GPU, a build without CUDA) is a configuration error with the reason; otherwise
      // each rank takes the GPU of its local rank before the backend allocates anything.
      if (const char* why = kernels::backend_unavailable_reason("cuda")) {
        const std::string msg = strprintf("[eval] backend = \"cuda\" cannot run here: %s", why);
        if (kernels::backend_unavailable_is_failure("cuda")) throw RuntimeError(msg);  // a failing driver: exit 1
        throw UsageError(msg);
      }
      device_ = gpu::bind_rank_to_gpu("[eval] backend");
      CAIRN_LOG_INFO("evaluating on GPU %d of this node: %s (%s)", device_.ordinal, device_.name.c_str(),
                     device_.pci_bus_id.c_str());
    }
    backend_ = kernels::find_backend(bname.c_str());
    if (!backend_)
      throw UsageError(strprintf("[eval] backend = \"%s\" is not available in this build (available: %s)",
                                 bname.c_str(), kernels::backend_names()));
    // threads = 0: share the node's cores among its ranks (and OpenBLAS's too), as cairn-train does.
    threads_ = eval_.threads > 0 ? eval_.threads : mpi::cores_per_local_rank();
    kernels::set_cpu_threads(threads_);
    batch_size_ = static_cast<int>(eval_.batch_size);
    bool ok = true;
    std::string msg;
    if (mpi::rank() == 0) {
      try {
        // Checked now, made when the first result is written: an evaluation refused for its input (no checkpoint, a
        // bad task file) leaves no eval/ directory behind.
        if (const std::string why = creatable_dir_problem(out_dir_); !why.empty())
          throw UsageError(file_message("cannot write results to", out_dir_, why));
        // The files each result rewrites must be files: a directory there failed only after the whole evaluation.
        for (const char* name : {"results.jsonl", "results.h5", "provenance.jsonl"}) {
          const std::string path = join_path(out_dir_, name);
          std::error_code ec;
          if (fs::exists(path, ec) && !fs::is_regular_file(path, ec))
            throw UsageError(file_message("cannot write results to", path, "exists and is not a regular file"));
        }
        rows_ = read_results(join_path(out_dir_, "results.jsonl"), &record_cut_);
        record_stamp_ = file_stamp(join_path(out_dir_, "results.jsonl"));
      } catch (const Error& e) {
        ok = false;
        msg = e.what();
      }
    }
    mpi::agree_or_throw(ok, msg, kExitUsage);
    task_names_ = eval_.tasks;
    check_task_config(cfg);
    const json tables = cfg.section("eval.task");
    for (const auto& t : task_names_) {
      task_definition_[t] = task_definition(tables, t);
      task_config_[t] = task_fingerprint(t, eval_.limit);
    }
  }

  // What defines a task besides the checkpoint: its [eval.task] table (or, for val and train_val, [data]) and the
  // contents of the files the table names. task_fingerprint adds the evaluation settings that change what is scored;
  // rows scored under another fingerprint are not "already evaluated" (a task file edited, --limit lifted: they were
  // kept stale).
  struct TaskDefinition {
    json table;         // the task's [eval.task] table; null for val and train_val
    std::string files;  // "key xxh64" of each file the table names
  };
  TaskDefinition task_definition(const json& tables, const std::string& task) const {
    TaskDefinition d;
    if (!tables.is_object() || !tables.contains(task)) return d;
    d.table = tables[task];
    for (const auto& [key, value] : d.table.items()) {
      std::error_code ec;
      if (!value.is_string() || !fs::is_regular_file(value.get<std::string>(), ec)) continue;
      const std::string content = read_file(value.get<std::string>());
      d.files += key + " " + shards::hex64(XXH64(content.data(), content.size(), 0)) + "\n";
    }
    return d;
  }

  // The fingerprint rows record as task_config. table_limit: the table's own limit as configured (-1), absent (0) or
  // n; limit: [eval] limit / --limit.
  std::string task_fingerprint(const std::string& task, int64_t limit, int64_t table_limit = -1) const {
    const TaskDefinition& d = task_definition_.at(task);
    std::string text = task + "\n";
    if (d.table.is_null()) {
      text += json_text(cfg_.section("data")) + "\n";
    } else {
      json table = d.table;
      if (table_limit == 0) table.erase("limit");
      if (table_limit > 0) table["limit"] = table_limit;
      text += json_text(table) + "\n" + d.files;
    }
    text += strprintf("limit=%lld context=%lld", static_cast<long long>(limit), static_cast<long long>(eval_.context));
    return shards::hex64(XXH64(text.data(), text.size(), 0));
  }

  // A row scored under this task's definition with other limits (none, or as many examples as it scored): a fuller
  // score a quick look does not replace. Rows of an older cairn-eval record no definition and count as this one's.
  bool same_definition(const ResultRow& old, const std::string& task) const {
    if (old.task_config.empty()) return true;
    for (int64_t table_limit : {int64_t{-1}, int64_t{0}, old.n})
      for (int64_t limit : {int64_t{0}, old.n})
        if (old.task_config == task_fingerprint(task, limit, table_limit)) return true;
    return false;
  }

  // True (rank 0) when every configured task already has rows for this checkpoint, or it was handled in this run.
  bool settled(const Target& t) const {
    if (evaluated_.count(key(t))) return true;
    if (eval_.reevaluate || !t.problem.empty()) return false;
    for (const auto& task : task_names_) {
      bool found = false;
      for (const auto& r : rows_)
        if (r.step == t.step && r.task == task && scored(r, t) &&
            (r.task_config.empty() || r.task_config == task_config_.at(task))) {
          // An older cairn-eval recorded no task definition: its rows count as scored, said once (a changed limit
          // or context would otherwise keep them without a word).
          if (r.task_config.empty() && !warned_unrecorded_) {
            warned_unrecorded_ = true;
            CAIRN_LOG_WARN("results.jsonl rows written by an older cairn-eval (task \"%s\" at step %lld, and maybe "
                           "others) record no task definition: they are kept as scored under the current one; "
                           "--reevaluate scores them again",
                           task.c_str(), static_cast<long long>(t.step));
          }
          found = true;
          break;
        }
      if (!found) return false;
    }
    return true;
  }

  // Rank 0 filters targets already in the results; every rank gets the same list.
  std::vector<Target> pending(const std::vector<Target>& all, int* skipped) {
    std::vector<Target> out;
    json list = json::array();
    if (mpi::rank() == 0) {
      for (const auto& t : all) {
        if (settled(t)) {
          if (evaluated_.insert(key(t)).second) ++*skipped;
          continue;
        }
        list.push_back({t.step, t.path, t.id, t.problem, t.sealed_at});
      }
    }
    list = json::parse(mpi::broadcast_string(list.dump()));
    for (const auto& x : list)
      out.push_back({x[0].get<int64_t>(), x[1].get<std::string>(), x[2].get<std::string>(), x[4].get<double>(),
                     x[3].get<std::string>()});
    return out;
  }

  // Evaluates one checkpoint on every task; false if it vanished meanwhile (pruned by the trainer) or its data is
  // damaged (then reported and counted in summary.failed: the other checkpoints are still scored).
  bool evaluate(const Target& target, EvalSummary& summary) {
    if (!target.problem.empty()) {
      // Pruned by the trainer between the listing and now (its files vanished under the check): skipped, as below.
      if (mpi::broadcast_value(static_cast<int>(!path_exists(target.path))) != 0) {
        CAIRN_LOG_WARN("checkpoint \"%s\" disappeared while being checked (pruned by the trainer?); skipped",
                       target.path.c_str());
        return false;
      }
      fail(target, file_message("damaged checkpoint", target.path, target.problem), summary);
      return false;
    }
    auto t0 = std::chrono::steady_clock::now();
    const double start_unix = unix_seconds();
    checkpoint::ModelMeta meta;
    // 0: loaded; 1: the checkpoint's data is damaged (reported, the sweep goes on); 2: anything else, which stops the
    // run with its code (a [model] key the checkpoint contradicts: 2; no memory for the model: 1).
    int local = 0, code = kExitRuntime;
    std::string msg;
    try {
      meta = checkpoint::read_model_meta(target.path);
      gpt::validate(meta.config);
      check_weights_fit(target.path, meta.config);
    } catch (const std::exception& e) {
      local = 1;
      msg = file_message("cannot read checkpoint", target.path, e.what());
    }
    if (local == 0) try {
        check_model_keys(cfg_, meta.config, target.path);
        if (!model_ || !same_shape(model_cfg_, meta.config)) {
          tasks_.clear();
          model_.reset();
          model_ = std::make_unique<gpt::Model>(meta.config, *backend_, /*training=*/false);
          model_->set_head_targets_only(true);  // tasks score a few positions per request (see gpt.h)
          model_cfg_ = meta.config;
        }
      } catch (const Error& e) {
        local = 2;
        code = e.code();
        msg = e.what();
      } catch (const std::exception& e) {
        local = 2;
        msg = file_message("cannot load checkpoint", target.path, e.what());
      }
    if (local == 0) try {
        load_weights(target.path);
      } catch (const std::exception& e) {
        local = 1;
        msg = e.what();
      }
    const int worst = mpi::allreduce(local, MPI_MAX);
    if (worst != 0) {
      bool gone = mpi::broadcast_value(static_cast<int>(!path_exists(target.path))) != 0;
      if (gone) {
        CAIRN_LOG_WARN("checkpoint \"%s\" disappeared while being read (pruned by the trainer?); skipped",
                       target.path.c_str());
        model_.reset();
        tasks_.clear();
        return false;
      }
      if (worst == 2) mpi::agree_or_throw(local != 2, msg, code);
      try {  // every rank reports the lowest failing rank's message
        mpi::agree_or_throw(local == 0, msg, kExitRuntime);
      } catch (const Error& e) {
        msg = e.what();
      }
      fail(target, msg, summary);
      return false;
    }
    const records::TrainState train_state =
        records::TrainState::from_json(JsonFields(meta.train_state, target.path, "checkpoint train_state"));
    // Tasks are prepared for the first checkpoint; a later one trained on another tokenizer's data is refused as the
    // first would have been.
    // Tasks prepared for a checkpoint that recorded no tokenizer (an older cairn-train) were never checked against
    // one: the first checkpoint that records it prepares them again, with the check.
    if (!tasks_.empty() && train_state.tokenizer_id && tasks_tokenizer_id_.empty()) tasks_.clear();
    if (!tasks_.empty() && train_state.tokenizer_id && !tasks_tokenizer_id_.empty() &&
        *train_state.tokenizer_id != tasks_tokenizer_id_)
      throw UsageError(file_message("cannot evaluate", target.path,
                                    "it was trained on data of tokenizer " + *train_state.tokenizer_id + ", the " +
                                        "checkpoints before it in this call on " + tasks_tokenizer_id_ +
                                        ": evaluate them in separate calls"));
    if (tasks_.empty()) {
      RunSettings rs = parse_run_settings(meta.config_toml, train_state);
      TaskContext ctx;
      ctx.train_tokenizer_id = train_state.tokenizer_id.value_or("");
      ctx.train_data_fingerprint = train_state.data_fingerprint.value_or("");
      tasks_tokenizer_id_ = ctx.train_tokenizer_id;
      ctx.tasks = task_names_;
      ctx.tables = cfg_.section("eval.task");
      ctx.log_samples = eval_.log_samples;
      ctx.default_data = data_.path;
      if (ctx.default_data.empty()) ctx.default_data = rs.data_path;
      if (ctx.default_data.empty()) {
        // The training run's own <run>/data: beside the checkpoint (<run>/train/ckpt/step_N), or under
        // its recorded run dir, or under this run dir.
        fs::path ck = fs::absolute(target.path).lexically_normal();
        if (ck.filename() == "model.h5") ck = ck.parent_path();
        std::vector<std::string> candidates = {(ck.parent_path().parent_path().parent_path() / "data").string()};
        if (!rs.run_dir.empty()) candidates.push_back(join_path(rs.run_dir, "data"));
        candidates.push_back(join_path(run_dir_, "data"));
        ctx.default_data = candidates.back();
        for (const auto& c : candidates)
          if (path_exists(join_path(c, "index.json"))) {
            ctx.default_data = c;
            break;
          }
      }
      // The validation split is the one of the run that wrote the checkpoint unless set here.
      ctx.val_fraction = cfg_.origin("data.val_fraction").kind != Origin::Default || rs.val_fraction < 0
                             ? data_.val_fraction
                             : rs.val_fraction;
      ctx.train_val_rows = rs.val_rows;
      ctx.context = static_cast<int>(eval_.context);
      if (eval_.context > model_cfg_.seq_len && mpi::rank() == 0)
        CAIRN_LOG_WARN("[eval] context %lld is above the checkpoint's seq_len %d: rows hold at most %d tokens",
                       static_cast<long long>(eval_.context), model_cfg_.seq_len, model_cfg_.seq_len);
      ctx.batch_size = batch_size_;
      ctx.limit = eval_.limit;
      ctx.skip_bad = eval_.skip_bad;
      ctx.threads = threads_;
      tasks_ = prepare_tasks(ctx, model_cfg_);
    }
    std::vector<TaskResult> results;
    for (auto& task : tasks_) {
      CAIRN_LOG_INFO("step %lld: task %s ...", static_cast<long long>(target.step), task->name.c_str());
      results.push_back(task->evaluate(*model_));
    }
    double wall = unix_seconds();
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::vector<ResultRow> new_rows;
    const std::string eval_run = this_eval_run();
    for (const auto& r : results) {
      auto add = [&](const std::string& metric, double value, double stderr_value) {
        ResultRow row;
        row.step = target.step;
        row.tokens = meta.tokens;
        row.checkpoint = target.path;
        row.task = r.task;
        row.metric = metric;
        row.value = value;
        row.stderr_value = stderr_value;
        row.n = r.samples;
        row.wall_time = wall;
        row.checkpoint_id = target.id;
        row.task_config = task_config_.at(r.task);
        row.eval_run = eval_run;
        new_rows.push_back(std::move(row));
      };
      for (const auto& m : r.metrics) add(m.name, m.value, m.stderr_);
      double tps = r.seconds > 0 ? r.tokens_processed / r.seconds : 0, eps = r.seconds > 0 ? r.samples / r.seconds : 0;
      add("eval_tokens_per_s", tps, std::nan(""));
      add("eval_examples_per_s", eps, std::nan(""));
    }
    // Rank 0 writes; every rank agrees on the outcome, so a failed write (a full disk, a stopped evaluator holding
    // the lock) ends every rank at once, not only rank 0.
    bool written = true;
    std::string why;
    int why_code = kExitRuntime;
    if (mpi::rank() == 0) try {
        // Replace rows of the same (step, task) (reevaluated, or scored from a checkpoint that step no longer holds),
        // keep the rest, then rewrite atomically. The rest is what is on disk now, read under <eval>/.results.lock:
        // another cairn-eval on this run (a --watch following training, one started by hand) may have added rows
        // since this one started, and rewriting from this process's own copy would drop them.
        ensure_dir(out_dir_);
        DirLock update;
        update.acquire(join_path(out_dir_, ".results.lock"), out_dir_, "cannot update the results in",
                       "stop it (or let it finish), then evaluate this checkpoint again", 120);
        remove_stale_record_temps(target.step);
        // Read back only when another process changed it since this one read or wrote it (a --watch following a
        // long run re-parsed its whole record for every checkpoint).
        const std::string jsonl = join_path(out_dir_, "results.jsonl");
        if (file_stamp(jsonl) != record_stamp_ || record_stamp_.size < 0) rows_ = read_results(jsonl, &record_cut_);
        // A --limit run (a quick look) never replaces a fuller score of this checkpoint: its numbers are printed
        // and in --json, the record keeps the rows over more examples (--reevaluate records the new ones instead).
        std::vector<TaskResult> recorded;
        std::vector<ResultRow> recorded_rows;
        for (const auto& r : results) {
          // Only a score of the same task definition is fuller: one of a task file edited since is stale, and
          // this run's rows replace it.
          const auto fuller = std::find_if(rows_.begin(), rows_.end(), [&](const ResultRow& old) {
            return old.step == target.step && old.task == r.task && scored(old, target) && old.n > r.samples &&
                   same_definition(old, r.task);
          });
          // Limited by --limit / [eval] limit, or by the task's own [eval.task.X] limit.
          const bool limited = eval_.limit > 0 || r.samples_original > r.samples;
          if (limited && !eval_.reevaluate && fuller != rows_.end()) {
            CAIRN_LOG_WARN("step %lld, task %s: results.jsonl keeps its score over %lld examples; this one over %lld "
                           "(a limit) is printed, not recorded (--reevaluate records it in its place)",
                           static_cast<long long>(target.step), r.task.c_str(), static_cast<long long>(fuller->n),
                           static_cast<long long>(r.samples));
            continue;
          }
          recorded.push_back(r);
          for (const auto& row : new_rows)
            if (row.task == r.task) recorded_rows.push_back(row);
        }
        // Each row says how many rows its write holds: a record cut at a line's end inside them is told apart.
        for (auto& row : recorded_rows) row.rows_in_write = static_cast<int64_t>(recorded_rows.size());
        std::set<std::string> writers;  // of the rows on disk and of the rows replacing them
        for (const auto& r : rows_) writers.insert(r.eval_run);
        for (const auto& r : recorded_rows) writers.insert(r.eval_run);
        std::set<std::string> replaced;
        for (const auto& r : recorded) replaced.insert(r.task);
        const bool replaces = std::erase_if(rows_, [&](const ResultRow& r) {
                                return r.step == target.step && replaced.count(r.task) > 0;
                              }) > 0;
        rows_.insert(rows_.end(), recorded_rows.begin(), recorded_rows.end());
        // results.jsonl last: it is the record a rerun trusts ("already evaluated"), so a kill before it leaves
        // this step to be scored again, never results.h5 or the harness files without it.
        if (!recorded.empty()) {
          write_results_h5(join_path(out_dir_, "results.h5"), rows_);
          write_harness_files(target, meta.tokens, recorded, start_unix, wall);
          // Before results.jsonl the writers of the old rows and the new (a kill between leaves every row its line),
          // after it those of the rows it now holds.
          update_provenance_jsonl(join_path(out_dir_, "provenance.jsonl"), writers);
          // Rows of a checkpoint not in the record yet are appended; replacing rows, or dropping the rows of a cut
          // write, rewrites the file.
          if (replaces || record_cut_ || !append_results_jsonl(jsonl, recorded_rows)) write_results_jsonl(jsonl, rows_);
          record_cut_ = false;
          record_stamp_ = file_stamp(jsonl);
          writers.clear();
          for (const auto& r : rows_) writers.insert(r.eval_run);
          update_provenance_jsonl(join_path(out_dir_, "provenance.jsonl"), writers);
        }
        std::fputs(summary_table(target.step, meta.tokens, target.path, results).c_str(), stdout);
        std::fflush(stdout);
        CAIRN_LOG_INFO("step %lld evaluated in %.2f s", static_cast<long long>(target.step), secs);
      } catch (const Error& e) {
        written = false;
        why = e.what();
        why_code = e.code();
      }
    mpi::agree_or_throw(written, why, why_code);
    summary.rows.insert(summary.rows.end(), new_rows.begin(), new_rows.end());
    ++summary.checkpoints_evaluated;
    evaluated_.insert(key(target));
    return true;
  }

 private:
  // Content, not path: a checkpoint named twice (a root and its step directory) is evaluated once.
  static std::string key(const Target& t) {
    return std::to_string(t.step) + "/" + (t.id.empty() ? "path:" + t.path : t.id);
  }

  // A row scored this checkpoint: the same checkpoint_id; for rows written before ids were recorded, one written
  // after the checkpoint was sealed (a step sealed again since, by a rollback, is newer than its rows).
  static bool scored(const ResultRow& r, const Target& t) {
    if (!r.checkpoint_id.empty()) return r.checkpoint_id == t.id;
    return t.sealed_at <= r.wall_time;
  }

  // A damaged checkpoint: reported once, remembered (a --watch poll does not report it again), failed at the end.
  void fail(const Target& t, const std::string& why, EvalSummary& summary) {
    if (mpi::rank() == 0)
      CAIRN_LOG_ERROR("%s; not evaluated (damaged checkpoint data: the other checkpoints are scored, the exit code "
                      "will be 1)",
                      why.c_str());
    summary.failed.push_back(why);
    evaluated_.insert(key(t));
  }

  // Under <eval>/.results.lock no other cairn-eval is writing: the temps killed ones left of the files written under it
  // go (full-size results.h5 copies; lm-evaluation-harness's files and their links, which stayed for good). Each write
  // looks where it writes, the first one of this process in every checkpoint's harness directory too.
  void remove_stale_record_temps(int64_t step) {
    remove_stale_temps(out_dir_, [](const std::string& n) {
      return n == "results.jsonl" || n == "results.h5" || n == "provenance.jsonl";
    });
    auto any = [](const std::string&) { return true; };  // only cairn-eval writes in these directories
    const std::string lm_eval = join_path(out_dir_, "lm_eval");
    remove_stale_temps(lm_eval, any);
    remove_stale_temps(join_path(out_dir_, "samples"), any);
    remove_stale_temps(join_path(lm_eval, harness_dir_name(step)), any);
    if (swept_harness_dirs_) return;
    swept_harness_dirs_ = true;
    std::error_code ec;
    for (fs::directory_iterator it(lm_eval, ec), end; !ec && it != end; it.increment(ec))
      if (it->is_directory(ec)) remove_stale_temps(it->path().string(), any);
    remove_old_link_temps(lm_eval);
    remove_old_link_temps(join_path(out_dir_, "samples"));
  }

  // Versions before atomic_link_or_write named a step link's temp "<link>.link.tmp" (step_N.json.link.tmp,
  // step_N_<task>.jsonl.link.tmp), without a pid, and a kill between its link and rename kept it for good. Under
  // <eval>/.results.lock no other cairn-eval of this version is linking; one of those versions caught in its moment
  // between link and rename writes a copy instead.
  static void remove_old_link_temps(const std::string& dir) {
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string n = it->path().filename().string();
      static const std::string suffix = ".link.tmp";
      std::error_code entry_ec;
      if (n.rfind("step_", 0) != 0 || n.size() <= suffix.size() ||
          n.compare(n.size() - suffix.size(), suffix.size(), suffix) != 0 || !it->is_regular_file(entry_ec))
        continue;
      fs::remove(it->path(), entry_ec);
    }
  }

  // The harness's "model" of a checkpoint, "<run>/step_%08d" (its directory under lm_eval/ is the sanitized name).
  std::string harness_model_name(int64_t step) const {
    std::string run_name = dir_basename(run_dir_);  // "run/" and "run" name one model
    if (run_name.empty()) run_name = "cairn";
    return strprintf("%s/step_%08lld", run_name.c_str(), static_cast<long long>(step));
  }
  std::string harness_dir_name(int64_t step) const { return sanitize_model_name(harness_model_name(step)); }

  // lm-evaluation-harness's files (EvaluationTracker with output_path <out>/eval/lm_eval):
  // lm_eval/<model_name_sanitized>/results_<date_id>.json and samples_<task>_<date_id>.jsonl, the model name
  // being "<run>/step_%08d". lm_eval/step_%08d.json and samples/step_%08d_<task>.jsonl are hard links to them
  // (copies where links fail). The results file keeps tasks evaluated for this step by an earlier run.
  void write_harness_files(const Target& target, int64_t tokens, const std::vector<TaskResult>& results,
                           double start_unix, double end_unix) {
    RunInfo info;
    info.step = target.step;
    info.tokens = tokens;
    info.checkpoint = target.path;
    info.checkpoint_id = target.id;
    info.model_name = harness_model_name(target.step);
    info.start_time = start_unix;
    info.end_time = end_unix;
    info.batch_size = batch_size_;
    info.ranks = mpi::size();
    info.num_params = static_cast<int64_t>(model_->num_params());
    ordered_json lm = lm_eval_json(info, results, eval_, model_cfg_);
    const std::string step_path =
        join_path(out_dir_, strprintf("lm_eval/step_%08lld.json", static_cast<long long>(target.step)));
    if (path_exists(step_path)) {
      try {
        ordered_json old = ordered_json::parse(read_file(step_path));
        // Tasks of an earlier run count only if they scored this very checkpoint (files before checkpoint ids: if
        // they ended after it was sealed), not the one a rollback replaced.
        const ordered_json& oc = old.contains("cairn") ? old["cairn"] : ordered_json::object();
        const bool same = oc.contains("checkpoint_id") ? oc["checkpoint_id"] == target.id
                                                       : old.value("end_time", 0.0) >= target.sealed_at;
        if (!same) old = ordered_json::object();
        for (const char* key : {"results", "configs", "versions", "n-shot", "higher_is_better", "n-samples",
                                "group_subtasks", "task_hashes"})
          if (old.contains(key) && old[key].is_object())
            for (auto it = old[key].begin(); it != old[key].end(); ++it)
              if (!lm[key].contains(it.key())) lm[key][it.key()] = it.value();
      } catch (const std::exception&) {
      }
      for (const char* key : {"configs", "versions", "n-shot", "higher_is_better"}) {  // sorted by task, as the harness
        std::map<std::string, ordered_json> by_task;
        for (auto it = lm[key].begin(); it != lm[key].end(); ++it) by_task[it.key()] = it.value();
        ordered_json sorted = ordered_json::object();
        for (auto& [k, v] : by_task) sorted[k] = std::move(v);
        lm[key] = std::move(sorted);
      }
    }
    const std::string dir = join_path(join_path(out_dir_, "lm_eval"), harness_dir_name(target.step));
    ensure_dir(dir);
    const std::string date_id = harness_date_id(unix_seconds());
    const std::string results_path = join_path(dir, "results_" + date_id + ".json");
    const std::string text = lm.dump(2, ' ', false, ordered_json::error_handler_t::replace) + "\n";
    atomic_write(results_path, text);
    atomic_link_or_write(results_path, step_path, text);
    for (const auto& r : results) {
      if (!r.has_samples) continue;
      std::string lines;
      for (const auto& line : r.sample_lines)
        lines += line.dump(-1, ' ', false, ordered_json::error_handler_t::replace) + "\n";
      // A task name may hold any character; in a file name it loses the ones a path gives a meaning to ('/', '\\',
      // ...), so "a/../../x" stays one file under <eval>/ (it wrote outside it).
      const std::string task_file = sanitize_model_name(r.task);
      const std::string path = join_path(dir, "samples_" + task_file + "_" + date_id + ".jsonl");
      atomic_write(path, lines);
      ensure_dir(join_path(out_dir_, "samples"));
      atomic_link_or_write(path,
                           join_path(out_dir_, strprintf("samples/step_%08lld_%s.jsonl",
                                                         static_cast<long long>(target.step), task_file.c_str())),
                           lines);
    }
  }

  void load_weights(const std::string& path) {
    const auto& tensors = model_->tensors();
    if (backend_->device_memory) {
      std::vector<float> host(model_->num_params());
      checkpoint::read_model(path, tensors, host.data());
      backend_->copy_to_device(model_->params(), host.data(), host.size() * sizeof(float));
    } else {
      checkpoint::read_model(path, tensors, model_->params());
    }
  }

  const Config& cfg_;  // origins of [data] keys and the [eval.task] tables
  const EvalSection eval_;
  const DataSection data_;
  std::string run_dir_, out_dir_;
  std::map<std::string, TaskDefinition> task_definition_;  // task -> task_definition()
  std::map<std::string, std::string> task_config_;         // task -> task_fingerprint() at this run's limit
  std::string tasks_tokenizer_id_;  // the training data's tokenizer of the checkpoint tasks_ were prepared for
  const kernels::Backend* backend_ = nullptr;
  gpu::DeviceInfo device_;  // set on the cuda backend
  int batch_size_ = 8;
  int threads_ = 1;  // CPU threads per rank ([eval] threads, or the node's cores over its ranks)
  std::vector<std::string> task_names_;
  std::vector<ResultRow> rows_;             // rank 0: the record
  bool swept_harness_dirs_ = false;         // rank 0: remove_stale_record_temps looked in every lm_eval/<model>/
  bool record_cut_ = false;                 // rank 0: a cut write's rows read_results dropped, still in the file
  FileStamp record_stamp_;                  // rank 0: results.jsonl as rows_ last read or wrote it
  std::set<std::string> evaluated_;         // key(): checkpoints evaluated, found in the record, or failed in this run
  mutable bool warned_unrecorded_ = false;  // rows without task_config (an older cairn-eval) seen and said
  gpt::GptConfig model_cfg_;
  std::unique_ptr<gpt::Model> model_;
  std::vector<std::unique_ptr<Task>> tasks_;
};

// --watch: the checkpoint root and the FINISHED marker of the run being followed.
void watch(const EvalSection& es, Evaluator& ev, EvalSummary& summary) {
  const std::string& dir = es.watch;
  // DIR is the training run's train/ directory or its checkpoint root train/ckpt.
  fs::path norm = fs::path(dir).lexically_normal();
  if (norm.filename().empty()) norm = norm.parent_path();
  bool is_root = norm.filename() == "ckpt";
  std::string root = is_root ? norm.string() : join_path(norm.string(), "ckpt");
  std::string train_dir = is_root ? norm.parent_path().string() : norm.string();
  std::string finished = join_path(train_dir, "FINISHED");
  const double idle_timeout = es.idle_timeout;
  const double poll = es.poll_interval;
  const bool verify = es.verify_checkpoints;
  if (mpi::rank() == 0 && !path_exists(dir))
    CAIRN_LOG_WARN("--watch \"%s\" does not exist yet; waiting for the training run to create it", dir.c_str());
  CAIRN_LOG_INFO("watching \"%s\" (stop at \"%s\" or after %.0f s idle)", root.c_str(), finished.c_str(), idle_timeout);
  auto last_activity = std::chrono::steady_clock::now();
  for (;;) {
    // Read the marker before scanning: a checkpoint sealed before FINISHED is then always seen.
    int finished_seen = 0;
    std::vector<Target> found;
    if (mpi::rank() == 0) {
      finished_seen = path_exists(finished) ? 1 : 0;
      if (fs::is_directory(root)) {
        for (const auto& e : checkpoint::list(root, false)) {
          if (!e.sealed) continue;  // being written (sealed since list() looked: the next poll takes it)
          Target t = make_target(e.step, e.dir, e.problem);
          // Checksums are read once per checkpoint, not on every poll.
          if (verify && t.problem.empty() && !ev.settled(t)) t.problem = checkpoint::check_dir(e.dir, true);
          found.push_back(std::move(t));
        }
      }
    }
    finished_seen = mpi::broadcast_value(finished_seen);
    int skipped = 0;
    std::vector<Target> todo = ev.pending(found, &skipped);
    summary.checkpoints_skipped += skipped;
    if (!todo.empty()) {
      for (const auto& t : todo) ev.evaluate(t, summary);
      last_activity = std::chrono::steady_clock::now();
      continue;
    }
    if (finished_seen) {
      CAIRN_LOG_INFO("training run finished (%s); every checkpoint evaluated", finished.c_str());
      return;
    }
    // Rank 0's clock decides for every rank: each rank's own would stop them at different polls, one rank leaving
    // while the others wait for it in the next poll's broadcast.
    const double idle = std::chrono::duration<double>(std::chrono::steady_clock::now() - last_activity).count();
    const int idle_stop = mpi::broadcast_value(mpi::rank() == 0 && idle_timeout > 0 && idle >= idle_timeout ? 1 : 0);
    if (idle_stop) {
      if (mpi::rank() == 0) CAIRN_LOG_WARN("no new checkpoint in %.3g s (idle_timeout); stopping", idle);
      return;
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(poll));
  }
}

}  // namespace

void check_task_config(const Config& cfg) {
  const EvalSection es = read_section<EvalSection>(cfg);
  const std::vector<std::string>& names = es.tasks;
  if (names.empty()) throw UsageError("[eval] tasks is empty: nothing to evaluate");
  // Here, not only where the tasks are prepared: a checkpoint already evaluated is skipped before that, and the
  // same config must get the same verdict either way.
  for (size_t i = 0; i < names.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (names[i] == names[j]) throw UsageError("[eval] tasks lists \"" + names[i] + "\" twice");
  // Unknown task names are config errors: report them before waiting for or loading checkpoints.
  const json tables = cfg.section("eval.task");
  for (const auto& t : names)
    if (t != "val" && t != "train_val" && !(tables.is_object() && tables.contains(t)))
      throw UsageError("[eval] tasks: unknown task \"" + t + "\" (define [eval.task." + t +
                       "]; built in: val, train_val)");
  // Each table's values, named with where the table was set (file:line:col, --set): its keys were checked at load,
  // its values (kind, mode, ...) are checked here.
  for (const auto& t : names) {
    if (!tables.is_object() || !tables.contains(t)) continue;
    EvalSection one = es;
    one.tasks = {t};
    try {
      check_task_tables(tables, one);
    } catch (const UsageError& e) {
      throw with_origin(cfg, dotted_name("eval.task", t), e);
    }
  }
}

EvalSummary run_eval(const Config& cfg, const EvalOptions& opts) {
  EvalSummary summary;
  const EvalSection es = read_section<EvalSection>(cfg);
  Evaluator ev(cfg, es);
  if (!es.watch.empty()) {
    if (!opts.checkpoints.empty()) throw UsageError("give either checkpoints or --watch DIR, not both");
    watch(es, ev, summary);
  } else {
    std::vector<std::string> inputs = opts.checkpoints;
    if (inputs.empty()) {
      const std::string& c = es.checkpoint;
      inputs.push_back(c.empty() ? join_path(join_path(read_section<RunSection>(cfg).dir, "train"), "ckpt") : c);
    }
    std::vector<Target> all;
    bool ok = true;
    std::string msg;
    int code = kExitUsage;
    if (mpi::rank() == 0) {
      try {
        const json task_tables = cfg.section("eval.task");
        std::string tasks_list;  // for the hint below: the tasks given, comma-separated
        for (const auto& t : es.tasks) tasks_list += t + ",";
        for (const auto& in : inputs) {
          // `--tasks val train_val` takes one value (a comma list): the second word arrives as a checkpoint
          const bool task_name =
              in == "val" || in == "train_val" || (task_tables.is_object() && task_tables.contains(in));
          if (task_name && !path_exists(in))
            throw UsageError(file_message("cannot open checkpoint", in, "No such file or directory") +
                             " (a task name? --tasks takes one comma-separated list: --tasks " + tasks_list + in + ")");
          auto t = resolve_input(in, es.verify_checkpoints);
          all.insert(all.end(), t.begin(), t.end());
        }
        // results.jsonl holds one row per step and task (a later checkpoint of a step replaces the rows of an
        // earlier one: a rollback): two checkpoints of one step in one call would lose the first's rows unsaid.
        std::map<int64_t, const Target*> by_step;
        for (const Target& t : all) {
          if (t.step < 0 || !t.problem.empty()) continue;
          auto [it, fresh] = by_step.emplace(t.step, &t);
          if (!fresh && it->second->id != t.id)
            throw UsageError(strprintf("checkpoints \"%s\" and \"%s\" are both step %lld: results.jsonl keeps one "
                                       "row per step and task, so one would replace the other; evaluate them into "
                                       "separate --out directories",
                                       it->second->path.c_str(), t.path.c_str(), static_cast<long long>(t.step)));
        }
      } catch (const Error& e) {
        ok = false;
        msg = e.what();
        code = e.code();
      }
    }
    mpi::agree_or_throw(ok, msg, code);
    int skipped = 0;
    std::vector<Target> todo = ev.pending(all, &skipped);
    summary.checkpoints_skipped += skipped;
    if (skipped && mpi::rank() == 0)
      CAIRN_LOG_INFO(
          "%d checkpoint(s) already evaluated (in results.jsonl); skipped (eval.reevaluate = true redoes them)",
          skipped);
    for (const auto& t : todo) ev.evaluate(t, summary);
  }
  return summary;
}

}  // namespace cairn::eval
