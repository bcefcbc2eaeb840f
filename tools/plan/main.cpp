// cairn-plan: finds the fastest parallel layout (DP/TP/PP/v/mb/ZeRO/recompute/SP) for a model on a cluster.
#include <CLI/CLI.hpp>
#include <iostream>

#include "cairn/cli.h"
#include "calibrate_runs.h"
#include "plan.h"

int main(int argc, char** argv) {
  return cairn::run_tool("cairn-plan", argc, argv, [&]() -> int {
    CLI::App app{"cairn-plan: search parallel training plans with an analytical cost model (docs/cost-model.md).\n"
                 "Writes <out>/plan/plans.json, plans.h5 (every evaluated plan) and best.toml ([parallel]).\n"
                 "Exit codes: 0 ok, 1 runtime failure, 2 config/input error, 3 nothing fits in memory."};
    cairn::CommonOptions opts;
    cairn::add_common_options(app, opts);
    std::string plan_text;
    bool explain = false;
    int64_t top = 0;
    app.add_option("--plan", plan_text,
                   "constrain the search / the explained plan: dp=8,tp=4,pp=2,v=1,mb=1,zero=1,"
                   "recompute=full,sp=on (lists: tp=[4,8])")
        ->type_name("K=V,...");
    app.add_flag("--explain", explain, "evaluate the one plan given by --plan (or [parallel]) and print its breakdown");
    app.add_option("--top", top, "plans in the ranked table (sets [plan] top_k)");
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

    std::vector<std::string> sets = cairn::plan::plan_flag_to_sets(plan_text);
    if (top > 0) sets.push_back("plan.top_k=" + std::to_string(top));
    cairn::Config cfg = cairn::load_tool_config(opts, sets);
    if (cairn::maybe_print_config(opts, cfg)) return 0;
    if (cal->parsed() && !ropts.runs.empty()) {
      ropts.output = copts.output;
      ropts.json_path = opts.json_path;
      return cairn::plan::run_calibrate_from_runs(cfg, ropts);
    }
    if (cal->parsed()) {
      std::string path = cairn::plan::run_calibrate(cfg, copts);
      std::cout << path << "\n";
      return 0;
    }
    cairn::plan::RunOptions ro;
    ro.json_path = opts.json_path;
    ro.explain = explain;
    return cairn::plan::run_plan(cfg, ro);
  });
}
