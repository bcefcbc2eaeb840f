// A minimal tool built on the common CLI, used by cli_test.sh to check the shared conventions.
#include <CLI/CLI.hpp>
#include <iostream>

#include "cairn/cli.h"
#include "cairn/config_section.h"
#include "cairn/error.h"
#include "cairn/files.h"
#include "cairn/log.h"

int main(int argc, char** argv) {
  return cairn::run_tool("cairn-probe", argc, argv, [&] {
    CLI::App app{"cairn-probe: exercises the common options"};
    cairn::CommonOptions opts;
    cairn::add_common_options(app, opts);
    int layers = 0;
    std::string fail;
    app.add_option("--layers", layers, "sets model.layers (a tool flag)");
    app.add_option("--fail", fail, "runtime|gate|io: fail that way");
    std::vector<std::string> inputs;
    app.add_option("inputs", inputs, "positional arguments (shown by --print-config)");
    // The [train] keys' flags (--steps, ...): the shared conversion of every tool's key flags.
    cairn::ToolSettings settings;
    cairn::add_section_flags(app, "train", settings);
    cairn::parse_cli(app, argc, argv);
    if (layers) settings.emplace_back("model.layers", layers, "--layers");
    cairn::Config cfg = cairn::load_tool_config(opts, settings);
    if (cairn::maybe_print_config(opts, cfg, inputs)) return 0;
    if (fail == "runtime") throw cairn::RuntimeError("the thing broke");
    if (fail == "gate") throw cairn::GateFailure("busbw 1.0 GB/s below the floor 2.0 GB/s");
    if (fail == "io") cairn::read_file("/nonexistent/input.txt");
    CAIRN_LOG_INFO("layers=%lld", static_cast<long long>(cfg.get_int("model.layers")));
    std::cout << "layers " << cfg.get_int("model.layers") << " dir " << cairn::run_dir(cfg) << "\n";
    cairn::write_json_output(opts.json_path, cfg.to_json().dump());
    return 0;
  });
}
