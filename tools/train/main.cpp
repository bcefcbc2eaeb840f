// cairn-train: trains a GPT model on cairn shards (CPU or CUDA; data, tensor, sequence and pipeline parallel, ZeRO
// 0-3), with exact resume.
#include <CLI/CLI.hpp>

#include "cairn/cli.h"
#include "cairn/mpi.h"
#include "cairn/provenance.h"
#include "trainer.h"

int main(int argc, char** argv) {
  // First of all: a SIGTERM/SIGUSR1 (Slurm's preemption warning) during start-up must not kill us (exit 143/138,
  // the job then neither checkpoints nor requeues); the trainer acts on it before the first step.
  cairn::train::install_stop_handlers();
  return cairn::run_tool("cairn-train", argc, argv, [&]() -> int {
    CLI::App app{"cairn-train: GPT training on cairn shards in the [parallel] layout cairn-plan proposes (data,\n"
                 "tensor, sequence and pipeline parallelism, ZeRO 0-3; CPU kernels or CUDA).\n"
                 "Exit codes: 0 done (FINISHED written: a usable model), 1 runtime failure (also a run that\n"
                 "cannot make progress), 2 config/input error, 75 stopped by SIGTERM/SIGUSR1 after writing a\n"
                 "checkpoint, or before the first step with nothing to save (requeue and rerun to continue)."};
    cairn::CommonOptions opts;
    cairn::add_common_options(app, opts);
    std::string resume, trace_steps, data, backend;
    int64_t steps = 0, threads = -1;
    app.add_option("--resume", resume, "auto (default: newest complete checkpoint), none, or a checkpoint directory");
    app.add_option("--trace-steps", trace_steps, "write a Chrome trace of steps a..b-1 to <out>/train/trace.json")
        ->type_name("A:B");
    app.add_option("--data", data, "dataset directory (sets [data] path)")->type_name("DIR");
    app.add_option("--steps", steps, "optimizer steps (sets [train] steps)");
    app.add_option("--backend", backend, "kernel backend (sets [train] backend)");
    app.add_option("--threads", threads, "OpenMP threads per rank (sets [train] threads)");
    cairn::parse_cli(app, argc, argv);
    if (!opts.print_config) cairn::train::test_pause("startup");
    // MPI starts after the command line: --help and --version return without starting Open MPI's helpers.
    cairn::mpi::Session session(&argc, &argv);

    cairn::ToolSettings settings;
    if (!resume.empty()) settings.emplace_back("train.resume", resume);
    if (!trace_steps.empty()) settings.emplace_back("train.trace_steps", trace_steps);
    if (!data.empty()) settings.emplace_back("data.path", data);
    if (!backend.empty()) settings.emplace_back("train.backend", backend);
    if (steps > 0) settings.emplace_back("train.steps", steps);
    if (threads >= 0) settings.emplace_back("train.threads", threads);
    cairn::Config cfg = cairn::load_tool_config(opts, settings);
    if (cairn::maybe_print_config(opts, cfg)) return 0;
    cairn::train::TrainResult r = cairn::train::run_train(cfg);
    cairn::train::test_pause("exit");
    if (cairn::mpi::rank() == 0 && !opts.json_path.empty()) {
      int skipped = 0;
      for (int s : r.skipped) skipped += s;
      nlohmann::json summary = {
          {"provenance", cairn::provenance().to_json()}, {"exit_code", r.exit_code}, {"final_step", r.final_step},
          {"steps_run", r.steps.size()}, {"skipped", skipped}, {"restores", r.restores},
          {"final_loss", r.losses.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.losses.back())},
          {"final_val_loss", r.val_losses.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.val_losses.back())},
          {"run_dir", cairn::run_dir(cfg)}};
      cairn::write_json_output(opts.json_path, summary.dump(2));
    }
    return r.exit_code;
  });
}
