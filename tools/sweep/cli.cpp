// cairn-sweep's command line (sweep_main): nccl-tests' flags -> [sweep] settings, then the sweep or --bench-bare.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <optional>

#include "cairn/cli.h"
#include "cairn/config_section.h"
#include "cairn/error.h"
#include "cairn/log.h"
#include "cairn/mpi.h"
#include "cairn/provenance.h"
#include "sweep.h"

namespace {

void usage(const std::string& m) { throw cairn::UsageError(m); }

// -d: nccl-tests' type names, with its messages for the types cairn-sweep does not measure.
const std::vector<std::string>& checked_types(const std::vector<std::string>& types) {
  for (const auto& t : types) {
    if (t == "all") continue;
    static const char* nccl_only[] = {"int8", "uint8", "uint32", "int64", "uint64", "f8e4m3", "f8e5m2"};
    for (const char* n : nccl_only) {
      if (t == n)
        usage("-d/--datatype " + t +
              ": not measured by cairn-sweep (it has int32, half, float, double, bfloat16, all)");
    }
    try {
      cairn::sweep::parse_type(t);
    } catch (const cairn::UsageError& e) {
      usage(std::string("-d/--datatype: ") + e.what());
    }
  }
  return types;
}

// -o: nccl-tests' op names, likewise.
const std::vector<std::string>& checked_ops(const std::vector<std::string>& ops) {
  for (const auto& op : ops) {
    if (op == "all") continue;
    if (op == "mulsum") usage("-o/--op mulsum: not measured by cairn-sweep (it has sum, prod, max, min, avg, all)");
    try {
      cairn::sweep::parse_op(op);
    } catch (const cairn::UsageError& e) {
      usage(std::string("-o/--op: ") + e.what());
    }
  }
  return ops;
}

// nccl-tests' flags with checks or side effects of their own, and the --bench-bare ones.
struct NcclFlags {
  std::string stepbytes, nccl_json, experiment;
  int64_t blocking = 0, root = 0;
  int64_t nthreads = 1, ngpus = 1, agg_iters = 1, cputime = 0, local_register = 0, graph = 0;
  std::vector<std::string> types, ops;
  cairn::sweep::BenchBareOptions bench;
  double bench_loop_ms = 0.5;
  NcclFlags() { bench.max_rounds = 0; }
};

void add_nccl_flags(CLI::App& app, NcclFlags& f) {
  app.add_option("-t,--nthreads", f.nthreads, "threads per process (nccl-tests; only 1: one rank per GPU)");
  app.add_option("-g,--ngpus", f.ngpus, "GPUs per thread (nccl-tests; only 1: one rank per GPU)");
  app.add_option("-i,--stepbytes", f.stepbytes, "add this many bytes each step (implies -f 1 unless -f is given)");
  app.add_option("-m,--agg_iters", f.agg_iters, "calls per timed iteration (default 1; time is per call)");
  app.add_option("-o,--op", f.ops, "sum, prod, max, min, avg or all (comma list; default sum)")->delimiter(',');
  app.add_option("-d,--datatype", f.types, "float (float32), double (float64), int32, half (float16), bfloat16 or all")
      ->delimiter(',');
  app.add_option("-r,--root", f.root, "root of broadcast/reduce; -1 = every rank in turn (default 0)");
  app.add_option("-z,--blocking", f.blocking,
                 "0 no, 1 wait+barrier after each call, 2 wait after each call, 3 wait+barrier after each "
                 "iteration, barrier not timed (default 0)");
  app.add_option("-G,--cudagraph", f.graph, "CUDA graph launches (nccl-tests; accepted, graphs are not used)");
  app.add_option("-C,--report_cputime", f.cputime, "1 = the time columns show host time to issue the calls");
  app.add_option("-J,--output_file", f.nccl_json, "write the nccl-tests JSON document to FILE (as --json)")
      ->type_name("FILE");
  app.add_option("-R,--local_register", f.local_register,
                 "NCCL buffer registration 0/1/2 (nccl-tests; accepted, buffers are not registered)");
  app.add_option("--experiment-name", f.experiment, "experiment_name of every JSON result (default empty)");
  app.add_option("--bench-bare", f.bench.max_rounds,
                 "benchmark mode: per size, up to N alternating rounds of cairn-sweep's allreduce measurement and "
                 "a bare MPI_Allreduce loop on the same buffers; prints both busbw (see README)");
  app.add_option("--bench-loop-ms", f.bench_loop_ms, "with --bench-bare: length of one timed loop (default 0.5 ms)");
  app.add_option("--bench-size-s", f.bench.size_seconds,
                 "with --bench-bare: time budget per size (default 5 s; at least 24 rounds)");
}

// Checks the parsed nccl-tests flags; those given set the [sweep] keys (so --print-config shows them
// and --set can override them), and -J becomes the --json path.
void apply_nccl_flags(const CLI::App& app, const NcclFlags& f, cairn::CommonOptions& opts,
                      cairn::ToolSettings& settings) {
  // Each named by its flag in --print-config's origins and in errors ("-d", as "--steps" is for cairn-train).
  auto set = [&](const char* key, cairn::json value, const char* flag) {
    settings.emplace_back(std::string("sweep.") + key, std::move(value), flag);
  };
  if (app.count("-i")) {
    set("stepbytes", f.stepbytes, "-i");
    if (!app.count("-f")) set("stepfactor", 1, "-i (stepfactor 1)");
  }
  if (app.count("-d")) set("types", checked_types(f.types), "-d");
  if (app.count("-o")) set("ops", checked_ops(f.ops), "-o");
  if (app.count("-r")) {
    if (f.root < -1)
      usage(cairn::strprintf("-r/--root %lld: give a rank, or -1 for every rank in turn",
                             static_cast<long long>(f.root)));
    set("root", f.root, "-r");
  }
  if (app.count("-z")) {
    if (f.blocking < 0 || f.blocking > 3)
      usage(cairn::strprintf("-z/--blocking %lld: choose 0, 1, 2 or 3", static_cast<long long>(f.blocking)));
    set("blocking", f.blocking, "-z");
  }
  if (f.nthreads != 1) {
    usage(cairn::strprintf("-t/--nthreads %lld: cairn-sweep runs one thread per process driving one GPU; start more "
                           "MPI ranks instead (-t 1)",
                           static_cast<long long>(f.nthreads)));
  }
  if (f.ngpus != 1) {
    usage(cairn::strprintf("-g/--ngpus %lld: cairn-sweep drives one GPU per process; start one MPI rank per GPU "
                           "instead (-g 1)",
                           static_cast<long long>(f.ngpus)));
  }
  if (f.agg_iters < 1 || f.agg_iters > 1000000)
    usage(cairn::strprintf("-m/--agg_iters %lld: must be 1 or more", static_cast<long long>(f.agg_iters)));
  if (f.cputime != 0 && f.cputime != 1)
    usage(cairn::strprintf("-C/--report_cputime %lld: choose 0 or 1", static_cast<long long>(f.cputime)));
  if (app.count("-m")) set("agg_iters", f.agg_iters, "-m");
  if (app.count("-C")) set("report_cputime", f.cputime, "-C");
  if (f.local_register < 0 || f.local_register > 2)
    usage(cairn::strprintf("-R/--local_register %lld: choose 0, 1 or 2", static_cast<long long>(f.local_register)));
  if (f.graph < 0) usage(cairn::strprintf("-G/--cudagraph %lld: must be 0 or more", static_cast<long long>(f.graph)));
  if (app.count("-J")) {
    if (f.nccl_json.empty()) usage("-J/--output_file: give a file name");
    if (!opts.json_path.empty() && opts.json_path != f.nccl_json)
      usage("give one of --json and -J/--output_file, not both");
    opts.json_path = f.nccl_json;
  }
}

// Under MPI: the config, then the sweep or --bench-bare.
int run_under_mpi(int& argc, char**& argv, const cairn::CommonOptions& opts, const cairn::ToolSettings& settings,
                  NcclFlags& f, const std::vector<std::string>& args, const cairn::sweep::SweepFaults& faults) {
  // No helper threads here: MPI_THREAD_SINGLE, as a bare benchmark loop would initialise MPI.
  cairn::mpi::Session session(&argc, &argv, MPI_THREAD_SINGLE);
  cairn::Config cfg = cairn::load_tool_config(opts, settings);
  // nccl-tests' NCCL_TESTS_MIN_BW, an environment layer of its own; the provenance records the config with it.
  cairn::sweep::apply_nccl_tests_min_bw(cfg);
  cairn::provenance().config_toml = cfg.to_toml(false);
  // The [sweep] values (sizes, collectives, types) are checked before --print-config too: a config it prints is one
  // the sweep accepts.
  cairn::sweep::SweepOptions so = cairn::sweep::sweep_options(cfg);
  if (cairn::maybe_print_config(opts, cfg)) return 0;
  so.local_register = static_cast<int>(f.local_register);
  so.graph_launches = static_cast<int>(f.graph);
  so.experiment_name = f.experiment;
  so.args = args;
  so.json_path = opts.json_path;
  so.print_table = opts.json_path != "-";  // --json - owns stdout
  if (f.bench.max_rounds > 0) {
    f.bench.loop_seconds = f.bench_loop_ms / 1000.0;
    return cairn::sweep::run_bench_bare(so, f.bench);
  }
  cairn::sweep::SweepResult result;
  int code = cairn::sweep::run_sweep(cfg, so, &result, faults);
  // A stopped sweep (exit 75) has said why in its warning and table note; only a gate has a verdict to print.
  if (code != 0 && cairn::mpi::rank() == 0 && !result.verdict.empty())
    std::fprintf(stderr, "cairn-sweep: %s\n", result.verdict.c_str());
  return code;
}

}  // namespace

int cairn::sweep::sweep_main(int argc, char** argv, const SweepFaults& faults) {
  std::vector<std::string> args(argv, argv + argc);  // the JSON "args" list, as nccl-tests records it
  return cairn::run_tool("cairn-sweep", argc, argv, [&]() -> int {
    CLI::App app{"cairn-sweep: measure collective bandwidth per size and per cluster tier (nccl-tests-compatible "
                 "table on stdout; sweep.txt, sweep.json, sweep.h5 and fabric.toml under <out>/sweep/)"};
    cairn::CommonOptions opts;
    // nccl-tests owns the short options (-o is its op, -C report_cputime, -J its JSON file): --out and
    // --config keep only their long forms here.
    cairn::add_common_options(app, opts, /*short_aliases=*/false);
    // Flags given on the command line become typed [sweep] settings (ranked like --set): the positional
    // collectives and nccl-tests' -b -e -f -n -w -c -a (same letters, long names and meaning) and cairn's
    // --backend --tiers --min-busbw --keep-samples --malloc-tune are declared on their keys (cairn/sections/sweep.h).
    cairn::ToolSettings settings;
    cairn::add_section_flags(app, "sweep", settings);
    NcclFlags flags;
    add_nccl_flags(app, flags);
    cairn::parse_cli(app, argc, argv);
    apply_nccl_flags(app, flags, opts, settings);
    return run_under_mpi(argc, argv, opts, settings, flags, args, faults);
  });
}
