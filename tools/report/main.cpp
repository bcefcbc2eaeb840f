// cairn-report: one HTML/Markdown/JSON report over run directories, with a baseline and regression gates.
#include <iostream>

#include <CLI/CLI.hpp>

#include "cairn/cli.h"
#include "cairn/config_section.h"
#include "cairn/error.h"
#include "report.h"

int main(int argc, char** argv) {
  return cairn::run_tool("cairn-report", argc, argv, [&]() -> int {
    if (cairn::leave_work_to_rank0("cairn-report")) return 0;
    CLI::App app{"cairn-report: charts, comparison against a baseline and regression gates over run directories.\n"
                 "Writes <out>/report/{index.html,summary.md,summary.json}; exit 3 when a [report.gates] gate fails."};
    cairn::CommonOptions opts;
    cairn::add_common_options(app, opts);
    std::vector<std::string> runs;
    bool list_metrics = false;
    app.add_option("runs", runs, "run directories (each may hold sweep/ plan/ data/ train/ eval/)")->type_name("DIR");
    // -b/--baseline and --title set their [report] keys (declared in cairn/sections/report.h).
    cairn::ToolSettings settings;
    cairn::add_section_flags(app, "report", settings);
    app.add_flag("--list-metrics", list_metrics, "print the metric names gates can use, and exit");
    app.footer(
        "--out DIR writes DIR/report/ (default: the first run that is not the baseline).\n"
        "Gates, e.g. in a config file:\n"
        "  [report.gates]\n"
        "  val_loss = { max_increase = 0.02 }\n"
        "  tokens_per_s = { max_drop_pct = 5 }\n"
        "  busbw_allreduce = { max_drop_pct = 10 }\n"
        "  wrong = { max = 0 }\n"
        "or --set 'report.gates.val_loss={max_increase=0.02}'. Exit codes: 0 ok, 1 runtime error,\n"
        "2 usage/config error or bad input (e.g. an unknown gate metric, a malformed sweep.json or plans.json),\n"
        "3 a gate failed (missing data fails too).\n\n" +
        cairn::report::metrics_help());
    cairn::parse_cli(app, argc, argv);
    if (list_metrics) {
      // --json FILE: also the catalog as JSON; --json -: the JSON alone on stdout
      if (!opts.json_path.empty())
        cairn::write_json_output(opts.json_path, cairn::report::metrics_catalog_json().dump(2));
      if (opts.json_path != "-") std::cout << cairn::report::metrics_help();
      return 0;
    }
    cairn::Config cfg = cairn::load_tool_config(opts, settings);
    // A gate the report would refuse fails --print-config too (a report parses them itself, warning once).
    if (opts.print_config) cairn::report::parse_gates(cfg);
    if (cairn::maybe_print_config(opts, cfg, runs)) return 0;
    cairn::report::ReportInputs inputs = cairn::report::report_inputs(cfg, runs);
    cairn::report::ReportResult result = cairn::report::run_report(inputs);
    cairn::write_json_output(opts.json_path, result.json_text);
    if (result.model.gates_failed() > 0) throw cairn::GateFailure(cairn::report::gate_failure_message(result.model));
    return 0;
  });
}
