// cairn-plan: finds the fastest parallel layout (DP/TP/PP/v/mb/ZeRO/recompute/SP) for a model on a cluster.
#include <CLI/CLI.hpp>
#include <iostream>

#include "cairn/cli.h"
#include "cairn/config_section.h"
#include "cairn/error.h"
#include "cairn/files.h"
#include "cairn/json_text.h"
#include "cairn/provenance.h"
#include "calibrate_runs.h"
#include "plan.h"

int main(int argc, char** argv) {
  return cairn::run_tool("cairn-plan", argc, argv, [&]() -> int {
    if (cairn::leave_work_to_rank0("cairn-plan")) return 0;
    CLI::App app{"cairn-plan: search parallel training plans with an analytical cost model (docs/cost-model.md).\n"
                 "Writes <out>/plan/plans.json, plans.h5 (every evaluated plan) and best.toml ([parallel]).\n"
                 "Prices Megatron-Core by default; another stack: -C configs/stacks/<stack>.toml after the model and\n"
                 "cluster (torchtitan, torchtitan-compile, llm-foundry, nemo, megatron-lm, deepspeed-zero3, ...).\n"
                 "Exit codes: 0 ok, 1 runtime failure, 2 config/input error, 3 nothing fits in memory."};
    cairn::CommonOptions opts;
    cairn::add_common_options(app, opts);
    std::string plan_text;
    bool explain = false;
    app.add_option("--plan", plan_text,
                   "constrain the search / the explained plan: dp=8,tp=4,pp=2,v=1,mb=1,zero=1,"
                   "recompute=full,sp=on (lists: tp=[4,8])")
        ->type_name("K=V,...");
    app.add_flag("--explain", explain, "evaluate the one plan given by --plan (or [parallel]) and print its breakdown");
    // --top sets [plan] top_k (declared in cairn/sections/plan.h): checked like the key (>= 1, exit 2).
    cairn::ToolSettings settings;
    cairn::add_section_flags(app, "plan", settings);
    app.require_subcommand(0, 1);
    CLI::App* cal =
        app.add_subcommand("calibrate", "measure GEMM efficiency (cuBLAS bf16 on a GPU, OpenBLAS "
                                        "on CPU) and memory bandwidth over the model's shapes; write a cluster file "
                                        "(--from-runs: refit it from cairn-train runs instead)");
    cal->fallthrough();  // --config/--set/--out after "calibrate" belong to the main app
    cairn::plan::CalibrateOptions copts;
    cal->add_option("--output", copts.output, "cluster file to write (default <out>/plan/cluster-calibrated.toml)")
        ->type_name("FILE");
    cal->add_option("--seconds", copts.seconds, "measuring time per GEMM shape")
        // An hour per shape is already a day of calibration; NaN passes a Range, so it is refused first.
        ->check(CLI::Validator(
            [](std::string& v) { return v.find_first_of("nN") != std::string::npos ? "must be a finite number" : ""; },
            "", "finite"))
        ->check(CLI::Range(1e-3, 3600.0))
        ->capture_default_str();
    cal->add_option("--max-dim", copts.max_dim, "largest square GEMM of the size sweep")->capture_default_str();
    cal->add_option("--device", copts.device, "auto (GPU with cuBLAS when built with CUDA and present), cpu or gpu")
        ->capture_default_str();
    cairn::plan::RefitOptions ropts;
    cal->add_option("--from-runs", ropts.runs,
                    "instead of measuring: refit the cluster's efficiency terms to the step "
                    "times of finished cairn-train runs (default output "
                    "<out>/plan/cluster-refit.toml), with leave-one-out errors")
        ->type_name("DIR")
        ->expected(1, -1);
    cairn::parse_cli(app, argc, argv);

    // --plan's items set [plan] keys, ranked with --top; errors name "--plan tp=..." (not --set).
    for (const std::string& s : cairn::plan::plan_flag_to_sets(plan_text)) {
      const size_t eq = s.find('=');
      const std::string label = "--plan " + s.substr(5);  // "plan.tp=[4,8]" -> "--plan tp=[4,8]"
      try {
        settings.emplace_back(s.substr(0, eq), cairn::parse_config_value(s.substr(eq + 1)), label);
      } catch (const cairn::UsageError& e) {
        throw cairn::UsageError(label + ": " + e.what());
      }
    }
    cairn::Config cfg = cairn::load_tool_config(opts, settings);
    const bool prices_model = !cal->parsed() || ropts.runs.empty();
    // --print-config shows the vocabulary the plan prices (vocab = 0 resolved from the dataset or tokenizer); one
    // that cannot be resolved yet is printed as given, and a plan run names why.
    if (opts.print_config && prices_model) {
      try {
        cairn::plan::resolve_model_vocab(cfg);
      } catch (const cairn::UsageError&) {
      }
    }
    if (cairn::maybe_print_config(opts, cfg)) return 0;
    if (prices_model) cairn::plan::resolve_model_vocab(cfg);
    // --output is checked before the measurements (minutes on a GPU), not when they are done.
    if (cal->parsed() && !copts.output.empty()) {
      try {
        cairn::check_writable_file(copts.output);
      } catch (const cairn::UsageError& e) {
        throw cairn::UsageError(std::string("calibrate --output: ") + e.what());
      }
    }
    if (cal->parsed() && !ropts.runs.empty()) {
      ropts.output = copts.output;
      ropts.json_path = opts.json_path;
      return cairn::plan::run_calibrate_from_runs(cfg, ropts);
    }
    if (cal->parsed()) {
      std::string path = cairn::plan::run_calibrate(cfg, copts);
      std::cout << path << "\n";  // on stderr under --json -, which gets the JSON alone
      cairn::write_json_output(
          opts.json_path,
          cairn::json_text(nlohmann::json{{"provenance", cairn::provenance().to_json()}, {"cluster_file", path}}, 2));
      return 0;
    }
    cairn::plan::RunOptions ro;
    ro.json_path = opts.json_path;
    ro.explain = explain;
    return cairn::plan::run_plan(cfg, ro);
  });
}
