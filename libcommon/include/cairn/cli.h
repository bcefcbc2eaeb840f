// Common command-line options of every tool and the main() wrapper that maps errors to exit codes.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "cairn/config.h"

namespace CLI {
class App;
}

namespace cairn {

// The options every tool has: --config, --set, --out, --print-config, --log-level, --json, --version.
struct CommonOptions {
  std::vector<std::string> config_files;
  std::vector<std::string> sets;
  std::string out;  // overrides [run] dir
  bool print_config = false;
  std::string log_level = "info";
  std::string json_path;  // "" = none, "-" = stdout
  bool log_all_ranks = false;
};

// Adds the common options to a CLI11 app (call before the tool adds its own). Without `short_aliases`,
// --config and --out have no -C/-o (cairn-sweep: nccl-tests owns those letters).
void add_common_options(CLI::App& app, CommonOptions& opts, bool short_aliases = true);

// Loads the effective config from the common options (files, env, --set, --out -> run.dir),
// applies --log-level, and records the config in provenance(). `tool_sets` are "section.key=value"
// assignments a tool derives from its own flags; they rank with --set (after the env).
// Before any work, the outputs the common options name are checked (UsageError, exit 2, naming the
// path): a --out/[run] dir given on the command line or in the env that is not a directory, a --json
// file that cannot be written. With `--json -`, stdout is kept for the JSON from here until run_tool
// returns: fd 1 points at stderr, so whatever the tool prints for people goes there.
Config load_tool_config(const CommonOptions& opts, const std::vector<std::string>& tool_sets = {});

// Typed values of a tool's own flags for config keys (ToolSettings, config.h), e.g. {"sweep.iters", 50}:
// validated like any key and ranked with --set (after the env), without quoting values as TOML text.
Config load_tool_config(const CommonOptions& opts, const ToolSettings& tool_settings);

// If --print-config was given, prints the effective config (with origins) to stdout and returns true.
// The text is TOML that loads back (--config) to the same config. A tool's positional arguments (input files, run
// directories, checkpoints), which are not config keys and have no one place in it (each tool merges them with its own
// key, or has none), are shown on a comment line at the top: `# positional arguments (...): ["a", "b c"]`.
bool maybe_print_config(const CommonOptions& opts, const Config& cfg, const std::vector<std::string>& positional = {});

// main() body shared by every tool: sets provenance (tool, argv), runs `body`, and turns exceptions
// into `cairn-<tool>: message` on stderr plus the exit code (CLI11 parse errors exit 2).
int run_tool(const std::string& tool, int argc, char** argv, const std::function<int()>& body);

// For the tools that run as one process (cairn-plan, cairn-report): true when a launcher started this process as
// a rank other than 0 (`mpirun -np 4`, `srun -n 4`; read from OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK,
// SLURM_PROCID). Such a process says on stderr that rank 0 does the work and the tool exits 0 without writing: N
// copies would print N tables and write the same files over each other.
bool leave_work_to_rank0(const std::string& tool);

// Parses the app; CLI11 errors become UsageError (exit 2), --help/--version exit 0 via run_tool.
void parse_cli(CLI::App& app, int argc, char** argv);

// Writes the `--json` document (nothing when `path` is empty; "-": the real stdout, see load_tool_config).
void write_json_output(const std::string& path, const std::string& text);

// The [run] dir (after --out), i.e. where stages write <dir>/<stage>/.
std::string run_dir(const Config& cfg);

}  // namespace cairn
