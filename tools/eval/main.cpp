// cairn-eval: evaluates checkpoints (one, all under a root, or following a training run with --watch).
#include <CLI/CLI.hpp>

#include "cairn/cli.h"
#include "cairn/mpi.h"
#include "cairn/provenance.h"
#include "eval.h"

int main(int argc, char** argv) {
  return cairn::run_tool("cairn-eval", argc, argv, [&]() -> int {
    CLI::App app{"cairn-eval: perplexity and multiple-choice evaluation of cairn checkpoints, data parallel over MPI.\n"
                 "Writes <out>/eval/results.jsonl, results.h5 and lm-evaluation-harness's files\n"
                 "lm_eval/<run>__step_%08d/results_<date>.json (linked as lm_eval/step_%08d.json).\n"
                 "Exit codes: 0 done, 1 runtime failure, 2 config/input error."};
    cairn::CommonOptions opts;
    cairn::add_common_options(app, opts);
    std::vector<std::string> checkpoints, tasks;
    std::string watch, data, backend;
    double idle_timeout = -1, poll = -1;
    int64_t batch = 0, limit = -1, threads = -1, context = -1;
    bool skip_bad = false, log_samples = false, reevaluate = false;
    app.add_option("checkpoints", checkpoints,
                   "checkpoint directories (step_*), model.h5 files, or checkpoint roots ([eval] checkpoint; "
                   "default <out>/train/ckpt)");
    app.add_option("--watch", watch, "follow a training run: its train/ dir or checkpoint root ([eval] watch)")
        ->type_name("DIR");
    app.add_option("--idle-timeout", idle_timeout, "--watch: stop after S seconds without a new checkpoint (0 = never)")
        ->type_name("S");
    app.add_option("--poll-interval", poll, "--watch: seconds between scans")->type_name("S");
    app.add_option("--tasks", tasks, "tasks to run, comma-separated ([eval] tasks; built in: val, train_val)")
        ->delimiter(',')
        ->allow_extra_args(false);
    app.add_option("--data", data, "dataset directory for perplexity and the tokenizer ([data] path)")->type_name("DIR");
    app.add_option("--batch-size", batch, "sequences per forward pass ([eval] batch_size)");
    app.add_option("--context", context, "maximum context tokens (0 = the model's seq_len)");
    app.add_option("--limit", limit, "at most N examples per task (0 = all)");
    app.add_option("--backend", backend, "kernel backend ([eval] backend)");
    app.add_option("--threads", threads, "OpenMP threads per rank ([eval] threads)");
    app.add_flag("--skip-bad", skip_bad, "skip malformed JSONL lines instead of failing");
    app.add_flag("--log-samples", log_samples,
               "write per-example samples (harness schema) of multiple-choice and documents-mode perplexity tasks");
    app.add_flag("--reevaluate", reevaluate, "evaluate checkpoints already in results.jsonl again");
    cairn::parse_cli(app, argc, argv);
    // MPI starts after the command line: --help and --version return without starting Open MPI's helpers.
    cairn::mpi::Session session(&argc, &argv);

    cairn::ToolSettings settings;
    if (!watch.empty()) settings.emplace_back("eval.watch", watch);
    if (idle_timeout >= 0) settings.emplace_back("eval.idle_timeout", idle_timeout);
    if (poll > 0) settings.emplace_back("eval.poll_interval", poll);
    if (!tasks.empty()) settings.emplace_back("eval.tasks", tasks);
    if (!data.empty()) settings.emplace_back("data.path", data);
    if (batch > 0) settings.emplace_back("eval.batch_size", batch);
    if (context >= 0) settings.emplace_back("eval.context", context);
    if (limit >= 0) settings.emplace_back("eval.limit", limit);
    if (!backend.empty()) settings.emplace_back("eval.backend", backend);
    if (threads >= 0) settings.emplace_back("eval.threads", threads);
    if (skip_bad) settings.emplace_back("eval.skip_bad", true);
    if (log_samples) settings.emplace_back("eval.log_samples", true);
    if (reevaluate) settings.emplace_back("eval.reevaluate", true);
    cairn::Config cfg = cairn::load_tool_config(opts, settings);
    if (cairn::maybe_print_config(opts, cfg)) return 0;
    cairn::eval::EvalOptions eo;
    eo.checkpoints = checkpoints;
    cairn::eval::EvalSummary s = cairn::eval::run_eval(cfg, eo);
    if (!opts.json_path.empty() && cairn::mpi::rank() == 0) {
      nlohmann::json rows = nlohmann::json::array();
      for (const auto& r : s.rows)
        rows.push_back({{"step", r.step}, {"tokens", r.tokens}, {"checkpoint", r.checkpoint}, {"task", r.task},
                        {"metric", r.metric}, {"value", std::isfinite(r.value) ? nlohmann::json(r.value) : nlohmann::json()},
                        {"stderr", std::isfinite(r.stderr_) ? nlohmann::json(r.stderr_) : nlohmann::json()},
                        {"n", r.n}, {"wall_time", r.wall_time}});
      nlohmann::json out = {{"provenance", cairn::provenance().to_json()},
                            {"checkpoints_evaluated", s.checkpoints_evaluated},
                            {"checkpoints_skipped", s.checkpoints_skipped},
                            {"results", rows}};
      cairn::write_json_output(opts.json_path, out.dump(2) + "\n");
    }
    return 0;
  });
}
