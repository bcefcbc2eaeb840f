// [eval] and [eval.task.<name>]: cairn-eval's checkpoints, tasks, batching and --watch keys.
#include "sections.h"

namespace cairn::schema {
void declare_eval(Schema& s) {
  s.add("eval", "checkpoint", KeyType::String, "",
        "a checkpoint directory (step_*), a model.h5, or a checkpoint root whose complete checkpoints are all "
        "evaluated (\"\" = <run.dir>/train/ckpt)");
  s.add("eval", "tasks", KeyType::StringList, json::array({"val"}),
        "tasks to run, by name: built in \"val\" (perplexity over the whole validation split in cairn-train's "
        "windows), \"train_val\" (exactly the windows of cairn-train's validation pass, equal to its val_loss), "
        "or a table [eval.task.<name>]");
  s.add_range("eval", "batch_size", KeyType::Int, 8, 1, 1e6, "sequences per forward pass (requests of similar length packed)");
  s.add_range("eval", "context", KeyType::Int, 0, 0, 1e7,
              "maximum context in tokens for rolling windows and multiple choice (0 = the model's seq_len)");
  s.add_range("eval", "limit", KeyType::Int, 0, 0, 1e12, "evaluate at most this many examples per task (0 = all)");
  s.add("eval", "watch", KeyType::String, "",
        "follow a training run: a train dir or checkpoint root; evaluate each new complete checkpoint");
  s.add_range("eval", "idle_timeout", KeyType::Float, 3600.0, 0, 1e9,
              "--watch: stop after this many seconds without a new checkpoint (0 = never)");
  s.add_range("eval", "poll_interval", KeyType::Float, 2.0, 0.01, 3600, "--watch: seconds between directory scans");
  s.add("eval", "skip_bad", KeyType::Bool, false,
        "skip malformed JSONL lines (counted in the summary) instead of failing with the line number");
  s.add("eval", "verify_checkpoints", KeyType::Bool, true, "check each checkpoint's DONE checksums before loading it");
  s.add("eval", "reevaluate", KeyType::Bool, false, "evaluate checkpoints again even if results already hold them");
  s.add("eval", "log_samples", KeyType::Bool, false,
        "write per-example log-likelihoods of multiple-choice tasks to <out>/eval/samples/step_%08d_<task>.jsonl");
  s.add_choice("eval", "backend", KeyType::String, "cpu", {"cpu", "cpu-ref", "cuda"}, "kernel backend");
  s.add_range("eval", "threads", KeyType::Int, 0, 0, 4096, "CPU threads per rank (0 = the node's cores shared among its ranks)");
  s.add_open_section("eval.task", KeyType::Table,
                     "task tables: name = { kind = \"perplexity\" | \"multiple_choice\", ... }; perplexity: data "
                     "(dataset dir, default [data] path), split = \"val\"|\"all\"|\"shards\", shards = [i, ...], "
                     "mode = \"windows\" (training windows) | \"documents\" (rolling windows per document), "
                     "rolling_context, max_windows, like_train; multiple_choice: path (JSONL {context, choices, label}), "
                     "delimiter (default \" \"), version");
}
}  // namespace cairn::schema
