// [eval] and [eval.task.<name>]: cairn-eval's checkpoints, tasks, batching and --watch keys.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "cairn/config_section.h"

namespace cairn {

struct EvalSection {
  static constexpr const char* kSection = "eval";
  std::string checkpoint;
  std::vector<std::string> tasks{"val"};
  int64_t batch_size = 8;
  int64_t context = 0;
  int64_t limit = 0;
  std::string watch;
  double idle_timeout = 3600.0;
  double poll_interval = 2.0;
  bool skip_bad = false;
  bool verify_checkpoints = true;
  bool reevaluate = false;
  bool log_samples = false;
  std::string backend = "cpu";
  int threads = 0;
  template <class K>
  static void keys(K& k) {
    using S = EvalSection;
    k(&S::checkpoint, "checkpoint",
      "a checkpoint directory (step_*), a model.h5, or a checkpoint root whose complete checkpoints are all "
      "evaluated (\"\" = <run.dir>/train/ckpt)");
    k(&S::tasks, "tasks", Flag{"--tasks"},
      "tasks to run, by name: built in \"val\" (perplexity over the whole validation split in cairn-train's "
      "windows), \"train_val\" (exactly the windows of cairn-train's validation pass, equal to its val_loss), or a "
      "table [eval.task.<name>]");
    k(&S::batch_size, "batch_size", Range{1, 1e6}, Flag{"--batch-size"},
      "sequences per forward pass (requests of similar length packed)");
    k(&S::context, "context", Range{0, 1e7}, Flag{"--context"},
      "maximum context in tokens for rolling windows and multiple choice (0 = the model's seq_len)");
    k(&S::limit, "limit", Range{0, 1e12}, Flag{"--limit"}, "evaluate at most this many examples per task (0 = all)");
    k(&S::watch, "watch", Flag{"--watch"},
      "follow a training run: a train dir or checkpoint root; evaluate each new complete checkpoint");
    k(&S::idle_timeout, "idle_timeout", Range{0, 1e9}, Flag{"--idle-timeout"},
      "--watch: stop after this many seconds without a new checkpoint (0 = never)");
    k(&S::poll_interval, "poll_interval", Range{0.01, 3600}, Flag{"--poll-interval"},
      "--watch: seconds between directory scans");
    k(&S::skip_bad, "skip_bad", Flag{"--skip-bad"},
      "skip malformed JSONL lines (counted in the summary) instead of failing with the line number");
    k(&S::verify_checkpoints, "verify_checkpoints", "check each checkpoint's DONE checksums before loading it");
    k(&S::reevaluate, "reevaluate", Flag{"--reevaluate"},
      "evaluate checkpoints again even if results already hold them");
    k(&S::log_samples, "log_samples", Flag{"--log-samples"},
      "write one line per example (multiple-choice log-likelihoods, documents-mode perplexity) in "
      "lm-evaluation-harness's sample schema to <out>/eval/lm_eval/<run>__step_%08d/samples_<task>_<date>.jsonl, "
      "linked from <out>/eval/samples/step_%08d_<task>.jsonl");
    k(&S::backend, "backend", Choices{"cpu", "cpu-ref", "cuda"}, Flag{"--backend"}, "kernel backend");
    k(&S::threads, "threads", Range{0, 4096}, Flag{"--threads"},
      "CPU threads per rank (0 = the rank's CPUs shared among the ranks bound to them: the node's cores over its ranks "
      "when unbound)");
  }
};

// [eval.task]: the task tables, name = { kind = ..., ... }, kept as JSON objects (each kind reads its own keys).
inline constexpr const char* kEvalTaskSection = "eval.task";
inline constexpr const char* kEvalTaskDoc =
    "task tables: name = { kind = \"perplexity\" | \"multiple_choice\", ... }; perplexity: data (dataset dir, "
    "default [data] path), split = \"val\"|\"all\"|\"shards\", shards = [i, ...], mode = \"windows\" (training "
    "windows) | \"documents\" (rolling windows per document), rolling_context, max_windows, like_train, limit; "
    "multiple_choice: path (JSONL {context, choices, label}), data, delimiter (default \" \"), version, limit";

// The keys a task table of each kind may hold: the config refuses any other key in [eval.task.<name>]
// (with a suggestion), and cairn-eval a key of the other kind.
inline const std::vector<std::string>& perplexity_task_keys() {
  static const std::vector<std::string> keys{"kind",  "data",        "split",      "shards",         "mode",
                                             "limit", "max_windows", "like_train", "rolling_context"};
  return keys;
}
inline const std::vector<std::string>& multiple_choice_task_keys() {
  static const std::vector<std::string> keys{"kind", "path", "data", "delimiter", "version", "limit"};
  return keys;
}
// Either kind's keys: what any [eval.task.<name>] table may hold.
inline std::vector<std::string> eval_task_keys() {
  std::vector<std::string> keys = perplexity_task_keys();
  for (const auto& k : multiple_choice_task_keys())
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
  return keys;
}

}  // namespace cairn
