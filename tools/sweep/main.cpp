// cairn-sweep: collective-bandwidth sweeps (MPI or NCCL) with nccl-tests-compatible output,
// per-tier latency/bandwidth fits and fabric.toml for cairn-plan.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <optional>

#include "cairn/cli.h"
#include "cairn/error.h"
#include "cairn/log.h"
#include "cairn/mpi.h"
#include "sweep.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);  // the JSON "args" list, as nccl-tests records it
  return cairn::run_tool("cairn-sweep", argc, argv, [&]() -> int {
    CLI::App app{"cairn-sweep: measure collective bandwidth per size and per cluster tier (nccl-tests-compatible "
                 "table on stdout; sweep.txt, sweep.json, sweep.h5 and fabric.toml under <out>/sweep/)"};
    cairn::CommonOptions opts;
    cairn::add_common_options(app, opts);
    // nccl-tests owns the short options (-o is its op, -C report_cputime, -J its JSON file): drop the
    // common -o/-C aliases for this tool only and keep the long forms --out and --config.
    for (const char* name : {"--out", "--config"}) {
      if (CLI::Option* opt = app.get_option_no_throw(name)) app.remove_option(opt);
    }
    app.add_option("--config", opts.config_files,
                   "TOML config file (repeatable; later files override earlier; `include = [...]` merges others)")
        ->type_name("FILE")
        ->allow_extra_args(false);
    app.add_option("--out", opts.out, "run directory (sets [run] dir); outputs go to <out>/<stage>/")->type_name("DIR");
    std::string minbytes, maxbytes, stepbytes, backend, nccl_json, experiment;
    int64_t stepfactor = 0, iters = 0, warmup = 0, check = 0, average = 0, blocking = 0, root = 0;
    int64_t nthreads = 1, ngpus = 1, agg_iters = 1, cputime = 0, local_register = 0, graph = 0;
    double min_busbw = 0;
    std::vector<std::string> colls, types, ops, tiers;
    bool keep_samples = false, malloc_tune = false;
    app.add_option("collectives,--collectives", colls,
                   "allreduce, allgather, reducescatter, alltoall, broadcast, reduce, sendrecv or all (comma list)")
        ->delimiter(',');
    // nccl-tests' flags, same letters, long names and meaning.
    app.add_option("-t,--nthreads", nthreads, "threads per process (nccl-tests; only 1: one rank per GPU)");
    app.add_option("-g,--ngpus", ngpus, "GPUs per thread (nccl-tests; only 1: one rank per GPU)");
    app.add_option("-b,--minbytes", minbytes, "smallest size in bytes, K/M/G suffixes (default 8)");
    app.add_option("-e,--maxbytes", maxbytes, "largest size in bytes, K/M/G suffixes (default 128M)");
    app.add_option("-f,--stepfactor", stepfactor, "multiply the size by this each step (default 2)");
    app.add_option("-i,--stepbytes", stepbytes, "add this many bytes each step (implies -f 1 unless -f is given)");
    app.add_option("-n,--iters", iters, "timed iterations per size (default 20)");
    app.add_option("-m,--agg_iters", agg_iters, "calls per timed iteration (default 1; time is per call)");
    app.add_option("-w,--warmup_iters", warmup, "warm-up iterations (default 5)");
    app.add_option("-c,--check", check, "correctness-check iterations per size; 0 = off (default 1)");
    app.add_option("-o,--op", ops, "sum, prod, max, min, avg or all (comma list; default sum)")->delimiter(',');
    app.add_option("-d,--datatype", types, "float (float32), double (float64), int32, half (float16), bfloat16 or all")
        ->delimiter(',');
    app.add_option("-r,--root", root, "root of broadcast/reduce; -1 = every rank in turn (default 0)");
    app.add_option("-z,--blocking", blocking,
                   "0 no, 1 wait+barrier after each call, 2 wait after each call, 3 wait+barrier after each "
                   "iteration, barrier not timed (default 0)");
    app.add_option("-G,--cudagraph", graph, "CUDA graph launches (nccl-tests; accepted, graphs are not used)");
    app.add_option("-C,--report_cputime", cputime, "1 = the time columns show host time to issue the calls");
    app.add_option("-J,--output_file", nccl_json, "write the nccl-tests JSON document to FILE (as --json)")
        ->type_name("FILE");
    app.add_option("-a,--average", average, "time across ranks: 0 rank 0, 1 mean, 2 min, 3 max (default 1)");
    app.add_option("-R,--local_register", local_register,
                   "NCCL buffer registration 0/1/2 (nccl-tests; accepted, buffers are not registered)");
    app.add_option("--experiment-name", experiment, "experiment_name of every JSON result (default empty)");
    app.add_option("--backend", backend, "auto, mpi or nccl (default auto)");
    app.add_option("--tiers", tiers, "world, intra, inter (comma list; default world)")->delimiter(',');
    app.add_option("--min-busbw", min_busbw, "exit 3 if a table's average bus bandwidth (GB/s) is lower");
    app.add_flag("--keep-samples", keep_samples, "store every iteration's time in sweep.h5");
    app.add_flag("--malloc-tune", malloc_tune, "mallopt(M_MMAP_MAX=0, M_TRIM_THRESHOLD=1GiB) before measuring");
    cairn::sweep::BenchBareOptions bench;
    bench.max_rounds = 0;
    double bench_loop_ms = 0.5;
    app.add_option("--bench-bare", bench.max_rounds,
                   "benchmark mode: per size, up to N alternating rounds of cairn-sweep's allreduce measurement and "
                   "a bare MPI_Allreduce loop on the same buffers; prints both busbw (see README)");
    app.add_option("--bench-loop-ms", bench_loop_ms, "with --bench-bare: length of one timed loop (default 0.5 ms)");
    app.add_option("--bench-size-s", bench.size_seconds,
                   "with --bench-bare: time budget per size (default 5 s; at least 24 rounds)");
    cairn::parse_cli(app, argc, argv);

    // Flags given on the command line become typed [sweep] settings (ranked like --set).
    cairn::ToolSettings settings;
    auto set = [&](const char* key, cairn::json value) { settings.emplace_back(std::string("sweep.") + key, std::move(value)); };
    if (app.count("collectives")) set("collectives", colls);
    if (app.count("-b")) set("minbytes", minbytes);
    if (app.count("-e")) set("maxbytes", maxbytes);
    if (app.count("-i")) {
      set("stepbytes", stepbytes);
      if (!app.count("-f")) set("stepfactor", 1);
    }
    if (app.count("-f")) set("stepfactor", stepfactor);
    if (app.count("-n")) set("iters", iters);
    if (app.count("-w")) set("warmup_iters", warmup);
    if (app.count("-c")) set("check", check);
    if (app.count("-a")) set("average", average);
    // nccl-tests' flags set the [sweep] keys (so --print-config shows them and --set can override them).
    auto usage = [](const std::string& m) { throw cairn::UsageError(m); };
    if (app.count("-d")) {
      for (const auto& t : types) {
        if (t == "all") continue;
        static const char* nccl_only[] = {"int8", "uint8", "uint32", "int64", "uint64", "f8e4m3", "f8e5m2"};
        for (const char* n : nccl_only) {
          if (t == n) usage("-d/--datatype " + t + ": not measured by cairn-sweep (it has int32, half, float, double, bfloat16, all)");
        }
        try {
          cairn::sweep::parse_type(t);
        } catch (const cairn::UsageError& e) {
          usage(std::string("-d/--datatype: ") + e.what());
        }
      }
      set("types", types);
    }
    if (app.count("-o")) {
      for (const auto& op : ops) {
        if (op == "all") continue;
        if (op == "mulsum") usage("-o/--op mulsum: not measured by cairn-sweep (it has sum, prod, max, min, avg, all)");
        try {
          cairn::sweep::parse_op(op);
        } catch (const cairn::UsageError& e) {
          usage(std::string("-o/--op: ") + e.what());
        }
      }
      set("ops", ops);
    }
    if (app.count("-r")) {
      if (root < -1) usage(cairn::strprintf("-r/--root %lld: give a rank, or -1 for every rank in turn", static_cast<long long>(root)));
      set("root", root);
    }
    if (app.count("-z")) {
      if (blocking < 0 || blocking > 3) usage(cairn::strprintf("-z/--blocking %lld: choose 0, 1, 2 or 3", static_cast<long long>(blocking)));
      set("blocking", blocking);
    }
    if (nthreads != 1) {
      usage(cairn::strprintf("-t/--nthreads %lld: cairn-sweep runs one thread per process driving one GPU; start more "
                             "MPI ranks instead (-t 1)", static_cast<long long>(nthreads)));
    }
    if (ngpus != 1) {
      usage(cairn::strprintf("-g/--ngpus %lld: cairn-sweep drives one GPU per process; start one MPI rank per GPU "
                             "instead (-g 1)", static_cast<long long>(ngpus)));
    }
    if (agg_iters < 1 || agg_iters > 1000000) usage(cairn::strprintf("-m/--agg_iters %lld: must be 1 or more", static_cast<long long>(agg_iters)));
    if (cputime != 0 && cputime != 1) usage(cairn::strprintf("-C/--report_cputime %lld: choose 0 or 1", static_cast<long long>(cputime)));
    if (app.count("-m")) set("agg_iters", agg_iters);
    if (app.count("-C")) set("report_cputime", cputime);
    if (local_register < 0 || local_register > 2) usage(cairn::strprintf("-R/--local_register %lld: choose 0, 1 or 2", static_cast<long long>(local_register)));
    if (graph < 0) usage(cairn::strprintf("-G/--cudagraph %lld: must be 0 or more", static_cast<long long>(graph)));
    if (app.count("-J")) {
      if (nccl_json.empty()) usage("-J/--output_file: give a file name");
      if (!opts.json_path.empty() && opts.json_path != nccl_json) usage("give one of --json and -J/--output_file, not both");
      opts.json_path = nccl_json;
    }
    if (app.count("--backend")) set("backend", backend);
    if (app.count("--tiers")) set("tiers", tiers);
    if (app.count("--min-busbw")) set("min_busbw", min_busbw);
    if (keep_samples) set("keep_samples", true);
    if (malloc_tune) set("malloc_tune", true);

    // No helper threads here: MPI_THREAD_SINGLE, as a bare benchmark loop would initialise MPI.
    cairn::mpi::Session session(&argc, &argv, MPI_THREAD_SINGLE);
    cairn::Config cfg = cairn::load_tool_config(opts, settings);
    if (cairn::maybe_print_config(opts, cfg)) return 0;
    cairn::sweep::SweepOptions so = cairn::sweep::sweep_options(cfg);
    so.local_register = static_cast<int>(local_register);
    so.graph_launches = static_cast<int>(graph);
    so.experiment_name = experiment;
    so.args = args;
    so.json_path = opts.json_path;
    so.print_table = opts.json_path != "-";  // --json - owns stdout
    if (bench.max_rounds > 0) {
      bench.loop_seconds = bench_loop_ms / 1000.0;
      return cairn::sweep::run_bench_bare(so, bench);
    }
    cairn::sweep::SweepResult result;
    int code = cairn::sweep::run_sweep(cfg, so, &result);
    if (code != 0 && cairn::mpi::rank() == 0) std::fprintf(stderr, "cairn-sweep: %s\n", result.verdict.c_str());
    return code;
  });
}
