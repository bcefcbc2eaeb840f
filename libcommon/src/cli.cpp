// Common CLI options (CLI11), config loading from them, and the main() wrapper with exit codes.
#include "cairn/cli.h"
#include "cairn/config_section.h"
#include "cairn/sections/run.h"

#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>

#include <CLI/CLI.hpp>

#include "cairn/error.h"
#include "cairn/files.h"
#include "cairn/h5.h"
#include "cairn/log.h"
#include "cairn/mpi.h"
#include "cairn/provenance.h"

namespace cairn {

void add_common_options(CLI::App& app, CommonOptions& opts) {
  app.set_version_flag("--version", cairn_version() + " (git " + cairn_git_sha() + ")");
  app.add_option("-C,--config", opts.config_files,
                 "TOML config file (repeatable; later files override earlier; `include = [...]` merges others)")
      ->type_name("FILE")
      ->allow_extra_args(false);  // one value per occurrence: `--config a.toml input.txt` keeps the input
  app.add_option("--set", opts.sets, "override a config key: section.key=value (repeatable; highest precedence)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  app.add_option("-o,--out", opts.out, "run directory (sets [run] dir); outputs go to <out>/<stage>/")
      ->type_name("DIR");
  app.add_flag("--print-config", opts.print_config,
               "print the effective config as TOML, each key annotated with where its value came from, and exit");
  app.add_option("--log-level", opts.log_level, "debug, info, warn, error or quiet (logs go to stderr)")
      ->capture_default_str();
  app.add_option("--json", opts.json_path, "also write machine-readable results to FILE (- for stdout)")
      ->type_name("FILE");
  app.add_flag("--log-all-ranks", opts.log_all_ranks, "every MPI rank logs, prefixed [rank/size host]");
}

namespace {

// The CLI11 option of one flagged key: the value is kept typed and checked by the schema when the config loads.
void add_key_flag(CLI::App& app, const KeySpec& k, ToolSettings& settings) {
  const std::string dotted = k.section + "." + k.key;
  const std::string help = k.doc + " (sets [" + k.section + "] " + k.key + ")";
  // The flag's long name as the user typed it, for error messages ("--iters").
  std::string shown = k.flag;
  if (size_t comma = shown.rfind(','); comma != std::string::npos) shown = shown.substr(comma + 1);
  auto keep = [&settings, dotted, shown](json v) { settings.emplace_back(dotted, std::move(v), shown); };
  switch (k.type) {
    case KeyType::Bool:
      app.add_flag_function(
          k.flag, [keep](int64_t) { keep(true); }, help);
      break;
    case KeyType::Int:
      app.add_option_function<int64_t>(
          k.flag, [keep](const int64_t& v) { keep(v); }, help);
      break;
    case KeyType::Float:
      app.add_option_function<double>(
          k.flag, [keep](const double& v) { keep(v); }, help);
      break;
    case KeyType::StringList:
    case KeyType::StringOrStringList:
      app.add_option_function<std::vector<std::string>>(
             k.flag, [keep](const std::vector<std::string>& v) { keep(v); }, help)
          ->delimiter(',');
      break;
    case KeyType::FloatList:
      app.add_option_function<std::vector<double>>(
             k.flag, [keep](const std::vector<double>& v) { keep(v); }, help)
          ->delimiter(',');
      break;
    case KeyType::IntList:
    case KeyType::IntOrIntList:
      app.add_option_function<std::vector<int64_t>>(
             k.flag, [keep](const std::vector<int64_t>& v) { keep(v); }, help)
          ->delimiter(',');
      break;
    default:
      app.add_option_function<std::string>(
          k.flag, [keep](const std::string& v) { keep(v); }, help);
      break;
  }
}

}  // namespace

void add_section_flags(CLI::App& app, const std::string& section, ToolSettings& settings, const Schema& schema) {
  for (const KeySpec& k : schema.keys()) {
    if (k.section == section && !k.flag.empty()) add_key_flag(app, k, settings);
  }
}

Config load_tool_config(const CommonOptions& opts, const std::vector<std::string>& tool_sets) {
  LogSettings& ls = log_settings();
  ls.level = parse_log_level(opts.log_level);
  ls.all_ranks = opts.log_all_ranks;
  // Where this rank landed, now that the level is known (tests on a multi-node Slurm compare it with SLURM_LOCALID).
  if (mpi::initialized()) {
    const mpi::Topology& t = mpi::topology();
    CAIRN_LOG_DEBUG("topology: rank %d of %d on %s, local rank %d of %d, node %d of %d", t.rank, t.size, t.host.c_str(),
                    t.local_rank, t.local_size, t.node_index, t.node_count);
  }
  ConfigSources sources;
  sources.files = opts.config_files;
  // Tool flags first, then --set, so an explicit --set wins over a convenience flag.
  for (const auto& s : tool_sets) sources.sets.push_back(s);
  for (const auto& s : opts.sets) sources.sets.push_back(s);
  Config cfg = load_config(sources);
  if (!opts.out.empty()) cfg.set("run.dir", opts.out, Origin{Origin::Set, "--out"});
  provenance().config_toml = cfg.to_toml(false);
  return cfg;
}

Config load_tool_config(const CommonOptions& opts, const ToolSettings& tool_settings) {
  CommonOptions without_sets = opts;
  without_sets.sets.clear();
  Config cfg = load_tool_config(without_sets);
  for (const auto& t : tool_settings)
    cfg.set(t.key, t.value, Origin{Origin::Program, t.flag.empty() ? "command-line flag" : t.flag});
  for (const auto& s : opts.sets) cfg.set_from_text(s, Origin{Origin::Set, s});
  if (!opts.out.empty()) cfg.set("run.dir", opts.out, Origin{Origin::Set, "--out"});
  provenance().config_toml = cfg.to_toml(false);
  return cfg;
}

bool maybe_print_config(const CommonOptions& opts, const Config& cfg) {
  if (!opts.print_config) return false;
  std::cout << "# effective config of " << provenance().tool << " " << cairn_version()
            << " (precedence: default < file < env CAIRN_<SECTION>_<KEY> < --set)\n";
  std::cout << cfg.to_toml(true);
  std::cout.flush();
  return true;
}

void parse_cli(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    app.exit(e);  // prints --help / --version text
    throw Error(kExitOk, "");
  } catch (const CLI::ParseError& e) {
    throw UsageError(e.what() + std::string(" (see --help)"));
  }
}

void write_json_output(const std::string& path, const std::string& text) {
  if (path.empty()) return;
  atomic_write(path, text.back() == '\n' ? text : text + "\n");
}

std::string run_dir(const Config& cfg) { return read_section<RunSection>(cfg).dir; }

namespace {
// How long a rank other than 0 waits, after a usage error, for rank 0 to report it and end the job.
constexpr double kUsageAbortGraceSeconds = 20.0;

// "[r3/8 host] " on multi-rank jobs, so a failure names the rank it happened on.
std::string rank_prefix() {
  const LogSettings& s = log_settings();
  return s.size > 1 ? strprintf("[r%d/%d %s] ", s.rank, s.size, s.host.c_str()) : std::string();
}
}  // namespace

int run_tool(const std::string& tool, int argc, char** argv, const std::function<int()>& body) {
  Provenance& p = provenance();
  p.tool = tool;
  std::vector<std::string> args(argv, argv + argc);
  p.command_line = shell_join(args);
  log_settings().tool = tool;
  h5::silence_errors();
  // Writing to a closed pipe (`tool | head`) should end quietly, not kill us mid-write of a file.
  std::signal(SIGPIPE, SIG_IGN);
  try {
    return body();
  } catch (const CLI::Success& e) {
    return 0;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "%s: %s (see --help)\n", tool.c_str(), e.what());
    return kExitUsage;
  } catch (const Error& e) {
    if (e.code() == kExitOk && std::string(e.what()).empty()) return kExitOk;
    // Usage errors come from the command line and config, the same on every rank: rank 0 says it
    // once and aborts the job. Another rank that aborted first would kill rank 0 before it printed
    // (seen in CI), so the others leave rank 0 time to do it, and speak only if it did not.
    const bool usage_on_other_rank =
        e.code() == kExitUsage && log_settings().rank != 0 && mpi::initialized() && mpi::topology().size > 1;
    if (usage_on_other_rank) mpi::wait_for_root_abort(kUsageAbortGraceSeconds);
    std::fprintf(stderr, "%s%s: %s\n", rank_prefix().c_str(), tool.c_str(), e.what());
    mpi::abort_if_failed(e.code());
    return e.code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s%s: %s\n", rank_prefix().c_str(), tool.c_str(), e.what());
    mpi::abort_if_failed(kExitRuntime);
    return kExitRuntime;
  }
}

}  // namespace cairn
