// Common CLI options (CLI11), config loading from them, and the main() wrapper with exit codes.
#include "cairn/cli.h"
#include "cairn/config_section.h"
#include "cairn/sections/run.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <new>
#include <sstream>

#include <CLI/CLI.hpp>

#include "cairn/error.h"
#include "cairn/files.h"
#include "cairn/h5.h"
#include "cairn/log.h"
#include "cairn/mpi.h"
#include "cairn/provenance.h"
#include "cairn/sysinfo.h"

namespace cairn {

void add_common_options(CLI::App& app, CommonOptions& opts, bool short_aliases) {
  // "cairn-train 0.1.0 (git <sha>)": the tool's name first, as `samtools --version` and most CLIs print it
  app.set_version_flag("--version", (provenance().tool.empty() ? std::string("cairn") : provenance().tool) + " " +
                                        cairn_version() + " (git " + cairn_git_sha() + ")");
  app.add_option(short_aliases ? "-C,--config" : "--config", opts.config_files,
                 "TOML config file (repeatable; later files override earlier; `include = [...]` merges others; "
                 "- reads stdin)")
      ->type_name("FILE")
      ->allow_extra_args(false);  // one value per occurrence: `--config a.toml input.txt` keeps the input
  app.add_option("--set", opts.sets, "override a config key: section.key=value (repeatable; highest precedence)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  app.add_option(short_aliases ? "-o,--out" : "--out", opts.out,
                 "run directory (sets [run] dir); outputs go to <out>/<stage>/")
      ->type_name("DIR")
      // a directory (or convert's file prefix), never stdout: `--out -` used to create a directory named "-"
      ->check([](const std::string& v) {
        return v == "-" ? std::string("names a directory, not stdout (- is for --json and input files)")
                        : std::string();
      });
  app.add_flag("--print-config", opts.print_config,
               "print the effective config as TOML, each key annotated with where its value came from, and exit");
  app.add_option("--log-level", opts.log_level, "debug, info, warn, error or quiet (logs go to stderr)")
      ->capture_default_str();
  app.add_option("--json", opts.json_path,
                 "also write machine-readable results to FILE (- for stdout, which then holds the JSON alone: "
                 "what the tool prints for people goes to stderr)")
      ->type_name("FILE");
  app.add_flag("--log-all-ranks", opts.log_all_ranks, "every MPI rank logs, prefixed [rank/size host]");
}

namespace {

// An integer flag's value: what CLI11 reads as an integer (as before), or a number in float or exponent notation
// (--tokens 1e10, --steps 2.0), kept as such for the key's check (an exact integer in range is taken, 1.5 refused
// naming the flag and key, like --set). Anything else is CLI11's own conversion error.
json integer_flag_value(const std::string& text, const std::string& flag) {
  int64_t i = 0;
  if (CLI::detail::lexical_cast(text, i)) {
    // CLI11 saturates a whole number past int64 at its limit: the key's range check then named 9223372036854775807,
    // not what was typed. Such a number goes on as the float it is, which the range check names as typed.
    if (i == INT64_MAX || i == INT64_MIN) {
      int64_t exact = 0;
      const char* end = text.data() + text.size();
      const auto [ptr, ec] = std::from_chars(text.data() + (text[0] == '+' ? 1 : 0), end, exact);
      if (ec == std::errc::result_out_of_range && ptr == end) return std::strtod(text.c_str(), nullptr);
    }
    return i;
  }
  json v;
  try {
    v = parse_config_value(text);
  } catch (const UsageError&) {
  }
  if (v.is_number_float()) return v;
  throw CLI::ConversionError(flag, std::vector<std::string>{text});
}

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
      app.add_option_function<std::string>(
             k.flag, [keep, shown](const std::string& v) { keep(integer_flag_value(v, shown)); }, help)
          ->type_name("INT");
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
      app.add_option_function<std::vector<std::string>>(
             k.flag,
             [keep, shown](const std::vector<std::string>& v) {
               json list = json::array();
               for (const auto& e : v) list.push_back(integer_flag_value(e, shown));
               keep(list);
             },
             help)
          ->type_name("INT")
          ->delimiter(',');
      break;
    default:
      app.add_option_function<std::string>(
          k.flag, [keep](const std::string& v) { keep(v); }, help);
      break;
  }
}

}  // namespace

namespace {

// The real stdout while `--json -` owns it (-1 otherwise): fd 1 then points at stderr, so whatever a
// tool prints for people (tables, summaries) lands on stderr and stdout carries the JSON alone.
int json_stdout_fd = -1;

// Writes data meant for stdout: to the real stdout when `--json -` redirected fd 1.
void write_stdout(std::string_view text) {
  write_to_stdout(text, json_stdout_fd >= 0 ? json_stdout_fd : STDOUT_FILENO);
}

void reserve_stdout_for_json() {
  if (json_stdout_fd >= 0) return;
  std::cout.flush();
  std::fflush(stdout);
  int saved = ::fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
  if (saved < 0) return;  // no stdout at all: nothing to keep clean
  if (::dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
    ::close(saved);
    return;
  }
  json_stdout_fd = saved;
}

// Undoes reserve_stdout_for_json when a tool's body ends (in-process callers, tests, run more than one).
void restore_stdout() {
  if (json_stdout_fd < 0) return;
  std::cout.flush();
  std::fflush(stdout);
  ::dup2(json_stdout_fd, STDOUT_FILENO);
  ::close(json_stdout_fd);
  json_stdout_fd = -1;
}

// The output paths of the common options, checked before the config is used for any work: an output that
// cannot be written is a usage error (exit 2) now, not after minutes of work. Rank 0 checks (it writes
// them; another node may not see the paths) and a failure there ends the job.
void check_common_outputs(const CommonOptions& opts, const Config& cfg) {
  if (opts.json_path == "-") reserve_stdout_for_json();
  if (mpi::initialized() && mpi::rank() != 0) return;
  // A shell's shorthand in a TOML value is not expanded: "~/runs/x" made a directory named "~" in the current one (a
  // later `rm -rf ~` away from deleting the home directory) and "$SCRATCH/x" one named "$SCRATCH". A quoted ~ on the
  // command line or in the environment (--set 'run.dir="~/x"', --out '~/x', CAIRN_RUN_DIR='~/x') is not expanded
  // either. ~user/x is the same shorthand for another home.
  if (const Origin& where = cfg.origin("run.dir"); where.kind != Origin::Default) {
    const std::string dir = run_dir(cfg);
    if (!dir.empty() && dir[0] == '~')  // ~, ~/x and ~user/x alike
      throw UsageError((where.where == "--out" ? std::string("--out") : where.describe()) + ": [run] dir \"" + dir +
                       "\" starts with ~, which only a shell expands: give the full path" +
                       (where.kind == Origin::File ? " (or --out ~/... on the command line)"
                                                   : " (or leave the ~ unquoted, where the shell expands it)"));
    if (where.kind == Origin::File && dir.find('$') != std::string::npos)
      CAIRN_LOG_WARN("[run] dir \"%s\" (%s) holds a $: it is taken literally, as TOML does not expand variables "
                     "(use --out \"$VAR/...\" on the command line, or CAIRN_RUN_DIR)",
                     dir.c_str(), where.describe().c_str());
  }
  // The run directory, where the command line or the environment names it (a config file's [run] dir may
  // name a run this tool does not write to, e.g. cairn-report's), must be a directory or creatable as one:
  // its nearest existing ancestor is a directory (a regular file there failed late, with exit 1, in the
  // tools that create it only when they write).
  const Origin& dir_origin = cfg.origin("run.dir");
  if (dir_origin.kind == Origin::Set || dir_origin.kind == Origin::Env) {
    const std::string dir = run_dir(cfg);
    // ... and one this process may write in: a read-only mount or another user's directory failed only after the
    // work, when the first output was written (cairn-plan, cairn-report, cairn-reshard: exit 1).
    if (std::string why = dir.empty() ? "" : creatable_dir_problem(dir); !why.empty())
      throw UsageError(file_message((dir_origin.where == "--out" ? std::string("--out") : dir_origin.describe()) +
                                        ": cannot use run directory",
                                    dir, why));
  }
  if (!opts.json_path.empty() && opts.json_path != "-") {
    try {
      check_writable_file(opts.json_path);
    } catch (const UsageError& e) {
      throw UsageError(std::string("--json: ") + e.what());
    }
  }
}

}  // namespace

void add_section_flags(CLI::App& app, const std::string& section, ToolSettings& settings, const Schema& schema) {
  for (const KeySpec& k : schema.keys()) {
    if (k.section == section && !k.flag.empty()) add_key_flag(app, k, settings);
  }
}

namespace {
// The config from the common options' files, env and --set (and a tool's text assignments), before --out.
Config load_layers(const CommonOptions& opts, const std::vector<std::string>& tool_sets) {
  LogSettings& ls = log_settings();
  ls.level = parse_log_level(opts.log_level);
  ls.all_ranks = opts.log_all_ranks;
  // Where this rank landed, now that the level is known (tests on a multi-node Slurm compare it with SLURM_LOCALID).
  if (mpi::initialized()) {
    const mpi::Topology& t = mpi::topology();
    CAIRN_LOG_DEBUG("topology: rank %d of %d on %s, local rank %d of %d, node %d of %d", t.rank, t.size, t.host.c_str(),
                    t.local_rank, t.local_size, t.node_index, t.node_count);
  }
  // mpirun and srun give standard input to rank 0 alone, and a shell's <(...) descriptor to none: each rank would read
  // another config ("the config differs from rank 0's: run.name = \"\" here").
  if (mpi::initialized() && mpi::size() > 1)
    for (const std::string& f : opts.config_files)
      if (f == "-" || f.rfind("/dev/fd/", 0) == 0 || f.rfind("/proc/self/fd/", 0) == 0)
        throw UsageError("--config " + f + " is a stream, which a launcher gives to rank 0 only (or to no rank): " +
                         "give the config as a file every rank can read");
  ConfigSources sources;
  sources.files = opts.config_files;
  // Tool flags first, then --set, so an explicit --set wins over a convenience flag.
  for (const auto& s : tool_sets) sources.sets.push_back(s);
  for (const auto& s : opts.sets) sources.sets.push_back(s);
  return load_config(sources);
}

// "section.key = value" of the first line where a config's TOML differs from rank 0's (both without origins).
std::string first_config_difference(const std::string& mine, const std::string& root) {
  std::istringstream a(mine), b(root);
  std::string la, lb, section;
  while (true) {
    const bool more_a = static_cast<bool>(std::getline(a, la)), more_b = static_cast<bool>(std::getline(b, lb));
    if (!more_a && !more_b) return "";
    if (!more_a) la.clear();
    if (!more_b) lb.clear();
    if (la != lb) {
      const std::string prefix = section.empty() ? "" : section + ".";
      return strprintf("%s here, %s on rank 0", la.empty() ? "nothing" : (prefix + la).c_str(),
                       lb.empty() ? "nothing" : (prefix + lb).c_str());
    }
    if (la.size() > 2 && la.front() == '[' && la.back() == ']') section = la.substr(1, la.size() - 2);
  }
}

// Every rank must run rank 0's config (`mine`: this rank's, as TOML without origins). Ranks that read other files or
// environments (a config on a node-local path, a CAIRN_* variable exported on one node, another --out) would otherwise
// wait forever in collectives the others never call, or crash on mismatched buffers; now the job ends at once with a
// usage error naming the key.
void agree_on_config(const std::string& mine) {
  if (!mpi::initialized() || mpi::size() <= 1) return;
  const std::string root = mpi::broadcast_string(mine);
  std::string err;
  if (mine != root)
    err = "the config differs from rank 0's: " + first_config_difference(mine, root) +
          " (give every rank the same --config files, CAIRN_* environment, flags and --set)";
  mpi::agree_or_throw(err.empty(), err, kExitUsage);
}

// --out last (it names the run directory whatever else does), provenance, then the output checks.
Config finish_tool_config(const CommonOptions& opts, Config cfg) {
  if (!opts.out.empty()) cfg.set("run.dir", opts.out, Origin{Origin::Set, "--out"});
  provenance().config_toml = cfg.to_toml(false);
  agree_on_config(provenance().config_toml);
  check_common_outputs(opts, cfg);
  return cfg;
}

// The config `load` builds, once every rank has built its own. A config that fails on some ranks only (a file on a
// node-local path, a bad CAIRN_* variable exported on one node) would leave rank 0 waiting in the next collective
// while the failing rank gave it the usage-error grace to report (run_tool): every rank learns of the failure
// here, so rank 0 reports it, naming the rank, and ends the job at once.
Config load_on_every_rank(const std::function<Config()>& load) {
  if (!mpi::initialized() || mpi::size() <= 1) return load();
  Config cfg;
  std::string err;
  int code = kExitOk;
  try {
    cfg = load();
  } catch (const Error& e) {
    err = e.what();
    code = e.code();
  }
  mpi::agree_or_throw(err.empty(), err, code);
  return cfg;
}
}  // namespace

Config load_tool_config(const CommonOptions& opts, const std::vector<std::string>& tool_sets) {
  return finish_tool_config(opts, load_on_every_rank([&] { return load_layers(opts, tool_sets); }));
}

Config load_tool_config(const CommonOptions& opts, const ToolSettings& tool_settings) {
  Config cfg = load_on_every_rank([&] {
    CommonOptions without_sets = opts;
    without_sets.sets.clear();
    Config c = load_layers(without_sets, {});
    for (const auto& t : tool_settings)
      c.set(t.key, t.value, Origin{Origin::Program, t.flag.empty() ? "command-line flag" : t.flag});
    for (const auto& s : opts.sets) c.set_from_text(s, Origin{Origin::Set, s});
    return c;
  });
  return finish_tool_config(opts, std::move(cfg));
}

bool maybe_print_config(const CommonOptions& opts, const Config& cfg, const std::vector<std::string>& positional) {
  if (!opts.print_config) return false;
  // Every rank of an MPI job loaded (and agreed on) the same config: rank 0 prints it once. Each rank printing
  // interleaved the copies into TOML that does not load back.
  if (mpi::initialized() && mpi::rank() != 0) return true;
  // --json: the same config as JSON (values and, apart, where each came from); with `--json -` alone on stdout
  if (!opts.json_path.empty()) {
    json doc = {{"config", cfg.to_json()},
                {"origin", cfg.origins_json()},
                {"positional", positional},
                {"provenance", provenance().to_json()}};
    write_json_output(opts.json_path, doc.dump(2));
    if (opts.json_path == "-") return true;
  }
  std::string text = "# effective config of " + provenance().tool + " " + cairn_version() +
                     " (precedence: default < file < env CAIRN_<SECTION>_<KEY> < flags < --set)\n";
  if (!positional.empty())
    text += "# positional arguments (not config keys: give them again with --config): " +
            printable_text(toml_value_text(json(positional))) + "\n";
  write_stdout(text + cfg.to_toml(true));
  return true;
}

namespace {
// " (did you mean --steps?)" for the words CLI11 could not place: a misspelled flag against every long flag of the
// app and its subcommands, a misspelled subcommand against the subcommands (config keys get the same help).
std::string extras_suggestion(CLI::App& app) {
  std::vector<std::string> flags, commands;
  auto collect = [&](const CLI::App& a) {
    for (const CLI::Option* o : a.get_options())
      for (const std::string& n : o->get_lnames()) flags.push_back("--" + n);
  };
  collect(app);
  for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    commands.push_back(sub->get_name());
    collect(*sub);
  }
  std::vector<std::pair<std::string, std::string>> found;  // (suggestion, what was typed)
  for (const std::string& word : app.remaining(true)) {
    const bool flag = word.rfind("--", 0) == 0;
    const std::string typed = flag ? word.substr(0, word.find('=')) : word;
    const std::string best = closest_match(typed, flag ? flags : commands);
    if (!best.empty() && best != typed) found.emplace_back(best, typed);
  }
  if (found.empty()) return "";
  if (found.size() == 1) return " (did you mean " + found[0].first + "?)";
  std::string out;
  for (const auto& [best, typed] : found) out += (out.empty() ? "" : ", ") + best + " for " + typed;
  return " (did you mean " + out + "?)";
}
}  // namespace

void parse_cli(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    app.exit(e);  // prints --help / --version text
    throw Error(kExitOk, "");
  } catch (const CLI::ExtrasError& e) {
    throw UsageError(e.what() + extras_suggestion(app) + " (see --help)");
  } catch (const CLI::ParseError& e) {
    throw UsageError(e.what() + std::string(" (see --help)"));
  }
}

void write_json_output(const std::string& path, const std::string& text) {
  if (path.empty()) return;
  const std::string line = !text.empty() && text.back() == '\n' ? text : text + "\n";
  if (path == "-") write_stdout(line);
  else atomic_write(path, line);
}

std::string run_dir(const Config& cfg) { return read_section<RunSection>(cfg).dir; }

namespace {
// How long a rank other than 0 waits, after a usage error, for rank 0 to report it and end the job.
constexpr double kUsageAbortGraceSeconds = 20.0;

// The tool's exit code. A file HDF5 could not close (a full disk) stays open inside HDF5, and HDF5's clean-up at exit
// crashes on it: the error is already reported and every file that could be closed is closed, so skip that clean-up.
int end_tool(int code) {
  if (!h5::close_failed()) return code;
  restore_stdout();
  std::fflush(nullptr);
  std::_Exit(code);
}

// "[r3/8 host] " on multi-rank jobs, so a failure names the rank it happened on.
std::string rank_prefix() {
  const LogSettings& s = log_settings();
  return s.size > 1 ? strprintf("[r%d/%d %s] ", s.rank, s.size, s.host.c_str()) : std::string();
}
}  // namespace

namespace {
// Data a tool printed that never reached stdout (`> /dev/full`, a full disk) is a failed run, not exit 0; a reader
// that went away (`| head`) is not a failure. stdio keeps what it could not write, so the last flush tells.
void check_stdout_written() {
  std::cout.flush();
  errno = 0;
  const bool flush_failed = std::fflush(stdout) != 0;
  const int err = errno;
  if (!flush_failed && !std::ferror(stdout) && !std::cout.bad()) return;
  if (err == EPIPE) return;
  struct stat st {};
  const bool pipe = ::fstat(STDOUT_FILENO, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode));
  if (!flush_failed && pipe) return;  // an earlier write's EPIPE: its errno is gone, the pipe is the likely cause
  if (standard_stream_closed(STDOUT_FILENO)) throw RuntimeError(kStdoutClosed);
  throw RuntimeError(std::string("cannot write to stdout: ") +
                     (flush_failed && err ? std::strerror(err) : "a write failed; the output is incomplete"));
}
}  // namespace

bool leave_work_to_rank0(const std::string& tool) {
  // The first variable set names this process's rank; SLURM_PROCID is 0 in a batch script itself.
  for (const char* rank_var : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    const char* v = std::getenv(rank_var);
    if (!v || !*v) continue;
    char* end = nullptr;
    const long rank = std::strtol(v, &end, 10);
    if (*end != '\0' || rank <= 0) return false;
    std::fprintf(stderr, "%s: runs as one process; %s=%ld leaves the work to rank 0\n", tool.c_str(), rank_var, rank);
    return true;
  }
  return false;
}

int run_tool(const std::string& tool, int argc, char** argv, const std::function<int()>& body) {
  guard_standard_streams();  // before anything opens a file
  raise_open_file_limit();
  Provenance& p = provenance();
  p.tool = tool;
  std::vector<std::string> args(argv, argv + argc);
  p.command_line = shell_join(args);
  log_settings().tool = tool;
  h5::silence_errors();
  // Writing to a closed pipe (`tool | head`) should end quietly, not kill us mid-write of a file.
  std::signal(SIGPIPE, SIG_IGN);
  // `--json -` hands stdout back when the tool ends, however it ends.
  struct StdoutRestorer {
    ~StdoutRestorer() { restore_stdout(); }
  } restorer;
  try {
    const int code = body();
    if (code == kExitOk) check_stdout_written();
    return end_tool(code);
  } catch (const CLI::Success& e) {
    return 0;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "%s: %s (see --help)\n", tool.c_str(), e.what());
    return kExitUsage;
  } catch (const Error& e) {
    if (e.code() == kExitOk && std::string(e.what()).empty()) {  // --help, --version, --print-config: text only
      try {
        check_stdout_written();
      } catch (const Error& lost) {
        std::fprintf(stderr, "%s: %s\n", tool.c_str(), lost.what());
        return kExitRuntime;
      }
      return kExitOk;
    }
    // Usage errors come from the command line and config, the same on every rank: rank 0 says it
    // once and aborts the job. Another rank that aborted first would kill rank 0 before it printed
    // (seen in CI), so the others leave rank 0 time to do it, and speak only if it did not.
    const bool usage_on_other_rank =
        e.code() == kExitUsage && log_settings().rank != 0 && mpi::initialized() && mpi::topology().size > 1;
    if (usage_on_other_rank) mpi::wait_for_root_abort(kUsageAbortGraceSeconds);
    std::fprintf(stderr, "%s%s: %s\n", rank_prefix().c_str(), tool.c_str(), e.what());
    mpi::abort_if_failed(e.code());
    return end_tool(e.code());
  } catch (const std::bad_alloc&) {
    // Said as what it is, with what this process may still have (a bare "std::bad_alloc" named nothing).
    std::fprintf(stderr,
                 "%s%s: out of memory (std::bad_alloc); %s available to this process now (MemAvailable, cgroup "
                 "limit, ulimit -v)\n",
                 rank_prefix().c_str(), tool.c_str(), human_bytes(available_memory_bytes()).c_str());
    mpi::abort_if_failed(kExitRuntime);
    return end_tool(kExitRuntime);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s%s: %s\n", rank_prefix().c_str(), tool.c_str(), e.what());
    mpi::abort_if_failed(kExitRuntime);
    return end_tool(kExitRuntime);
  }
}

}  // namespace cairn
