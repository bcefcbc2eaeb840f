// cairn-train's command line (train_main): flags -> [train]/[data] settings, MPI, the run, the --json summary.
#include <CLI/CLI.hpp>

#include "cairn/cli.h"
#include "cairn/config_section.h"
#include "cairn/json_text.h"
#include "cairn/mpi.h"
#include "cairn/provenance.h"
#include "trainer.h"

int cairn::train::train_main(int argc, char** argv, const TrainHooks& hooks) {
  // First of all: a SIGTERM/SIGUSR1 (Slurm's preemption warning) during start-up must not kill us (exit 143/138,
  // the job then neither checkpoints nor requeues); the trainer acts on it before the first step.
  install_stop_handlers();
  return cairn::run_tool("cairn-train", argc, argv, [&]() -> int {
    CLI::App app{"cairn-train: GPT training on cairn shards in the [parallel] layout cairn-plan proposes (data,\n"
                 "tensor, sequence, context and pipeline parallelism, ZeRO 0-3; CPU kernels or CUDA).\n"
                 "Exit codes: 0 done (FINISHED written: a usable model), 1 runtime failure (also a run that\n"
                 "cannot make progress, or another cairn-train running in the same run directory), 2 config/input "
                 "error, 3 a corrupt dataset shard (named), 75 stopped by SIGTERM/SIGUSR1/SIGINT after writing a\n"
                 "checkpoint, or before the first step with nothing to save (requeue and rerun to continue)."};
    cairn::CommonOptions opts;
    cairn::add_common_options(app, opts);
    // --steps, --resume, --backend, --threads, --trace-steps: declared on their [train] keys (cairn/sections/train.h).
    cairn::ToolSettings settings;
    cairn::add_section_flags(app, "train", settings);
    std::string data;
    app.add_option("--data", data, "dataset directory (sets [data] path)")->type_name("DIR");
    cairn::parse_cli(app, argc, argv);
    if (!opts.print_config && hooks.at) hooks.at("startup", 0);
    // MPI starts after the command line: --help and --version return without starting Open MPI's helpers.
    cairn::mpi::Session session(&argc, &argv);

    if (!data.empty()) settings.emplace_back("data.path", data, "--data");
    cairn::Config cfg = cairn::load_tool_config(opts, settings);
    if (cairn::maybe_print_config(opts, cfg)) return 0;
    TrainResult r = run_train(cfg, hooks);
    if (hooks.at) hooks.at("exit", r.final_step);
    if (cairn::mpi::rank() == 0 && !opts.json_path.empty()) {
      int skipped = 0;
      for (int s : r.skipped) skipped += s;
      nlohmann::json summary = {{"provenance", cairn::provenance().to_json()},
                                {"exit_code", r.exit_code},
                                {"final_step", r.final_step},
                                {"steps_run", r.steps.size()},
                                {"skipped", skipped},
                                {"restores", r.restores},
                                {"final_loss",
                                 r.losses.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.losses.back())},
                                {"final_val_loss",
                                 r.val_losses.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.val_losses.back())},
                                {"run_dir", cairn::run_dir(cfg)}};
      cairn::write_json_output(opts.json_path, cairn::json_text(summary, 2));
    }
    return r.exit_code;
  });
}
