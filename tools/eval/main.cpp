// cairn-eval: evaluates checkpoints (one, all under a root, or following a training run with --watch).
#include <CLI/CLI.hpp>

#include "cairn/cli.h"
#include "cairn/config_section.h"
#include "cairn/error.h"
#include "cairn/json_text.h"
#include "cairn/mpi.h"
#include "cairn/provenance.h"
#include "eval.h"

int main(int argc, char** argv) {
  return cairn::run_tool("cairn-eval", argc, argv, [&]() -> int {
    CLI::App app{"cairn-eval: perplexity and multiple-choice evaluation of cairn checkpoints, data parallel over MPI.\n"
                 "Writes <out>/eval/results.jsonl, results.h5 and lm-evaluation-harness's files\n"
                 "lm_eval/<run>__step_%08d/results_<date>.json (linked as lm_eval/step_%08d.json).\n"
                 "Exit codes: 0 done, 1 runtime failure (also damaged checkpoint data: a sealed checkpoint failing\n"
                 "its checksums or not loading; the other checkpoints are still scored), 2 config/input error,\n"
                 "3 a corrupt dataset shard (named)."};
    cairn::CommonOptions opts;
    cairn::add_common_options(app, opts);
    std::vector<std::string> checkpoints;
    std::string data;
    app.add_option("checkpoints", checkpoints,
                   "checkpoint directories (step_*), model.h5 files, or checkpoint roots ([eval] checkpoint; "
                   "default <out>/train/ckpt)");
    // --watch, --tasks, --batch-size, ... set their [eval] keys (declared in cairn/sections/eval.h).
    cairn::ToolSettings settings;
    cairn::add_section_flags(app, "eval", settings);
    // One value per --tasks (a comma list): `--tasks val ckpt` keeps ckpt a checkpoint.
    app.get_option("--tasks")->allow_extra_args(false);
    app.add_option("--data", data, "dataset directory for perplexity and the tokenizer ([data] path)")
        ->type_name("DIR");
    cairn::parse_cli(app, argc, argv);
    // MPI starts after the command line: --help and --version return without starting Open MPI's helpers.
    cairn::mpi::Session session(&argc, &argv);

    if (!data.empty()) settings.emplace_back("data.path", data, "--data");
    cairn::Config cfg = cairn::load_tool_config(opts, settings);
    cairn::eval::check_task_config(cfg);  // a config --print-config shows is one the evaluation accepts
    if (cairn::maybe_print_config(opts, cfg, checkpoints)) return 0;
    cairn::eval::EvalOptions eo;
    eo.checkpoints = checkpoints;
    cairn::eval::EvalSummary s = cairn::eval::run_eval(cfg, eo);
    if (!opts.json_path.empty() && cairn::mpi::rank() == 0) {
      nlohmann::json rows = nlohmann::json::array();
      for (const auto& r : s.rows) rows.push_back(r.to_json());
      nlohmann::json out = {{"provenance", cairn::provenance().to_json()},
                            {"checkpoints_evaluated", s.checkpoints_evaluated},
                            {"checkpoints_skipped", s.checkpoints_skipped},
                            {"checkpoints_failed", s.failed},
                            {"results", rows}};
      cairn::write_json_output(opts.json_path, cairn::json_text(out, 2) + "\n");
    }
    // Damaged checkpoints were reported as they came; the run fails once everything else is scored and recorded.
    if (!s.failed.empty()) {
      // Every rank has the same list, but the error ends the job (MPI_Abort) from whichever rank gets there first:
      // rank 0 must have written the record and --json by then.
      cairn::mpi::barrier();
      std::string why;
      for (const auto& f : s.failed) why += (why.empty() ? "" : "; ") + f;
      throw cairn::RuntimeError(std::to_string(s.failed.size()) + " checkpoint(s) not evaluated: " + why);
    }
    return 0;
  });
}
